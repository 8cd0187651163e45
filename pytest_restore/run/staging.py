"""The report directory's replacement: written beside it, swapped in whole, orphans removed.

A report is written into a fresh staging directory beside its target and
swapped into place with two renames, so a whole report always sits under
one of the two names. A writer that dies (a kill, a second Ctrl-C) leaves its
staging directory behind: the names carry the writer's process id, and the
next session removes those whose process has ended.

A report directory that is a symbolic link is written through: the directory
it points to is the one replaced (beside it, in its own parent), and the link
stays. The staging directory is made with the process's umask, as its files
are, so the report's directory and files have the permissions any other
directory and file the user makes would have.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from pytest_restore.exits import out_dir_problem

#: Files only a report (or the calibration gate's partial one) holds: a directory with one of them is ours to replace.
REPORT_MARKERS = ("summary.json", "report.md", "records.jsonl", "calibration.json")


def through_link(target: Path) -> Path:
    """The directory a report for ``target`` replaces: what a symbolic link points to, else ``target``."""
    return Path(os.path.realpath(target)) if target.is_symlink() else target


def not_a_report(target: Path) -> str | None:
    """Why the existing ``target`` must not be replaced by a report (it is a directory of something else), or ``None``.

    A report directory is replaced whole, its old files deleted; a directory
    given by mistake (``.``, the project, a data folder) must never be, nor
    one a symbolic link given by mistake points to.
    """
    path = through_link(target).absolute()
    if not path.is_dir():
        return None
    if path == Path.cwd() or path in Path.cwd().parents:
        return f"{path} is the directory the run is in (or holds it): a report directory is replaced whole"
    if any(path.iterdir()) and not any((path / name).is_file() for name in REPORT_MARKERS):
        return f"{path} holds files but no report (no summary.json or report.md): a report directory is replaced whole"
    return None


def report_dir_problem(report_dir: str, where: str = "--restore-report-dir") -> str | None:
    """Why the report directory could not be made, or must not be replaced, in one line naming ``where`` it was given, or ``None``."""
    refused = not_a_report(Path(report_dir))
    return f"{where} {report_dir}: {refused}" if refused else out_dir_problem(report_dir, where)


def partial_dir(report_dir: Path) -> Path:
    """Where a partial report goes: beside the report directory, never in it."""
    return report_dir.with_name(report_dir.name + ".partial")


def swap_into_place(staging: Path, target: Path) -> None:
    """Replace ``target`` with the directory ``staging`` as a whole.

    Two renames in one directory: the old report is moved aside, the new one
    moved in, then the old one deleted. No file of the old report survives
    beside the new one, and at every moment a whole report sits under one of
    the two names.
    """
    refused = not_a_report(target)
    if refused is not None:  # checked at the start too; a directory made since is left alone
        raise NotADirectoryError(f"not replaced: {refused}")
    target = through_link(target)  # the link stays; the directory it points to is replaced
    old: Path | None = None
    if target.exists() or target.is_symlink():
        old = target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.old")
        os.replace(target, old)
    os.replace(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def staging_dir(target: Path) -> Path:
    """A fresh, empty directory beside ``target`` to write its replacement in: ``.NAME.PID.RANDOM.tmp``.

    The process id in the name lets a later session tell an orphan (its
    writer was killed, or quit on a second Ctrl-C) from a directory another
    live session is writing: :func:`remove_orphans` removes only the former.
    """
    target = through_link(target)  # beside the directory it replaces: one rename swaps it in
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_orphans(target)
    while True:
        # not tempfile.mkdtemp: its 0700 would make the report the one directory of the user's
        # that others cannot read while its files can be; os.mkdir applies the umask as open does
        path = target.parent / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            path.mkdir(0o777)
        except FileExistsError:
            continue
        return path


def remove_orphans(target: Path, *, own: bool = False) -> None:
    """Remove the staging and set-aside directories of ``target`` whose writing process has ended.

    ``own``: this process's too (it is quitting without its report). Names
    without a process id (``.NAME.RANDOM.tmp``, as earlier versions made them)
    are orphans too.
    """
    target = through_link(target)
    for path in target.parent.glob(f".{target.name}.*"):
        parts = path.name[len(target.name) + 2 :].split(".")
        if path.suffix not in (".tmp", ".old") or not path.is_dir():
            continue
        if len(parts) == 3 and parts[0].isdigit():
            pid = int(parts[0])
            if pid == os.getpid() and not own:
                continue
            if pid != os.getpid() and _alive(pid):
                continue
        elif len(parts) != 2:
            continue  # another name that only starts like ours (``.NAME.partial.*``)
        shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` is running (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists, owned by someone else
    return True
