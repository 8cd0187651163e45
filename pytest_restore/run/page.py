"""``report.html``'s data made in a fresh process while the report's statistics and figure are made here.

What a session waits for after its last cell is the report, and the largest
part of it is the page's data: every record's story with the texts of the
units it names, as gzipped JSON (on the 500-question grid, 7 of the report's
12 CPU seconds, reading the data's texts included). It depends on the records
and the data file only, not on the statistics, the tables or the figure, which
take most of the rest; both are CPU-bound Python, and threads would share one
interpreter lock. So, when the machine has a second core, the page's data is
made by a plain ``python -c`` process (as ``data/tokens.count_in_processes``
counts tokens; not ``multiprocessing``, which would import the caller's main
script again) while this one goes on with the rest of the report:

- the process starts as the report does and reads the data's texts at once
  (the run's prepared copy, as the session's own report does), while this
  one sends it the records on its standard input: this run's own objects,
  checked when they were made. Under xdist they are the workers' own pickles,
  one per cell, as they arrived (the process puts them in canonical order);
  pickling them all again here took 0.4-0.5 CPU s of the 500-question grid's
  tail. Records made in this process are pickled in canonical order, once;
- it writes the packed data (``report/writer.page_text``, the same function
  as here) on its standard output and exits; the page is then assembled here.

The page is byte for byte what one process makes. Small reports (fewer than
:data:`MIN_RECORDS` records: starting a process costs more), a single core,
dataset loaders a conftest registered (a fresh process would not have them),
and a process that fails for any reason all fall back to making the data
here. The process ignores Ctrl-C (in its own session, the terminal's does not
reach it) and ends when its input or output is closed: the report's wait
decides what a Ctrl-C does, as before.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from pytest_restore.record import Record
from pytest_restore.report.inputs import RunInfo, sort_records
from pytest_restore.report.model import library_versions, memory_cells
from pytest_restore.report.writer import PageMaker, page_dataset, page_text
from pytest_restore.timeline import phase

if TYPE_CHECKING:
    from pytest_restore.data.loaders import DatasetRegistry

#: Fewer records than this: the page's data is made in the report's own process (a fresh one costs more).
MIN_RECORDS = 4000

#: What the page's process runs.
_CHILD = "from pytest_restore.run.page import serve; serve()"


def page_maker(
    data_file: Path | None,
    loaders: DatasetRegistry | None,
    prepared: Path | None,
    *,
    min_records: int = MIN_RECORDS,
    pickled: Sequence[bytes] | None = None,
) -> PageMaker | None:
    """The page's data made in a fresh process for a report of at least ``min_records`` records, or
    ``None`` where it would not help (one core) or could not be made the same way (a conftest's loaders).

    ``pickled``: the same records as the report's, as the processes that made them pickled them
    (:meth:`~pytest_restore.run.session.GridMessages.pickled_records`), sent as they are."""
    if _cores() < 2 or not _default_loaders(loaders):
        return None

    def start(ordered: Sequence[Record], info: RunInfo) -> Callable[[], str | None]:
        if len(ordered) < min_records:
            return lambda: None
        return PageProcess(ordered, info, data_file, prepared, pickled).result

    return start


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _default_loaders(loaders: DatasetRegistry | None) -> bool:
    """Whether ``loaders`` are the ones a fresh process has (the built-ins and installed packages')."""
    if loaders is None:
        return True
    from pytest_restore.data.loaders import default_datasets

    fresh = default_datasets()
    return list(loaders) == list(fresh) and all(type(loaders[n]) is type(fresh[n]) for n in loaders)


class PageProcess:
    """One page's data being made by a fresh Python process; :meth:`result` waits for it."""

    def __init__(
        self, ordered: Sequence[Record], info: RunInfo, data_file: Path | None, prepared: Path | None,
        pickled: Sequence[bytes] | None = None,
    ) -> None:
        """Start the process and send it what it reads: first what the data's texts need (it reads them
        while the records are sent), then the records: ``pickled`` as they are when given (the same
        records as ``ordered``, in any order), else ``ordered`` pickled here. Whatever fails here leaves
        the page to the report's process (:meth:`result` is ``None``), never the report unwritten."""
        self.process: subprocess.Popen[bytes] | None = None
        self._feeder: threading.Thread | None = None
        package_root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        try:
            parts = len(pickled) if pickled is not None else 0  # 0: one pickle of the records in order
            head = pickle.dumps(
                (info.settings, info.dataset, library_versions(memory_cells(info)), data_file, prepared, parts),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, env=env, start_new_session=True,
            )
        except Exception:  # noqa: BLE001 - a setting that does not pickle, no process to start: made here
            return
        assert self.process.stdin is not None
        # written by a thread: a pipe's write waits for its reader (without the interpreter lock)
        sent: queue.Queue[bytes | None] = queue.Queue()
        self._feeder = threading.Thread(
            target=_feed, args=(self.process.stdin, sent), name="pytest-restore-page-feed", daemon=True
        )
        self._feeder.start()
        sent.put(head)
        try:
            if pickled is not None:
                for part in pickled:
                    sent.put(part)
            else:
                with phase("report: report.html's data: records pickled for its process"):
                    sent.put(pickle.dumps(tuple(ordered), protocol=pickle.HIGHEST_PROTOCOL))
        finally:
            sent.put(None)  # its input closed: without the records the process fails, and result() says so

    def result(self) -> str | None:
        """The packed page data, or ``None`` when the process failed (then it is made here)."""
        process = self.process
        if process is None:
            return None
        assert process.stdout is not None
        try:
            out = process.stdout.read()
        finally:
            process.stdout.close()
            if process.wait() != 0:
                out = b""
            if self._feeder is not None:
                self._feeder.join()
        return out.decode("ascii") if out else None


def _feed(pipe: BinaryIO, sent: queue.Queue[bytes | None]) -> None:
    """Write what is ``sent`` to the page's process until ``None``, then close its input (a process that
    ended early only loses what was still to come)."""
    try:
        pipe.writelines(iter(sent.get, None))
    except OSError:  # BrokenPipeError: the process failed; result() says so
        pass
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


def serve() -> None:
    """The page's process: the head and the records from standard input, the packed data to standard output."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the session's wait decides what Ctrl-C does
    # Everything this process makes (the texts, the records, the stories) lives until it exits and holds no
    # reference cycle: the cyclic collector's full passes over the records while the stories were made were
    # a third of the page's CPU, and freed nothing. Reference counting still frees what is dropped.
    gc.disable()
    source = sys.stdin.buffer
    settings, dataset, versions, data_file, prepared, parts = pickle.load(source)  # from this run's own process
    info = RunInfo(settings=settings, dataset=dataset)
    with phase("page process: the data's texts"):
        texts, note = page_dataset(info, data_file, None, prepared)
    with phase("page process: the records read"):
        # the workers' pickles, one per cell in arrival order, put in the order the report's are in
        records = sort_records(r for _ in range(parts) for r in pickle.load(source)) if parts else pickle.load(source)
    with phase("page process: the page's data made"):
        packed = page_text(records, texts, note, versions)
    sys.stdout.buffer.write(packed.encode("ascii"))
    sys.stdout.buffer.flush()
