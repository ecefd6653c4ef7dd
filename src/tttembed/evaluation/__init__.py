"""Evaluation: does adaptation pay? Tasks, protocols, analyses, the runner, reports and
the baselines (:mod:`.baselines`); the metrics and paired statistics they use live in
:mod:`tttembed.metrics`. The public functions are in :mod:`.api`."""
