"""The feedback store's schema as the previous release (before ``qhash``) made it: the
statements of ``tttembed.loop.store.SCHEMA`` and ``tttembed.loop.clickstore.CLICK_SCHEMA``
at that release, copied verbatim, so a test builds a store the old way and opens it
with the new code."""

OLD_CLICK_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS interventions (
        search_id TEXT PRIMARY KEY, kind TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS impressions (
        search_id TEXT PRIMARY KEY, ids TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS events (
        search_id TEXT NOT NULL, doc_id TEXT NOT NULL, session_id TEXT NOT NULL,
        action TEXT NOT NULL, client_id TEXT NOT NULL, task TEXT NOT NULL,
        query TEXT NOT NULL, shown_rank INTEGER NOT NULL, ordinal INTEGER NOT NULL,
        dwell_ms DOUBLE PRECISION NOT NULL, event_time DOUBLE PRECISION NOT NULL,
        created DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (search_id, doc_id, session_id, action))""",
    "CREATE INDEX IF NOT EXISTS events_created ON events (created)",
    "CREATE INDEX IF NOT EXISTS events_session ON events (session_id, task, query)",
)


OLD_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS searches (
        search_id TEXT PRIMARY KEY, task TEXT NOT NULL, query TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, version TEXT, ids TEXT NOT NULL,
        kind TEXT NOT NULL, replica TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS searches_created ON searches (created)",
    # the learner's cursor: (created, search_id) in index order, whatever the statistics
    "CREATE INDEX IF NOT EXISTS searches_cursor ON searches (created, search_id)",
    """CREATE TABLE IF NOT EXISTS feedback (
        fkey TEXT NOT NULL, doc_id TEXT NOT NULL, task TEXT NOT NULL, query TEXT NOT NULL,
        search_id TEXT NOT NULL, label DOUBLE PRECISION NOT NULL,
        created DOUBLE PRECISION NOT NULL, PRIMARY KEY (fkey, doc_id))""",
    """CREATE TABLE IF NOT EXISTS rewards (
        task TEXT NOT NULL, query TEXT NOT NULL, doc_id TEXT NOT NULL,
        reward DOUBLE PRECISION, created DOUBLE PRECISION NOT NULL, source TEXT NOT NULL,
        paid INTEGER NOT NULL, trusted INTEGER NOT NULL,
        PRIMARY KEY (task, query, doc_id))""",
    "CREATE INDEX IF NOT EXISTS rewards_created ON rewards (created)",
    "CREATE INDEX IF NOT EXISTS feedback_created ON feedback (created)",
    """CREATE TABLE IF NOT EXISTS spend (
        id TEXT PRIMARY KEY, source TEXT NOT NULL, pairs INTEGER NOT NULL,
        created DOUBLE PRECISION NOT NULL)""",
    # the pairs of each open reservation (spend.py): sent 0 before the judge is asked,
    # 1 once it is, 2 when a kill lost its answer (paid: not charged again)
    """CREATE TABLE IF NOT EXISTS reserved (
        spend_id TEXT NOT NULL, source TEXT NOT NULL, task TEXT NOT NULL,
        query TEXT NOT NULL, doc_id TEXT NOT NULL, sent INTEGER NOT NULL,
        PRIMARY KEY (task, query, doc_id))""",
    """CREATE TABLE IF NOT EXISTS click_rewards (
        task TEXT NOT NULL, query TEXT NOT NULL, doc_id TEXT NOT NULL,
        reward DOUBLE PRECISION NOT NULL, clicks INTEGER NOT NULL,
        impressions INTEGER NOT NULL, exposure DOUBLE PRECISION, variance DOUBLE PRECISION,
        raw DOUBLE PRECISION, mode TEXT NOT NULL, basis TEXT NOT NULL,
        interventions INTEGER NOT NULL, judge DOUBLE PRECISION, source TEXT NOT NULL,
        created DOUBLE PRECISION NOT NULL, trusted INTEGER NOT NULL,
        PRIMARY KEY (task, query, doc_id))""",
    "CREATE INDEX IF NOT EXISTS click_rewards_created ON click_rewards (created)",
    *OLD_CLICK_SCHEMA,
)
