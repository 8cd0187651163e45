"""Where a run's processes leave their cells' records for each other: one file per cell.

So a cell's check can read the cells it compares with (the control's
baselines) from the xdist worker that ran them, instead of running them again.
A file holds the cell's records as its item's message carries them
(:func:`records_text`), made once for both.
"""

from __future__ import annotations

import base64
import hashlib
import os
import pickle
from collections.abc import Sequence
from pathlib import Path

from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.memory.eviction import Policy
from pytest_restore.record import Record


def records_text(records: Sequence[Record]) -> str:
    """A cell's records as they travel between the run's own processes (a message, the shared cells):
    one pickle of the records, in base64 (a string: xdist's messages and the shared files carry text)."""
    return base64.b64encode(pickle.dumps(tuple(records), protocol=pickle.HIGHEST_PROTOCOL)).decode("ascii")


def records_of_text(text: object) -> tuple[Record, ...]:
    """The records :func:`records_text` made, from a process of the same run (nothing else writes them)."""
    return records_of_pickle(pickled_records(text))


def pickled_records(text: object) -> bytes:
    """The pickle :func:`records_text` carries: what :func:`records_of_pickle` reads, and what the report's
    page process reads as it is (``run/page.py``: the records are not pickled a second time for it)."""
    if not isinstance(text, str):
        raise TypeError(f"not a grid item's records: {type(text).__name__}")
    return base64.b64decode(text)


def records_of_pickle(pickled: bytes) -> tuple[Record, ...]:
    """The records of one :func:`pickled_records`, written by this run's own processes."""
    records = pickle.loads(pickled)
    if not isinstance(records, tuple) or not all(isinstance(r, Record) for r in records):
        raise TypeError("not a grid item's records: not a tuple of records")
    return records


class SharedCells:
    """Where a run's xdist workers leave their cells' records for each other: one file per cell."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _cell_file(self, reader: str, policy: str, budget: int, ranker: str) -> Path:
        digest = hashlib.sha256(f"{reader}\x1f{policy}\x1f{ranker}".encode()).hexdigest()[:16]
        return self.root / f"{digest}-{budget}.records"

    def share(self, audit: Audit, run: CellRun, payload: str) -> None:
        """Leave a worker's cell records (``payload``, their ``records_text``) where other workers can read them."""
        ranker = run.records[0].ranker if run.records else None
        path = self._cell_file(audit.reader.name, run.policy, run.budget, ranker or audit.ranker.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(payload, encoding="utf-8")
        os.replace(tmp, path)  # atomic: a reader sees the whole file or none

    def records(self, audit: Audit, policy: Policy, budget: int, ranker: str | None = None) -> list[Record]:
        """A whole-grid cell's records (under ``ranker``, the audit's first by default): from this process,
        from another worker, or run here.

        The control's check needs the baselines' records at its budget; under
        xdist another worker has usually run them already, and running them
        again (redundancy above all) would cost more than the check itself.
        """
        if not audit.has_cell(policy, budget, ranker):
            path = self._cell_file(audit.reader.name, policy.name, budget, ranker or audit.ranker.name)
            if path.exists():
                return list(records_of_text(path.read_text(encoding="ascii")))
        return audit.run_cell(policy, budget, ranker=ranker).records
