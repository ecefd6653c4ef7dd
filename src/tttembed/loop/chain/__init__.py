"""The chain learner (``tttembed loop --chain``, or ``serve --learn`` with a chain
registry): the second learner of the loop's house, beside the state learner of
:mod:`tttembed.loop`.

It learns chain encoder versions from the chain searches the server logged, and shares
with the state learner what both pay and read through: the judge and its ledger
(:mod:`tttembed.loop.judge`), the spend account and the store
(:mod:`tttembed.loop.store`), the drift audit (:mod:`tttembed.loop.auditor`) and the
coordination record. Its own parts:

* :mod:`.run`: the loop (``ChainLoop``): judging, a cycle every ``--learn-every`` rewards;
* :mod:`.learn`: one cycle (``ChainLearner``): the traffic read back, what to train on;
* :mod:`.promote`: the candidate's training, held-out check and registration;
* :mod:`.rows`: the stored chain searches read back, held-out questions, relevant rows.

Nothing in :mod:`tttembed.loop` outside this package imports it but the CLI's entry.
"""
