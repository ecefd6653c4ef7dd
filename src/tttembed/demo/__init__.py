"""The offline demo: a corpus built from this Python's standard-library docstrings, the
questions and graded labels the project ships (``queries.jsonl``, ``qrels.tsv``), and the
demo pipeline."""
