"""``python -m pytest_restore run``: the audit without pytest, the same files, messages and exit codes as pytest's.

One project (the four-line grid module, the project's cache) runs each audit
twice, as ``pytest -n auto`` and as ``python -m pytest_restore run``: on the
embedded default with few questions (the command in one process) and on the
LoCoMo fixture (over a pool of two processes). The records, ``cells.csv``,
``report.md`` and ``hypotheses.json`` are byte-identical and ``summary.json``
equal but its session's id and start; a wrong option and a run stopped
before the grid end with pytest's exit code and line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import GRID, ROOT, ChildRun, child_env, run_child, shared_run
from openai_server import refused_port

from pytest_restore.__main__ import main

LOCOMO_TINY = ROOT / "fixtures" / "locomo_tiny.json"
#: The two audits compared: the embedded default with few questions and two budgets, and the LoCoMo fixture.
CASES = {
    "embedded": ["--restore-questions=12", "--restore-budgets=30k,8k", "--restore-bootstrap=300"],
    "locomo": [f"--restore-data={LOCOMO_TINY}", "--restore-bootstrap=300"],
}
#: ``run``'s processes per case: the embedded audit as ``-n auto`` (small data: the command's own process),
#: LoCoMo's over a pool of two.
WORKERS = {"embedded": "auto", "locomo": "2"}


def run_command(args: list[str], cwd: Path, report: Path) -> ChildRun:
    """``python -m pytest_restore run *args`` in ``cwd``, its report to ``report``."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest_restore", "run", *args, "--restore-report-dir", str(report)],
        cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=600, check=False,
    )
    return ChildRun(report, done.returncode, done.stdout + done.stderr)


def _build(project: Path) -> None:
    (project / "test_grid.py").write_text(GRID)
    for name, args in CASES.items():
        run_child(["-n", "auto", "-q", *args], project, project / f"{name}-pytest")
        command = run_command(["--workers", WORKERS[name], *args], project, project / f"{name}-run")
        (project / f"{name}-run-exit-code.txt").write_text(str(command.ret))
        (project / f"{name}-run-output.txt").write_text(command.output)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project where each case ran under pytest and under ``run``."""
    return shared_run(tmp_path_factory, "cli-run", _build)


def _summary(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    provenance = data["provenance"]
    assert provenance["session_id"] and provenance["started_utc"]
    del provenance["session_id"], provenance["started_utc"]  # the session's own: never the same twice
    return data


@pytest.mark.parametrize("case", list(CASES))
def test_run_writes_pytest_s_report_byte_for_byte(project: Path, case: str) -> None:
    by_pytest, by_run = project / f"{case}-pytest", project / f"{case}-run"
    output = (project / f"{case}-run-output.txt").read_text()
    assert (project / f"{case}-pytest-exit-code.txt").read_text() == "0"
    assert (project / f"{case}-run-exit-code.txt").read_text() == "0", output[-3000:]
    for name in ("records.jsonl", "cells.csv", "report.md", "hypotheses.json"):
        assert (by_run / name).read_bytes() == (by_pytest / name).read_bytes(), name
    assert _summary(by_run / "summary.json") == _summary(by_pytest / "summary.json")
    # the same terminal summary: its table and where the report went
    pytest_output = (project / f"{case}-pytest-output.txt").read_text()
    table = [line for line in pytest_output.splitlines() if line.startswith(("policy ", "fifo ", "control "))]
    assert table and all(line in output.splitlines() for line in table)
    assert f"report: {by_run}" in output and "Traceback" not in output
    assert ("--workers auto: this small audit runs in one process" in output) == (WORKERS[case] == "auto")


def test_a_wrong_option_is_pytest_s_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_grid.py").write_text(GRID)
    monkeypatch.chdir(tmp_path)
    for wrong in ("--restore-policies=fifo,lru", "--restore-judge=f1:0"):
        by_pytest = run_child(["-p", "no:xdist", "-q", wrong], tmp_path, tmp_path / "report")
        assert main(["run", wrong]) == by_pytest.ret == pytest.ExitCode.USAGE_ERROR
        said = capsys.readouterr().err.strip()
        assert said.startswith("ERROR: --restore-") and said in by_pytest.output, (said, by_pytest.output)
    # an option pytest does not know either: a usage error, one line
    assert main(["run", "--restore-polices=fifo"]) == pytest.ExitCode.USAGE_ERROR
    assert capsys.readouterr().err.strip() == "ERROR: --restore-polices: no such option of the audit"
    assert main(["run", "--workers", "none"]) == pytest.ExitCode.USAGE_ERROR
    assert not (tmp_path / "report").exists()


def test_a_run_stopped_by_the_calibration_gate_ends_as_pytest_s(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "test_grid.py").write_text(GRID)
    monkeypatch.chdir(tmp_path)
    with refused_port() as port:  # nothing listens there: the gate's first call stops the run
        args = [
            "--restore-questions=12", "--restore-reader=openai:fake-reader", f"--restore-base-url=http://127.0.0.1:{port}/v1",
            f"--restore-cache={tmp_path / 'cache'}", "--restore-calibration=on",
        ]
        by_pytest = run_child(["-p", "no:xdist", "-q", *args], tmp_path, tmp_path / "pytest-report")
        code = main(["run", *args, f"--restore-report-dir={tmp_path / 'run-report'}"])
    said = capsys.readouterr().out.splitlines()
    stop = "restore: run stopped before the grid: reader openai:fake-reader: "
    assert code == by_pytest.ret == pytest.ExitCode.TESTS_FAILED
    assert [line for line in said if line.startswith(stop)] and stop in by_pytest.output, said
    assert not (tmp_path / "run-report").exists() and not (tmp_path / "pytest-report").exists()
