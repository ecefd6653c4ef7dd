"""Integrations with third-party frameworks (optional dependencies, imported on use).

* :mod:`tttembed.integrations.langchain` / :mod:`tttembed.integrations.llamaindex`: each
  framework's ``TTTEmbedRetriever`` (``/v1/search``), ``TTTEmbedChainRetriever``
  (``/v1/chain/search``) and embeddings (``/v1/embeddings``) over a ``tttembed serve``,
  with ``record_click`` / ``record_label`` for the closed loop (extras ``langchain``,
  ``llamaindex``); :mod:`tttembed.integrations.client` is the HTTP they share.
* :mod:`tttembed.integrations.adapters`: in-process embeddings (no server).
* :mod:`tttembed.integrations.mteb`: an adapted (or raw) retriever as an MTEB 2.x model,
  so that MTEB's own evaluator scores TTT-Embed's vectors (``tttembed.api.mteb_model``).
"""
