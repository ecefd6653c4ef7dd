"""The PostgreSQL registry's tables (:mod:`tttembed.registry.postgres` says what each
holds): created under the registry's schema lock by the first process that opens the
database. No key holds free text a user sends: names, content ids and sequence numbers."""

from __future__ import annotations

#: The advisory lock a write holds: numbering a new version, dropping one ("regwrite").
WRITE_LOCK = 0x7265_6777_7269_7465

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS registry_manifest (key TEXT PRIMARY KEY, doc TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS registry_versions (number INTEGER PRIMARY KEY, "
    "id TEXT NOT NULL UNIQUE, manifest TEXT NOT NULL, state BYTEA, sidecar BYTEA, "
    "parent TEXT, created TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS registry_pointer (key TEXT PRIMARY KEY, served TEXT, "
    "generation BIGINT NOT NULL, candidate TEXT, updated DOUBLE PRECISION NOT NULL)",
    "CREATE TABLE IF NOT EXISTS registry_history (seq BIGSERIAL PRIMARY KEY, "
    "entry TEXT NOT NULL)",
    # pinned versions (by number): retention never drops them
    "CREATE TABLE IF NOT EXISTS registry_pins (number INTEGER PRIMARY KEY, "
    "pinned TEXT NOT NULL)",
    "INSERT INTO registry_pointer (key, served, generation, candidate, updated) "
    "VALUES ('served', NULL, 0, NULL, 0) ON CONFLICT (key) DO NOTHING",
    # a version row never changes: the database refuses an UPDATE of one
    "CREATE OR REPLACE FUNCTION registry_version_is_immutable() RETURNS trigger AS $$ "
    "BEGIN RAISE EXCEPTION 'registry versions are immutable (register a new one)'; END "
    "$$ LANGUAGE plpgsql",
    "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = "
    "'registry_versions_immutable') THEN CREATE TRIGGER registry_versions_immutable "
    "BEFORE UPDATE ON registry_versions FOR EACH ROW EXECUTE FUNCTION "
    "registry_version_is_immutable(); END IF; END $$",
)


__all__ = ["SCHEMA", "WRITE_LOCK"]
