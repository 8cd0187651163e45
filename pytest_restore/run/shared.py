"""Where a run's processes leave their cells' records for each other: one JSON file per cell.

So a cell's check can read the cells it compares with (the control's
baselines) from the xdist worker that ran them, instead of running them again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, cast

from pytest_restore.audit.run import Audit, CellRun
from pytest_restore.memory.eviction import Policy
from pytest_restore.record import Record


class SharedCells:
    """Where a run's xdist workers leave their cells' records for each other: one JSON file per cell."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _cell_file(self, reader: str, policy: str, budget: int, ranker: str) -> Path:
        digest = hashlib.sha256(f"{reader}\x1f{policy}\x1f{ranker}".encode()).hexdigest()[:16]
        return self.root / f"{digest}-{budget}.json"

    def share(self, audit: Audit, run: CellRun, payload: str) -> None:
        """Leave a worker's cell records (``payload``, their JSON) where other workers can read them."""
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
                shared = json.loads(path.read_text(encoding="utf-8"))
                return [Record.from_json(r) for r in cast("list[dict[str, Any]]", shared)]
        return audit.run_cell(policy, budget, ranker=ranker).records
