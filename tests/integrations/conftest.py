"""The in-process adapters are checked on the serving tests' tiny pets index and states
(the same fixture: adapters and server must adapt identically)."""

from tests.serve.conftest import setup  # noqa: F401  (the fixture, shared)
