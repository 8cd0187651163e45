"""What the tests that run the audit grid through pytester share."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The small hand-checkable dataset (seven evidence questions and one abstention question).
TINY = ROOT / "fixtures" / "tiny.json"
#: The grid module, as users write it: the project's own ``benches/test_grid.py``.
GRID = (ROOT / "benches" / "test_grid.py").read_text(encoding="utf-8")


def small_args(*, bootstrap: int = 500, family_checks: str | None = "report") -> list[str]:
    """Options for a quick grid on the tiny fixture.

    Seven questions have no statistical power, so by default the families'
    expectations are reported rather than failing the run.
    """
    # ``=``: pytest picks its rootdir before plugin options are known, and would take a
    # separate PATH argument for a test path (and the project's rootdir for this run's)
    args = [f"--restore-data={TINY}", "--restore-budgets", "600,300,100", "--restore-bootstrap", str(bootstrap)]
    if family_checks is not None:
        args += ["--restore-family-checks", family_checks]
    return args


def report_file(path: Path) -> bytes:
    """A report file's bytes, summary.json without its provenance (each run's own id and start time)."""
    if path.name != "summary.json":
        return path.read_bytes()
    summary = json.loads(path.read_text(encoding="utf-8"))
    summary.pop("provenance", None)
    return json.dumps(summary, indent=2, sort_keys=True).encode()
