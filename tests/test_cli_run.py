"""``python -m pytest_restore run``: the audit without pytest, the same files, messages and exit codes as pytest's.

One project (the four-line grid module, the project's cache) runs each audit
twice, as ``pytest -n auto`` and as ``python -m pytest_restore run``: on the
embedded default with few questions (the command in one process) and on the
LoCoMo fixture (over a pool of two processes). The records, ``cells.csv``,
``report.md`` and ``hypotheses.json`` are byte-identical and ``summary.json``
equal but its session's id and start; a wrong option and a run stopped
before the grid end with pytest's exit code and line.

Both run in this test's process (``pytester.runpytest_inprocess`` and the
command's ``main``): ``-n auto`` runs these small audits in one process, and
the pool of ``--workers 2`` starts its own processes from here; a child
interpreter for each would add its start and its imports to every run.
"""

from __future__ import annotations

# The pool's module, imported here: a module first imported inside an in-process pytest run is dropped
# when it ends, and the pool's worker function would then no longer be the one spawn pickles by name.
import concurrent.futures.process  # noqa: F401
import json
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import GRID, ROOT, TINY
from openai_server import refused_port

from pytest_restore.__main__ import main
from pytest_restore.synthetic.embedded import embedded_path

LOCOMO_TINY = ROOT / "fixtures" / "locomo_tiny.json"
#: The two audits compared: the embedded default with few questions and two budgets, and the LoCoMo fixture.
CASES = {
    "embedded": ["--restore-questions=6", "--restore-budgets=30k,8k", "--restore-bootstrap=300"],
    "locomo": [f"--restore-data={LOCOMO_TINY}", "--restore-bootstrap=300"],
}
#: ``run``'s processes per case: the embedded audit as ``-n auto`` (small data: the command's own process),
#: LoCoMo's over a pool of two.
WORKERS = {"embedded": "auto", "locomo": "2"}


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture
def grid_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A project holding the grid module (pytester's directory, the current one), with no OpenAI settings
    and no xdist worker's identity in the environment (this process may be a worker)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_grid=GRID)
    return pytester


def _summary(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    provenance = data["provenance"]
    assert provenance["session_id"] and provenance["started_utc"]
    del provenance["session_id"], provenance["started_utc"]  # the session's own: never the same twice
    return data


def _holds_the_embedded_default(project: Path, embedded_data: Path) -> None:
    """The project's cache holds the embedded default already, as after its first run: the test run's own copy
    (``embedded_data``, generated once for every test that reads it). A project's first run generates its
    hundred questions (2-3 CPU s, most of this test's own work); the generator has tests of its own."""
    cached = embedded_path(project / ".pytest_cache" / "d" / "restore")
    cached.parent.mkdir(parents=True)
    cached.symlink_to(embedded_data)


@pytest.mark.parametrize("case", list(CASES))
def test_run_writes_pytest_s_report_byte_for_byte(
    grid_project: pytest.Pytester, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest, case: str
) -> None:
    by_pytest, by_run = grid_project.path / "pytest-report", grid_project.path / "run-report"
    if case == "embedded":
        _holds_the_embedded_default(grid_project.path, request.getfixturevalue("embedded_data"))
    result = grid_project.runpytest_inprocess("-n", "auto", "-q", *CASES[case], "--restore-report-dir", str(by_pytest))
    pytest_output = "\n".join(result.outlines + result.errlines)
    assert result.ret == 0, pytest_output[-3000:]
    capsys.readouterr()
    code = main(["run", "--workers", WORKERS[case], *CASES[case], "--restore-report-dir", str(by_run)])
    said = capsys.readouterr()
    output = said.out + said.err
    assert code == 0, output[-3000:]
    for name in ("records.jsonl", "cells.csv", "report.md", "hypotheses.json"):
        assert (by_run / name).read_bytes() == (by_pytest / name).read_bytes(), name
    assert _summary(by_run / "summary.json") == _summary(by_pytest / "summary.json")
    # the same terminal summary: its table and where the report went
    table = [line for line in pytest_output.splitlines() if line.startswith(("policy ", "fifo ", "control "))]
    assert table and all(line in output.splitlines() for line in table)
    assert f"report: {by_run}" in output and "Traceback" not in output
    assert ("--workers auto: this small audit runs in one process" in output) == (WORKERS[case] == "auto")


def _ran(result: pytest.RunResult) -> str:
    """What an in-process pytest run said, its output and its errors."""
    return "\n".join(result.outlines + result.errlines)


def test_a_wrong_option_is_pytest_s_usage_error(grid_project: pytest.Pytester, capsys: pytest.CaptureFixture[str]) -> None:
    report = grid_project.path / "report"
    for wrong in ("--restore-policies=fifo,lru", "--restore-judge=f1:0"):
        by_pytest = grid_project.runpytest_inprocess("-p", "no:xdist", "-q", wrong, "--restore-report-dir", str(report))
        capsys.readouterr()
        assert main(["run", wrong]) == by_pytest.ret == pytest.ExitCode.USAGE_ERROR
        said = capsys.readouterr().err.strip()
        assert said.startswith("ERROR: --restore-") and said in _ran(by_pytest), (said, _ran(by_pytest))
    # an option pytest does not know either: a usage error, one line
    assert main(["run", "--restore-polices=fifo"]) == pytest.ExitCode.USAGE_ERROR
    assert capsys.readouterr().err.strip() == "ERROR: --restore-polices: no such option of the audit"
    assert main(["run", "--workers", "none"]) == pytest.ExitCode.USAGE_ERROR
    assert not report.exists()


def test_a_run_stopped_by_the_calibration_gate_ends_as_pytest_s(
    grid_project: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    path = grid_project.path
    with refused_port() as port:  # nothing listens there: the gate's first call stops the run
        args = [
            f"--restore-data={TINY}", "--restore-reader=openai:fake-reader", f"--restore-base-url=http://127.0.0.1:{port}/v1",
            f"--restore-cache={path / 'cache'}", "--restore-calibration=on",
        ]
        by_pytest = grid_project.runpytest_inprocess("-p", "no:xdist", "-q", *args, f"--restore-report-dir={path / 'pytest-report'}")
        capsys.readouterr()
        code = main(["run", *args, f"--restore-report-dir={path / 'run-report'}"])
    said = capsys.readouterr().out.splitlines()
    stop = "restore: run stopped before the grid: reader openai:fake-reader: "
    assert code == by_pytest.ret == pytest.ExitCode.TESTS_FAILED
    assert [line for line in said if line.startswith(stop)] and stop in _ran(by_pytest), said
    assert not (path / "run-report").exists() and not (path / "pytest-report").exists()
