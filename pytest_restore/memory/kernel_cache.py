"""Whether numba's disk cache holds the compiled kernels, asked without loading numba.

Loading numba costs a process about 0.4 s of CPU (0.7 s with its first
compiled call), which only a process that runs a kernel should pay. The
question "will the first kernel compile?" is asked earlier, by processes
that may never run one (an xdist controller whose prepared data is already
in the cache, say) only to warn that the first run compiles. So it is
answered here from numba's own file layout: a kernel's cache index is
``kernels.<name>-<line>.py<major><minor><abiflags>.nbi``, in the first of
these directories numba can write to: ``$NUMBA_CACHE_DIR/<subpath>``, the
``__pycache__`` beside ``kernels.py``, the user's cache directory
(``numba/<subpath>``), where ``<subpath>`` is the package directory's name
and the sha1 of its path. ``tests/test_performance.py`` holds this to the
paths numba itself gives the kernels' indexes.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

#: The module whose kernels numba caches (``memory/kernels.py``).
KERNELS_FILE = Path(__file__).with_name("kernels.py")


def _subpath(source: Path) -> str:
    """numba's directory for ``source`` inside a cache root: the parent's name and the sha1 of its path."""
    parent = os.path.dirname(os.path.abspath(source))
    return f"{os.path.basename(parent)}_{hashlib.sha1(parent.encode()).hexdigest()}"


def _user_cache_root() -> Path:
    """Where numba's user-wide locator keeps caches (its appdirs' ``user_cache_dir("numba")``)."""
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "numba"
    if sys.platform == "win32":  # pragma: no cover - appdirs: the local app data folder
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "numba" / "Cache"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "numba"


def cache_directories(source: Path = KERNELS_FILE) -> list[Path]:
    """The directories numba may keep ``source``'s kernels in, in the order its locators try them."""
    found = []
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        found.append(Path(numba_dir) / _subpath(source))
    found.append(source.parent / "__pycache__")
    found.append(_user_cache_root() / _subpath(source))
    return found


def index_suffix() -> str:
    """The end of every cache index name this interpreter reads (``.py311.nbi``, say)."""
    return f".py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}.nbi"


def cached_on_disk(source: Path = KERNELS_FILE) -> bool:
    """Whether numba's disk cache holds machine code of ``source``'s kernels (else the first calls compile them).

    Any of the module's indexes counts, as numba keeps one per kernel it
    compiled (a kernel called only from other kernels is compiled into them
    and has none of its own). With the compiler switched off
    (``NUMBA_DISABLE_JIT``) nothing compiles: ``True``. This only decides
    whether to warn that the first run compiles.
    """
    if os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0"):
        return True
    prefix, suffix = f"{source.stem}.", index_suffix()
    for directory in cache_directories(source):
        try:
            names = os.listdir(directory)
        except OSError:
            continue
        if any(name.startswith(prefix) and name.endswith(suffix) for name in names):
            return True
    return False
