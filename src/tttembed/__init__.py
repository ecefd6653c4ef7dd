"""tttembed: make a frozen embedding retriever better after deployment.

Light at import time: heavy libraries (torch, transformers, faiss) load inside the
functions that need them.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
