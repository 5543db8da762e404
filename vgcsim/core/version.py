"""This package's version: the one source, read by the provenance of every file vgcsim writes
(``vgcsim.__version__`` re-exports it; core imports nothing above itself). It equals the
distribution's version in pyproject.toml (a test compares it with the installed metadata)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
