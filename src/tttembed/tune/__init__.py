"""Fine-tuning the embedder on judged pairs, beside the query-side states: the export of
what the ledger paid for (:mod:`.pairs`, :mod:`.export`) and the contrastive trainer
(:mod:`.train`) that ``benchmarks/bench_finetune.py`` measures against the states."""
