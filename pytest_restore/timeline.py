"""When each phase of a run starts and ends, for a benchmark to read: off unless ``PYTEST_RESTORE_TIMELINE`` names a file.

A run's wall time is spread over processes (the controller, xdist's workers)
and threads (the report's); a profile of one process does not say what the
session waited for. With ``PYTEST_RESTORE_TIMELINE=/path/to/file`` set, every
process of the run appends one JSON line per phase to that file: its name,
the process (``main``, or an xdist worker's id) and thread, its start and end
(``time.time()``, comparable across processes) and the process's CPU seconds
over it. ``benches/bench_tail.py`` runs a grid with it and prints the
timeline. Nothing is written, and nothing costs more than one check of the
environment, when it is unset; it is never user output.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator

#: The environment variable naming the file the phases go to (unset: no timeline).
TIMELINE_ENV = "PYTEST_RESTORE_TIMELINE"


def _where() -> str | None:
    return os.environ.get(TIMELINE_ENV) or None


def _write(path: str, line: dict[str, object]) -> None:
    """One line appended in one write: the run's processes share the file (``O_APPEND`` keeps lines whole)."""
    data = (json.dumps(line) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _process() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER") or "main"


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the ``with`` block as the phase ``name`` (written even when it raises, marked so)."""
    path = _where()
    if path is None:
        yield
        return
    start, cpu = time.time(), time.process_time()
    failed = True
    try:
        yield
        failed = False
    finally:
        line: dict[str, object] = {
            "name": name, "process": _process(), "pid": os.getpid(), "thread": threading.current_thread().name,
            "start": start, "end": time.time(), "cpu": time.process_time() - cpu,
        }
        if failed:
            line["raised"] = True
        with contextlib.suppress(OSError):  # a timeline that cannot be written never fails the run
            _write(path, line)


def mark(name: str) -> None:
    """One instant of the run (a phase of no length): when something happened."""
    with phase(name):
        pass
