"""The one version string (pyproject reads it: ``[tool.setuptools.dynamic]``)."""

__version__ = "0.1.0"
