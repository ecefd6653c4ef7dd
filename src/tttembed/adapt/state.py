"""The learned state: one scope's group vectors, their alphas, and the manifest.

On disk a state is ``vectors.npz`` (written with ``np.savez``: plain numeric and unicode
arrays only, readable with ``np.load(allow_pickle=False)``) plus a JSON sidecar
``vectors.json`` next to it with the same manifest, for people and tools. Both are
written whole or not at all, together (:func:`tttembed.core.io.atomic_files`: both are
written and synced before either replaces the old one; the ``.npz`` is renamed last, so a
failure such as a full disk leaves the old pair, never a new ``.npz`` that looks complete),
under the file's writer lock (a second writer gets a clear error).

Loading validates everything with the file's path in the error: readable archive, known
format, scope and keys of that scope, array shapes and the manifest's dimension and group
count, finite vectors, alphas in [0, 1], non-negative counts.

npz members: ``vectors`` (G, d) float32, ``alpha`` (G,) float64, ``n_g`` (G,) int64,
``keys`` (G,) unicode (group keys, see :mod:`tttembed.adapt.scopes`) and ``manifest``,
a 0-d unicode array holding the manifest as JSON (hyperparameters included).

One scope per file. To combine scopes, keep one file per scope and apply them with
:func:`tttembed.adapt.apply.apply_states`: a query uses the most specific state that
has its key (query > task > global); the others are ignored for that query.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import Any, Union

import numpy as np

from tttembed._version import __version__
from tttembed.adapt.parts import StateParts, read_parts
from tttembed.adapt.scopes import (
    GLOBAL_KEY,
    MIXED,
    QUERY_KEY,
    check_state_scope,
    key_scopes,
)
from tttembed.core.errors import ConfigError, DataError, StateMismatch
from tttembed.core.io import (
    atomic_files,
    dumps,
    refuse_existing,
    writer_lock,
)
from tttembed.types import PathLike

FORMAT = "tttembed-state/1"
FILENAME = "vectors.npz"


@dataclass(frozen=True, eq=False)
class AdaptState:
    """One scope's learned vectors and everything needed to refuse a wrong use.

    ``keys[g]`` names group ``g``; ``vectors[g]`` is ``v_g``; ``alpha[g]`` its magnitude
    (``n_g / (n_g + 1)`` by default). ``identity`` / ``dim`` are the embedder's (a state applies only
    to query vectors of that embedder). ``budget`` is the number of scored pairs used;
    ``corpus_fingerprint`` the corpus of the index it was learned on ("" when learned
    across several corpora). ``pairs`` counts the reward pairs (requested, served from the
    ledger, paid, missing; for a dry run: requested, in the ledger, to pay), ``final_loss``
    each group's loss (not saved) and ``source`` the file it was loaded from.
    ``alpha_asked`` is how alpha was asked (``"rule"``, ``"auto"`` or a number) and
    ``alpha_chosen`` what ``alpha`` holds (``"rule"`` = ``n_g / (n_g + 1)``, or a number;
    ``auto`` picks one); ``crossval`` the reward cross-validation behind it
    (:meth:`tttembed.adapt.crossval.CrossValidation.as_dict`; None when none was run).
    ``rewarded``: digests of the texts of the queries whose rewards made the state
    (:func:`tttembed.data.queries.query_digest`), so that metrics on them can be flagged.
    Files written before these fields load as ``"rule"`` / ``"rule"`` / None / ().

        >>> state = tt.learn(index, "data/scifact", scorer=tt.load_scorer("bm25", index=index))
        >>> state.save("vectors.npz")
    """

    scope: str
    keys: tuple[str, ...]
    vectors: np.ndarray
    alpha: np.ndarray
    n_g: np.ndarray
    identity: str
    dim: int
    objective: str = "kd"
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    embedder: str = ""
    scorer: str = ""
    reward_mapping: str = ""
    budget: int = 0
    created: str = ""
    version: str = __version__
    corpus_fingerprint: str = ""
    pairs: dict[str, int] = field(default_factory=dict)
    dry_run: bool = False
    final_loss: np.ndarray | None = field(default=None, repr=False)
    source: str = ""
    alpha_asked: str = "rule"
    alpha_chosen: str = "rule"
    crossval: dict[str, Any] | None = field(default=None, repr=False)
    rewarded: tuple[str, ...] = field(default=(), repr=False)
    query_ids: tuple[str, ...] = field(default=(), repr=False)
    audit: dict[str, Any] | None = field(default=None, repr=False)
    method: str = ""
    selection: dict[str, Any] | None = field(default=None, repr=False)
    parts: StateParts = field(default_factory=StateParts, repr=False)

    def __post_init__(self) -> None:
        check_state_scope(self.scope)
        keys = tuple(str(k) for k in self.keys)
        vectors = np.ascontiguousarray(self.vectors, dtype=np.float32)
        alpha = np.asarray(self.alpha, dtype=np.float64).reshape(-1)
        n_g = np.asarray(self.n_g, dtype=np.int64).reshape(-1)
        g = len(keys)
        if vectors.shape != (g, int(self.dim)) or alpha.shape != (g,) or n_g.shape != (g,):
            raise DataError(
                f"state arrays disagree: {g} keys, vectors {vectors.shape}, "
                f"alpha {alpha.shape}, n_g {n_g.shape}, dim {self.dim}"
            )
        if len(set(keys)) != g:
            raise DataError("state group keys must be unique")
        check_query_keys(self.scope, keys)
        if self.query_ids and len(self.query_ids) != g:
            raise DataError(f"{len(self.query_ids)} query ids for {g} query-wise groups")
        if not (np.isfinite(vectors).all() and np.isfinite(alpha).all()):
            raise DataError("state vectors or alphas are not finite (nan or inf)")
        if ((alpha < 0) | (alpha > 1)).any():
            raise DataError("state alphas must lie in [0, 1]")
        created = self.created or datetime.now(timezone.utc).isoformat(timespec="seconds")
        parts = self.parts.checked(g, int(self.dim))
        for name, value in (("keys", keys), ("vectors", vectors), ("alpha", alpha),
                            ("n_g", n_g), ("dim", int(self.dim)), ("created", created),
                            ("parts", parts)):
            object.__setattr__(self, name, value)

    def manifest(self) -> dict[str, Any]:
        """Everything but the arrays, JSON-ready."""
        return {
            "format": FORMAT, "scope": self.scope, "groups": len(self.keys),
            "identity": self.identity, "embedder": self.embedder, "dim": self.dim,
            "objective": self.objective, "hyperparameters": dict(self.hyperparameters),
            "scorer": self.scorer, "reward_mapping": self.reward_mapping,
            "budget": int(self.budget), "rewarded_queries": int(self.n_g.sum()),
            "created": self.created, "tttembed_version": self.version,
            "corpus_fingerprint": self.corpus_fingerprint, "pairs": dict(self.pairs),
            "alpha_asked": self.alpha_asked, "alpha_chosen": self.alpha_chosen,
            "crossval": self.crossval, "rewarded": list(self.rewarded),
            "query_ids": list(self.query_ids), "audit": self.audit,
            "method": self.method, "selection": self.selection,
            **({"parts": self.parts.describe()} if not self.parts.empty else {}),
        }

    @property
    def tasks(self) -> list[str]:
        """The tasks this state applies to (``["*"]``: every task)."""
        return list(self._tasks)

    @cached_property
    def _tasks(self) -> tuple[str, ...]:
        if self.scope == "global":
            return ("*",)
        if key_scopes(self.scope) == ("task",):
            return self.keys
        return tuple(dict.fromkeys(k.split("/", 1)[0] for k in self.keys))

    @property
    def names(self) -> tuple[str, ...]:
        """How reports name the groups: the keys, or for a query-wise state the
        ``task/qid`` each text had where it was learned (the keys are text digests)."""
        return tuple(self.query_ids) or self.keys

    @property
    def label(self) -> str:
        """How the CLI names it: its file, else its scope."""
        return self.source or f"{self.scope}-wise state"

    def save(self, path: PathLike, *, overwrite: bool = False) -> Path:
        """Write the state (``.npz`` + ``.json`` sidecar); refuses to replace a file unless
        ``overwrite``. Returns the ``.npz`` path.

            >>> state.save("vectors.npz")
        """
        return save_state(path, self, overwrite=overwrite)

    @cached_property
    def _rows(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}

    def index(self) -> dict[str, int]:
        """Group key -> row (built once per state: a server with 10,000 task keys looks a
        request's key up without rebuilding it; treat it as read-only)."""
        return self._rows


#: A learned state, or the path of its file (what ``search``, serving and the framework
#: adapters take).
StateLike = Union[AdaptState, PathLike]


def state_path(path: PathLike) -> Path:
    """``path`` itself, or ``path/vectors.npz`` when ``path`` is a directory."""
    p = Path(path)
    return p / FILENAME if p.is_dir() else p


def save_state(path: PathLike, state: AdaptState, *,
               overwrite: bool = True) -> Path:
    """Write ``state`` to ``path`` (a ``.npz`` file or a directory) and its JSON sidecar.

    Returns the ``.npz`` path. Parent directories are created. With ``overwrite=False``
    an existing file is an error."""
    p = state_path(path)
    if p.suffix != ".npz":
        raise DataError(f"state file must end with .npz: {p}", fix="e.g. out/vectors.npz")
    if state.dry_run or (not state.keys and state.method != "auto"):
        raise DataError("nothing to save: the state holds no learned vector "
                        + ("(a dry run)" if state.dry_run else "(no query was rewarded)"),
                        path=p)
    manifest = state.manifest()
    keys = np.array(state.keys, dtype=str)
    arrays = {"vectors": state.vectors, "alpha": state.alpha, "n_g": state.n_g,
              "keys": keys, "manifest": np.array(json.dumps(manifest, sort_keys=True)),
              **state.parts.arrays()}
    sidecar = p.with_suffix(".json")
    with writer_lock(p):
        refuse_existing(p, overwrite, "state file")
        for stale in (*p.parent.glob(f".{p.name}.tmp-*"), *p.parent.glob(f".{sidecar.name}.tmp-*")):
            stale.unlink(missing_ok=True)  # left by a killed writer
        with atomic_files(sidecar, p) as (js, npz):  # the .npz last: the commit point
            js.write((dumps(manifest) + "\n").encode("utf-8"))
            np.savez(npz, **arrays)  # type: ignore[arg-type]
    return p


def load_state(
    path: PathLike,
    *,
    expected_identity: str | None = None,
    expected_dim: int | None = None,
) -> AdaptState:
    """Read a state; StateMismatch if it was learned for another embedder or dimension."""
    p = state_path(path)
    if not p.is_file():
        raise DataError("state file not found", path=p, fix="run `tttembed learn` to make one")
    manifest, arrays, parts = _read(p)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DataError(f"unknown state format (expected {FORMAT})", path=p)
    try:
        check_loaded(manifest, arrays)
        state = AdaptState(
            scope=manifest["scope"], keys=tuple(arrays["keys"].tolist()),
            vectors=arrays["vectors"], alpha=arrays["alpha"], n_g=arrays["n_g"],
            identity=manifest["identity"], dim=int(manifest["dim"]),
            objective=manifest.get("objective", ""),
            hyperparameters=manifest.get("hyperparameters", {}),
            embedder=manifest.get("embedder", ""), scorer=manifest.get("scorer", ""),
            reward_mapping=manifest.get("reward_mapping", ""),
            budget=int(manifest.get("budget", 0)), created=manifest.get("created", ""),
            version=manifest.get("tttembed_version", ""),
            corpus_fingerprint=manifest.get("corpus_fingerprint", ""),
            pairs=dict(manifest.get("pairs", {})), source=str(p),
            alpha_asked=str(manifest.get("alpha_asked", "rule")),  # older files: the rule
            alpha_chosen=str(manifest.get("alpha_chosen", "rule")),
            crossval=manifest.get("crossval"),
            rewarded=tuple(str(d) for d in manifest.get("rewarded", ())),
            query_ids=tuple(str(q) for q in manifest.get("query_ids", ())),
            audit=manifest.get("audit"), method=str(manifest.get("method") or ""),
            selection=manifest.get("selection"), parts=parts,
        )
    except StateMismatch as exc:
        raise StateMismatch(f"{p}: {exc}") from exc
    except (DataError, ConfigError) as exc:
        raise DataError(str(exc), path=p, fix="write it again with `tttembed learn`") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"corrupt state manifest ({type(exc).__name__}: {exc})", path=p,
                        fix="write it again with `tttembed learn`") from exc
    if expected_identity is not None and state.identity != expected_identity:
        raise StateMismatch(
            f"{p}: state was learned for embedder {state.identity!r}, not {expected_identity!r}; "
            "learn a state with this embedder"
        )
    if expected_dim is not None and state.dim != int(expected_dim):
        raise StateMismatch(
            f"{p}: state has dimension {state.dim}, the query vectors have {expected_dim}; "
            "learn a state with this embedder"
        )
    return state


def _read(p: Path) -> tuple[Any, dict[str, np.ndarray], StateParts]:
    """A state file's manifest, arrays and parts, or a DataError naming the file."""
    try:
        with np.load(p, allow_pickle=False) as data:
            manifest = json.loads(str(data["manifest"][()]))
            arrays = {k: np.array(data[k]) for k in ("vectors", "alpha", "n_g", "keys")}
            return manifest, arrays, read_parts(data)
    except DataError as exc:
        raise DataError(str(exc), path=p, fix="write it again with `tttembed learn`") from exc
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
            json.JSONDecodeError) as exc:
        raise DataError(f"not a readable state file ({type(exc).__name__})", path=p,
                        fix="write it again with `tttembed learn`") from exc


def check_loaded(manifest: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
    """What a state file must satisfy beyond :class:`AdaptState`'s own checks (the caller
    adds the path): the manifest's dim, group count and scope agree with the arrays, the
    keys fit the scope, the numbers are numbers, every vector row is finite."""
    scope = check_state_scope(str(manifest["scope"]))
    dim, vectors, keys = manifest["dim"], arrays["vectors"], arrays["keys"]
    if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
        raise DataError(f"manifest dimension {dim!r} is not a positive integer")
    if vectors.ndim != 2 or vectors.shape[1] != dim:
        raise DataError(f"manifest dimension is {dim} but the vectors have shape "
                        f"{vectors.shape}")
    for name, kinds in (("vectors", "fiu"), ("alpha", "fiu"), ("n_g", "iu"), ("keys", "U")):
        if arrays[name].dtype.kind not in kinds:
            raise DataError(f"{name} has dtype {arrays[name].dtype}, not a "
                            f"{'unicode' if kinds == 'U' else 'numeric'} array")
    if keys.ndim != 1 or manifest.get("groups", len(keys)) != len(keys):
        raise DataError(f"manifest counts {manifest.get('groups')} groups, the file holds "
                        f"keys of shape {keys.shape}")
    bad = np.flatnonzero(~np.isfinite(vectors.astype(np.float64)).all(axis=1))
    if len(bad):
        raise DataError(f"vector row {int(bad[0])} (group {str(keys[bad[0]])!r}) is not "
                        f"finite (nan or inf); {len(bad)} such row(s)")
    for name in ("crossval", "selection"):
        if not isinstance(manifest.get(name) or {}, dict):
            raise DataError(f"the manifest's {name} is not a JSON object")
    if (arrays["n_g"] < 0).any():
        raise DataError("n_g (rewarded queries per group) holds negative counts")
    if scope == "global" and keys.tolist() not in ([], [GLOBAL_KEY]):
        raise DataError(f"a global state has the one key {GLOBAL_KEY!r}, not {keys.tolist()[:3]}")
    check_query_keys(scope, tuple(keys.tolist()))


def check_query_keys(scope: str, keys: Sequence[str]) -> None:
    """Query-wise keys name query texts (``task/#digest``); a file keyed by query id (made
    before keys were texts, or by hand) cannot prove which queries it belongs to."""
    if scope == MIXED:
        bad = [k for k in keys if "/" in k and not QUERY_KEY.fullmatch(k)]
    else:
        query = key_scopes(scope) == ("query",)
        bad = [k for k in keys if not QUERY_KEY.fullmatch(k)] if query else []
    if bad:
        raise StateMismatch(
            f"query-wise key {bad[0]!r} does not name a query text ('<task>/#<digest>'): "
            "this state was keyed by query id (ids are file-local, so it cannot prove "
            "which queries it belongs to); learn it again with `tttembed learn --scope query`")


def load_states(states: StateLike | Sequence[StateLike], identity: str, dim: int
                ) -> tuple[AdaptState, ...]:
    """One state or several (objects or files), loaded and checked against the embedder
    ``identity`` / ``dim`` they will adapt; a state without vectors (a dry run) is refused."""
    items = [states] if isinstance(states, (AdaptState, str, os.PathLike)) else list(states)
    loaded = tuple(s if isinstance(s, AdaptState) else load_state(s) for s in items)
    for st in loaded:
        if st.identity != identity or int(st.dim) != int(dim):
            raise StateMismatch(f"{st.label}: learned for embedder {st.identity!r} (dim "
                                f"{st.dim}), not {identity!r} (dim {dim})")
        if st.dry_run or (not len(st.keys) and st.method != "auto"):
            raise ConfigError(f"{st.label} holds no vector (a dry run?); learn a state first")
    return loaded
