"""Exit codes the plugin and the command line share, and the one-line form of a file that cannot be written.

A run or a command that could not do what it was asked does not pass, and
says why in one line. The codes:

| code | pytest run (the plugin) | ``python -m pytest_restore`` |
|---:|---|---|
| 0 | the audit ran and every expectation it could test was met | done |
| 1 | a grid item or an expectation failed, model calls failed, the calibration gate failed | ``compare``: a cell got worse than ``--fail-if-worse`` allows |
| 2 | interrupted (Ctrl-C; the complete report is left as it was) | a bad argument or bad input (records, report directories) |
| 3 | internal error | - |
| 4 | usage error, before any work: a bad option, ini key, data file or prompt template, or a report directory or response cache that cannot be written | - |
| 5 | no test collected | - |
| 65 | - | ``data fetch``: the file was served whole but is not the catalogue's (size or sha256); nothing kept |
| 69 | - | ``data fetch``: the source could not be reached or did not serve the file (offline, a 404, a cut download) |
| 74 | during the run, a file or directory it needs could not be written or read (a full disk under the response cache or the report, a data file removed after it was checked) | ``--out`` cannot be written (before the work or during it); ``data fetch``'s data directory |

65, 69 and 74 are ``EX_DATAERR``, ``EX_UNAVAILABLE`` and ``EX_IOERR`` of the BSD ``sysexits.h`` convention
(65 and 69 are :mod:`pytest_restore.data.catalogue`'s).
"""

from __future__ import annotations

import os
from pathlib import Path

#: A file or directory could not be written or read (``EX_IOERR``).
IO_ERROR = 74
#: A grid item, an expectation, model calls or a check failed (pytest's ``TESTS_FAILED``).
FAILED = 1
#: The run was interrupted (Ctrl-C; pytest's ``INTERRUPTED``).
INTERRUPTED = 2


def os_cause(err: OSError) -> str:
    """An ``OSError`` in words, without its file name (the caller names the place): ``No space left on device``."""
    return err.strerror or str(err) or type(err).__name__


def out_dir_problem(out_dir: str | os.PathLike[str], label: str) -> str | None:
    """Why ``out_dir`` could not be made or written into, in one line naming ``label``, or ``None``.

    Nothing is created: the nearest existing directory on the way must be a
    writable directory (a file in the way, or a read-only parent, is named).
    """
    blocked = _blocked(Path(out_dir).absolute())
    return None if blocked is None else f"{label} {out_dir}: {blocked}"


def out_file_problem(out_file: str | os.PathLike[str], label: str) -> str | None:
    """Why a file could not be written at ``out_file``, in one line naming ``label``, or ``None``.

    A directory there, a file in the way of its directory, or a read-only
    directory is named; nothing is created.
    """
    path = Path(out_file).absolute()
    if path.is_dir():
        return f"{label} {out_file}: is a directory, not a file"
    blocked = _blocked(path.parent)
    return None if blocked is None else f"{label} {out_file}: {blocked}"


def _blocked(path: Path) -> str | None:
    """What stops ``path`` from being made or written into as a directory: the nearest existing one on the way."""
    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                return f"{existing} is a file, not a directory"
            if not os.access(existing, os.W_OK | os.X_OK):
                return f"{existing} is not writable"
            return None
    return None
