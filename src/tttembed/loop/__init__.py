"""The closed loop (METHOD.md Part 3): served queries -> judged pairs (a background judge
within a budget, people's feedback) -> re-learned states -> the guard against the served
version -> a registered version, promoted or refused -> every server reloads it.

Modules: ``store`` (traffic, feedback and rewards; SQLite or ``postgres``), ``judge``,
``learner``, ``promote``, ``drift``, ``run`` (the learner process), ``status`` (what
``GET /v1/loop`` reports), ``config`` (:class:`~tttembed.loop.config.LoopConfig`).
"""
