"""The user's cache directory: where pytest-restore keeps what serves every project of one user.

The fetched datasets (``data/catalogue.py``) and tiktoken's parsed ranks
(``data/tokens.py``) live under it. One rule, the XDG base directory one:
``$XDG_CACHE_HOME/pytest-restore`` when that variable is set and not empty,
else ``~/.cache/pytest-restore``. Standard library only, so that the token
counter, which every process imports, pays nothing for it.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/pytest-restore``, else ``~/.cache/pytest-restore`` (the directory need not exist)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pytest-restore"
