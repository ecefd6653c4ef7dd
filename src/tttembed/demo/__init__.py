"""The offline demo: a corpus built from this Python's standard-library docstrings, the
questions and graded labels the project ships (``queries.jsonl``, ``qrels.tsv``), and the
demo pipeline (:func:`run_demo`; :func:`export_demo` writes the task as a BEIR folder)."""

from __future__ import annotations

from tttembed.demo.run import DemoResult, export_demo, run_demo

__all__ = ["DemoResult", "export_demo", "run_demo"]
