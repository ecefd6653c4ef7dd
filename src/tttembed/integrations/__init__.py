"""Integrations with third-party frameworks (optional dependencies, imported on use).

* :mod:`tttembed.integrations.mteb`: an adapted (or raw) retriever as an MTEB 2.x model,
  so that MTEB's own evaluator scores TTT-Embed's vectors (``tttembed.api.mteb_model``).
"""
