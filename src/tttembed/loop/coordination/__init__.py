"""What the learner and the serving replicas share besides versions: the learner's record
and heartbeat, the one-learner lock, the replicas' reports and the candidate under an
online test (:class:`Coordination`), as files in a folder registry or rows in a
PostgreSQL one, opened beside the registry by :func:`open_coordination`."""

from tttembed.loop.coordination.base import REPLICA_FRESH_S, Coordination, LockLost, holder
from tttembed.loop.coordination.open import open_coordination

__all__ = ["REPLICA_FRESH_S", "Coordination", "LockLost", "holder", "open_coordination"]
