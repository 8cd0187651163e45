"""Green must mean something (issue 12): bad options, bad files, hostile servers, cut-short sessions.

Every case ends as specified: its exit code, one line that says why, no
traceback, no earlier report lost, and the API key in no file. Usage errors
stop in ``pytest_configure`` and run in process (cheap); the cases that need
a grid run it small (the tiny fixture, one or two policies, one budget) in a
pytest subprocess, against the loopback server where a model is involved.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import (
    FAST_RETRIES,
    FIGURES_NOT_RENDERED_CONFTEST,
    SMALLEST_GRID,
    TINY,
    full_disk,
    hang_fails,
    run_audit_here,
    shared_run,
)
from openai_server import OpenAIServer, fake_models_responder, refused_port

from pytest_restore.__main__ import main
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import History, build_history
from pytest_restore.exits import IO_ERROR
from pytest_restore.models.cache import ResponseCache

GRID_ARGS = SMALLEST_GRID
REAL = [f"--restore-{role}=openai:fake-{role}" for role in ("reader", "judge", "scorer")]

#: No test here reads a report's figure (report.md, summary.json, records and file names are compared): the
#: runs in this process build it and do not render it (conftest's ``figures_unrendered``), and so do the child
#: runs that write a report (``FIGURES_NOT_RENDERED_CONFTEST`` in their conftest).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture(scope="module")
def histories() -> list[History]:
    return [build_history(q) for q in load_dataset(TINY).questions if not q.is_abstention]


@pytest.fixture
def server(histories: list[History]) -> Iterator[OpenAIServer]:
    with OpenAIServer(fake_models_responder(histories), latency=0.002) as running:
        yield running


def assert_one_line_usage_error(result: pytest.RunResult, *needles: str) -> None:
    """Exit 4, the reason in one ``ERROR:`` line naming what is wrong, and no traceback."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.errlines
    for needle in needles:
        assert needle in errors[0], errors[0]
    text = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in text and "INTERNALERROR" not in text


# -- 1. options are checked before any work --------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--restore-policies=fifo,fifo"], "'fifo' is given twice"),
        (["--restore-policies=fifo,,lru"], "empty item"),
        (["--restore-seeds=1,1"], "'1' repeats '1'"),
        (["--restore-budgets=80k,80000"], "'80000' repeats '80k'"),
        (["--restore-budgets=80k,,8k"], "empty item"),
        (["--restore-budgets=0"], "below the minimum of 1"),
        (["--restore-seeds=-1"], "below the minimum of 0"),
        (["--restore-bootstrap=3"], "--restore-bootstrap: '3' is below the minimum of 100"),
        (["--restore-bootstrap-seed=-5"], "below the minimum of 0"),
        (["--restore-max-concurrency=0"], "--restore-max-concurrency"),
        (["--restore-max-tries=0"], "--restore-max-tries"),
        (["--restore-timeout=nan"], "not a finite number"),
        (["--restore-timeout=inf"], "not a finite number"),
        (["--restore-timeout=-1"], "must be positive"),
        (["--restore-rpm=0"], "--restore-rpm: must be positive"),
        (["--restore-max-retry-after=abc"], "not a number"),
        (["--restore-equivalence-margin=nan"], "not a finite number"),
        (["--restore-questions=0"], "below the minimum of 1"),
        (["--restore-audit-judge-sample=0"], "below the minimum of 1"),
        (["--restore-embedded-questions=1.5"], "not a whole number"),
        (["--restore-reader="], "--restore-reader: unknown model ''"),
        (["--restore-judge="], "--restore-judge: unknown model ''"),
        (["--restore-rankers=nosuch"], "--restore-rankers: unknown ranker 'nosuch'"),  # was: ini key restore_ranker
        (["--restore-batch-export=.", "--restore-batch-round=scorer"], "--restore-batch-export .: is a directory, not a file"),
    ],
)
def test_bad_options_stop_at_configure_with_one_line(project: pytest.Pytester, args: list[str], needle: str) -> None:
    result = project.runpytest_inprocess(*args)
    assert_one_line_usage_error(result, needle)


@pytest.mark.parametrize(
    ("ini", "needle"),
    [
        ("restore_policies = fifo,nonesuch", "ini key restore_policies (tox.ini): unknown policy 'nonesuch'"),
        ("restore_ranker = nonesuch", "ini key restore_ranker (tox.ini): unknown ranker 'nonesuch'"),
        ("restore_report_dir = taken/report", "ini key restore_report_dir (tox.ini) taken/report: "),
        ("restore_prompts = no-such-dir", "ini key restore_prompts (tox.ini): no-such-dir is not a directory"),
    ],
)
def test_an_ini_error_names_the_ini_key(project: pytest.Pytester, ini: str, needle: str) -> None:
    (project.path / "taken").write_text("a file where the report directory would go")
    project.makeini(f"[pytest]\nrestore_data = {TINY}\n{ini}\n")
    result = project.runpytest_inprocess()
    assert_one_line_usage_error(result, needle)


def test_a_prompt_template_with_an_unknown_placeholder_names_file_and_placeholder(project: pytest.Pytester) -> None:
    prompts = project.mkdir("prompts")
    (prompts / "judge_user.txt").write_text("Q: {question}\nGold: {gold}\nSaid: {prediction}\n")
    result = project.runpytest_inprocess(f"--restore-prompts={prompts}")
    assert_one_line_usage_error(result, "judge_user.txt", "{gold}")


def test_a_malformed_prompt_template_is_a_usage_error(project: pytest.Pytester) -> None:
    prompts = project.mkdir("prompts")
    (prompts / "reader_user.txt").write_text("Question: {question\n")
    result = project.runpytest_inprocess(f"--restore-prompts={prompts}")
    assert_one_line_usage_error(result, "reader_user.txt", "malformed placeholder")


def test_deeply_nested_json_is_a_one_line_data_error(project: pytest.Pytester) -> None:
    deep = project.path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    result = project.runpytest_inprocess(f"--restore-data={deep}")
    assert_one_line_usage_error(result, "deep.json", "nested too deeply")


def test_a_file_with_nothing_to_audit_stops_with_the_counts(project: pytest.Pytester) -> None:
    records = json.loads(TINY.read_text())
    for r in records:  # no gold anywhere
        for session in r["haystack_sessions"]:
            for turn in session:
                turn.pop("has_answer", None)
    empty = project.path / "no-gold.json"
    empty.write_text(json.dumps(records))
    result = project.runpytest_inprocess(f"--restore-data={empty}")
    assert_one_line_usage_error(result, "no-gold.json", "no question to audit", "8 questions, 1 abstention, 7 without gold")


def test_missing_key_for_openai_is_said_at_start(project: pytest.Pytester) -> None:
    result = project.runpytest_inprocess(*GRID_ARGS, "--restore-reader=openai:gpt-4o-mini")
    assert_one_line_usage_error(result, "openai:gpt-4o-mini", "OPENAI_API_KEY is not set")


def test_missing_key_is_said_in_a_dry_run_too(project: pytest.Pytester) -> None:
    result = project.runpytest_inprocess("-p", "no:xdist", *GRID_ARGS, "--restore-reader=openai:gpt-4o-mini", "--restore-dry-run")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*warning: openai:gpt-4o-mini would call api.openai.com but $OPENAI_API_KEY is not set*"])


# -- 2. a run whose model calls failed does not pass ---------------------------------------------


@pytest.mark.parametrize(
    ("calibration", "processes"),
    # off: the two cells in two xdist workers, which share each failed prompt as they share a success
    [("on", ["-p", "no:xdist"]), ("off", ["-n", "2"])],
)
def test_a_server_failing_every_call_fails_the_run_with_the_cause(
    project: pytest.Pytester, tmp_path: Path, calibration: str, processes: list[str]
) -> None:
    def broken(messages: list[dict[str, Any]]) -> str:
        raise RuntimeError("the model is down")  # the server's 500

    with OpenAIServer(broken) as server:
        result = project.runpytest_inprocess(
            *processes, *GRID_ARGS, *REAL, f"--restore-base-url={server.base_url}",
            f"--restore-cache={tmp_path / 'cache'}", "--restore-max-tries=2", f"--restore-calibration={calibration}",
        )
        attempts = server.attempts
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.outlines
    # each unique prompt sent at most --restore-max-tries times in the whole run, however many cells share it
    assert attempts and max(attempts.values()) <= 2, attempts.most_common(3)
    text = "\n".join(result.outlines + result.errlines)
    assert "calls failed: " in text and "x HTTP 500: responder: the model is down" in text, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text
    # said once per model, not once per call
    summary = [line for line in result.outlines if "calls failed:" in line]
    assert len(summary) == len({line.split(":")[0] + line.split(":")[1] for line in summary})


# A wrong key (stopped at the first call, the key in no file) and a dry run on a damaged cache
# are checked in test_providers.py, on the runs it shares.


# -- 7. reports are whole or say they are not ----------------------------------------------------

INTERRUPT_SECOND_CELL = """
import pytest
_seen = []

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    _seen.append(item.nodeid)
    if len(_seen) == 2:
        raise {exc}
"""
#: The same cut as an internal error: a hook of another plugin raises outside any test.
INTERNAL_ERROR_SECOND_CELL = """
import pytest
_seen = []

def pytest_runtest_logreport(report):
    if report.when == "call":
        _seen.append(report.nodeid)
        if len(_seen) == 2:
            raise RuntimeError("a plugin's hook failed")
"""


def _files(report: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(report.iterdir())}


INTERRUPTED_ARGS = [*GRID_ARGS, "--restore-policies=fifo,no-evict,random", "--restore-seeds=0", "--restore-calibration=off"]


def _build_complete_report(where: Path) -> None:
    # the run command, in this process: it writes pytest's report byte for byte (test_cli_run) without
    # a child interpreter (0.7 s of CPU, against 3.5 s for a child pytest)
    first = run_audit_here(INTERRUPTED_ARGS, where, where / "restore-report")
    assert first.ret == 0, first.output[-3000:]


@pytest.fixture(scope="module")
def complete_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The complete report of a whole session of the interrupted test's grid, run once for both cases (also under xdist)."""
    return shared_run(tmp_path_factory, "complete-report", _build_complete_report) / "restore-report"


@pytest.mark.parametrize(
    ("exc", "extra"),
    # a whole run after a partial one replaces the partial report the same way however the partial one
    # came (a cut, or -k): checked once, after -k (test_a_selected_part_of_the_grid_...)
    [("KeyboardInterrupt()", []), ("RuntimeError('boom')", ["-x"]), ("internal", [])],
    ids=["KeyboardInterrupt", "RuntimeError", "INTERNALERROR"],
)
def test_an_interrupted_session_leaves_the_complete_report_untouched(
    project: pytest.Pytester, complete_report: Path, exc: str, extra: list[str]
) -> None:
    args = ["-p", "no:xdist", *INTERRUPTED_ARGS]
    report = project.path / "restore-report"
    shutil.copytree(complete_report, report)  # what an earlier whole session left
    (report / "stale-from-an-old-version.txt").write_text("x")  # left as it was, as every file of it
    before_with_stale = _files(report)

    cutter = INTERNAL_ERROR_SECOND_CELL if exc == "internal" else INTERRUPT_SECOND_CELL.format(exc=exc)
    project.makeconftest(FAST_RETRIES + cutter)
    cut = project.runpytest_inprocess(*args, *extra, no_reraise_ctrlc=True)
    assert cut.ret != 0
    if exc == "internal":  # pytest prints no summary after it: the plugin says where the report went
        assert cut.ret == pytest.ExitCode.INTERNAL_ERROR
    assert _files(report) == before_with_stale  # byte-identical, the stray file included
    partial = project.path / "restore-report.partial"
    summary = json.loads((partial / "summary.json").read_text())
    assert summary["provenance"]["partial"] is not None
    assert summary["run"]["checks"]["grid"]["result"]["not_run"]
    assert (partial / "report.md").read_text().startswith("> **PARTIAL REPORT**")
    # the partial report was written once, whole: rebuilt from its records it is the same, mark and provenance included
    assert main(["report", str(partial / "records.jsonl"), "--out", str(project.path / "rebuilt")]) == 0
    for name in ("report.md", "summary.json"):
        assert (project.path / "rebuilt" / name).read_bytes() == (partial / name).read_bytes(), name
    # why, in the words of the report's first line: interrupted, an internal error, or items that did not run
    why = summary["provenance"]["partial"]
    # (-x after a failed item: the failed one is called failed, the one never reached not run; issue 44)
    assert why in {"interrupted", "internal error", "1 of 3 selected grid items failed; 1 did not run"}, why
    said = f"partial report ({why}): restore-report.partial; restore-report was left as it was"
    assert said in "\n".join(cut.outlines)
    assert "grid cells not selected in this run" not in "\n".join(cut.outlines)  # every cell was selected
    if exc == "KeyboardInterrupt()":
        assert any(line.startswith("grid cells interrupted before they ran (2): ") for line in cut.outlines)
    elif exc != "internal":
        assert any(line.startswith("grid cells that failed (their records are not in the report) (1): ") for line in cut.outlines)
        assert any(line.startswith("grid cells selected but not run (the session stopped first) (1): ") for line in cut.outlines)


#: A real Ctrl-C (SIGINT) once every cell has run and the report is being written: the writer is held back
#: until the session has taken the Ctrl-C (cancelled the report), so it is caught in the middle of its work.
#: ``{where}``: "hook", in another plugin's ``pytest_sessionfinish`` (as pytest's own temporary-directory
#: clean-up), between the report's start and the wait for it; "wait", while the session waits for it.
#: The run is in the test's own process (the signal to it, as a user's Ctrl-C to a pytest, is the point, not
#: a process of its own: 0.4 CPU s against 2 for a child pytest): the writer and the wait are replaced for
#: that run alone, and put back when it ends.
CTRL_C_WHILE_WRITING = """
import os
import signal
import threading

from pytest_restore.run import session as run_session  # the run session waits for its report
from pytest_restore.run import report as finish

WHERE = "{where}"
_cancelled = threading.Event()
_write_report, _await_report = finish.write_report, run_session.await_report


def _held_back(*args, **kwargs):
    if WHERE != "late":
        _cancelled.wait(60)
    return _write_report(*args, **kwargs)


def _awaited(report, cancelled, *args):
    if WHERE == "late":  # the writer has swapped its report in before the Ctrl-C (held) comes
        report.join(60)
        os.kill(os.getpid(), signal.SIGINT)
        return _await_report(report, cancelled, *args)

    def _watch():
        if WHERE == "wait":
            os.kill(os.getpid(), signal.SIGINT)
        if cancelled.wait(60):
            _cancelled.set()

    threading.Thread(target=_watch, daemon=True).start()
    return _await_report(report, cancelled, *args)


def pytest_sessionfinish(session):
    if WHERE == "hook":
        os.kill(os.getpid(), signal.SIGINT)


def _put_back():
    finish.write_report, run_session.await_report = _write_report, _await_report


def pytest_configure(config):
    finish.write_report, run_session.await_report = _held_back, _awaited
    config.add_cleanup(_put_back)
"""


def _ctrl_c_run(project: pytest.Pytester, where: str) -> pytest.RunResult:
    """The interrupted test's grid in this process, with a real Ctrl-C ``where`` (``CTRL_C_WHILE_WRITING``).

    The main thread (an xdist worker's too) is the one Ctrl-C reaches and the report's wait holds it in;
    a hang fails the test, as a child run's timeout did.
    """
    assert threading.current_thread() is threading.main_thread()
    project.makeconftest(FAST_RETRIES + CTRL_C_WHILE_WRITING.format(where=where))
    with hang_fails(120):
        return project.runpytest_inprocess("-p", "no:xdist", *INTERRUPTED_ARGS, no_reraise_ctrlc=True)


@pytest.mark.parametrize("where", ["hook", "wait"])
def test_ctrl_c_while_the_report_is_written_leaves_the_complete_report_untouched(
    project: pytest.Pytester, complete_report: Path, where: str
) -> None:
    report = project.path / "restore-report"
    shutil.copytree(complete_report, report)  # what an earlier whole session left
    before = _files(report)
    cut = _ctrl_c_run(project, where)
    output = cut.stdout.str() + cut.stderr.str()
    assert cut.ret == pytest.ExitCode.INTERRUPTED, output
    assert _files(report) == before  # byte-identical: the new report was not swapped in
    assert not any(p.name.startswith(".restore-report") for p in project.path.iterdir())  # no staging left
    assert not (project.path / "restore-report.partial").exists()
    said = [line for line in cut.outlines if "report not written" in line]
    assert said == ["report not written (interrupted while writing it): restore-report was left as it was"], output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output


def test_ctrl_c_after_the_report_was_swapped_in_cuts_nothing_short_and_says_so(
    project: pytest.Pytester, complete_report: Path
) -> None:
    """A Ctrl-C the session held while the writer finished: the new report is whole, the run's own status
    stands, and one line says why the Ctrl-C changed nothing (it was an unexplained exit 2)."""
    report = project.path / "restore-report"
    shutil.copytree(complete_report, report)
    (report / "report.md").write_text("the earlier report")
    late = _ctrl_c_run(project, "late")
    output = late.stdout.str() + late.stderr.str()
    assert late.ret == pytest.ExitCode.OK, output
    assert (report / "report.md").read_text() == (complete_report / "report.md").read_text()  # the new one, whole
    assert not any(p.name.startswith(".restore-report") for p in project.path.iterdir())
    said = [line for line in late.outlines if line.startswith("Ctrl-C came")]
    assert said == ["Ctrl-C came after the report was complete: restore-report is whole and nothing was cut short"]
    assert "Traceback" not in output and "KeyboardInterrupt" not in output and "report not written" not in output


def test_a_selected_part_of_the_grid_says_so_first_and_leaves_the_complete_report(
    project: pytest.Pytester, complete_report: Path
) -> None:
    report = project.path / "restore-report"
    shutil.copytree(complete_report, report)  # what an earlier whole session left
    before = _files(report)
    result = project.runpytest_inprocess("-p", "no:xdist", *INTERRUPTED_ARGS, "-k", "fifo")
    assert result.ret == 0, result.outlines
    assert _files(report) == before  # the complete report is not replaced by a part of the grid
    partial = project.path / "restore-report.partial"
    summary = json.loads((partial / "summary.json").read_text())
    assert summary["run"]["checks"]["grid"]["result"] == {"ran": ["fifo-300"], "not_run": ["no-evict-300", "random-300"]}
    assert summary["run"]["settings"]["policies"] == ["fifo"]  # what ran, not what was configured
    first = (partial / "report.md").read_text().splitlines()[0]
    assert first.startswith("> **PARTIAL REPORT**: part of the grid: 1 of 3 cells ran (fifo-300).")
    assert "Cells not run (2): no-evict-300, random-300." in (partial / "report.md").read_text()
    result.stdout.fnmatch_lines([
        "*restore-counterfactual audit (regime b): SIMULATED: PART OF THE GRID (1 of 3 cells)*",
        "part of the grid: cells run (1): fifo-300",
        "simulated: fake models (reader fake, judge fake*): these figures check the audit's pipeline, not any model",
        ("partial report (part of the grid: 1 of 3 cells ran (fifo-300)): restore-report.partial; "
        "restore-report was left as it was"),
        "*grid cells not selected in this run (2): no-evict-300, random-300*",
    ])
    # the whole grid again: written in place, replacing the report as a whole (no file of the old one
    # survives), and the partial report beside it goes; so do the staging directories of sessions that
    # ended without their report, but not a live session's
    (report / "stale-from-an-old-version.txt").write_text("x")
    orphans = [".restore-report.99999999.k3j4h5g6.tmp", ".restore-report.k3j4h5g6.tmp", ".restore-report.99999999.ab.old"]
    live = ".restore-report.1.k3j4h5g6.tmp"  # pid 1 runs: another session's, being written
    for name in [*orphans, live]:
        (project.path / name).mkdir()
    whole = project.runpytest_inprocess("-p", "no:xdist", *INTERRUPTED_ARGS)
    assert whole.ret == 0 and not partial.exists()
    assert set(_files(report)) == set(before)
    assert sorted(p.name for p in project.path.iterdir() if p.name.startswith(".restore-report")) == [live]
    assert not (report / "report.md").read_text().startswith("> **PARTIAL")
    assert "PART OF THE GRID" not in whole.stdout.str()
    summary = json.loads((report / "summary.json").read_text())
    assert summary["provenance"]["partial"] is None and summary["provenance"]["version"]
    assert summary["provenance"]["started_utc"].endswith("Z") and len(summary["provenance"]["session_id"]) == 32


def test_k_on_a_three_ranker_grid_names_the_rankers_cells_that_ran(project: pytest.Pytester) -> None:
    """``-k dense`` runs the dense ranker's cells only: the report and the terminal say which (issue 32)."""
    args = [*GRID_ARGS, "--restore-policies=fifo,no-evict", "--restore-rankers=bm25-lite,dense:fake,hybrid:fake",
            "--restore-calibration=off", "-p", "no:xdist"]
    result = project.runpytest_inprocess(*args, "-k", "dense")
    result.assert_outcomes(passed=2)
    partial = project.path / "restore-report.partial"
    cells = json.loads((partial / "summary.json").read_text())["run"]["checks"]["grid"]["result"]
    assert cells["ran"] == ["fifo-300-dense", "no-evict-300-dense"]
    assert sorted(cells["not_run"]) == ["fifo-300-bm25-lite", "fifo-300-hybrid", "no-evict-300-bm25-lite", "no-evict-300-hybrid"]
    report = (partial / "report.md").read_text()
    assert report.startswith("> **PARTIAL REPORT**: part of the grid: 2 of 6 cells ran (fifo-300-dense, no-evict-300-dense).")
    assert "Every cell of the configured grid ran." not in report
    result.stdout.fnmatch_lines(["*PART OF THE GRID (2 of 6 cells)*", "part of the grid: cells run (2): fifo-300-dense, no-evict-300-dense"])
    assert not (project.path / "restore-report").exists()  # a part never lands in the report directory


def test_decoding_and_concurrency_are_recorded_per_model(
    project: pytest.Pytester, server: OpenAIServer, tmp_path: Path
) -> None:
    result = project.runpytest_inprocess(
        "-p", "no:xdist", *GRID_ARGS, "--restore-policies=fifo", *REAL[:2], "--restore-reader=openai:gpt-5.4-mini",
        f"--restore-base-url={server.base_url}", f"--restore-cache={tmp_path / 'cache'}", "--restore-calibration=off",
    )
    # the fake reader does not know the name gpt-5.4-mini's system prompt? it does: the server tells models apart
    # by their system prompt, not by their name; the server enforces the reasoning family's parameters
    assert result.ret == 0, result.outlines
    report = project.path / "restore-report"
    calls = json.loads((report / "summary.json").read_text())["run"]["checks"]["model_calls"]["result"]
    reader = calls["reader openai:gpt-5.4-mini"]
    assert reader["decoding"]["family"] == "reasoning" and reader["decoding"]["reasoning_effort"] == "low"
    assert calls["judge openai:fake-judge"]["decoding"]["temperature"] == "0 (greedy)"
    assert reader["concurrency"] >= 1 and reader["failures"] == {}
    assert "## Real model calls" in (report / "report.md").read_text()


def test_an_unreachable_server_is_reported_within_seconds(project: pytest.Pytester, tmp_path: Path) -> None:
    started = time.monotonic()
    with refused_port() as port:  # nothing listens there
        result = project.runpytest_inprocess(
            "-p", "no:xdist", *GRID_ARGS, *REAL, f"--restore-base-url=http://127.0.0.1:{port}/v1",
            f"--restore-cache={tmp_path / 'cache'}",  # default tries, backoff and calibration (on)
        )
    elapsed = time.monotonic() - started
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = "\n".join(result.outlines + result.errlines)
    assert "is unreachable" in text and "Traceback" not in text
    # said once (the gate stops the run before the grid), not again as pytest's Exit
    said = [line for line in result.outlines + result.errlines if "is unreachable" in line]
    assert len(said) == 1 and said[0].startswith("restore: run stopped before the grid: reader openai:fake-reader: "), said
    assert "Exit" not in text and "!!!" not in text
    # the first refused call stopped it: the calls never sent are not shown as failed (a call already in
    # flight when the first failed may fail too: on a loaded machine two of the seven were, in CI)
    shown = [(int(m[1]), int(m[2])) for m in re.finditer(r"calls: \d+/(\d+) \| .*failed (\d+)", text)]
    assert shown and all(failed < total for total, failed in shown), text
    print(f"unreachable server reported after {elapsed:.1f} s (child pytest included)")
    # within seconds: a connection refused is not waited on as a silent server is (the default
    # --restore-timeout, 60 s a try, over --restore-max-tries 6); the bound leaves a loaded machine room
    assert elapsed < 30, f"the unreachable server took {elapsed:.1f} s to be reported"


def test_a_one_slot_server_at_default_concurrency_completes_without_recomputing(
    project: pytest.Pytester, histories: list[History], tmp_path: Path
) -> None:
    # A local server computing one call at a time; time scaled down (0.2 s a call against a
    # 1 s timeout, as 12 s calls against the default 60 s). Sixteen calls at once would queue
    # past the timeout there and be computed again.
    project.makeconftest(FAST_RETRIES + FIGURES_NOT_RENDERED_CONFTEST)
    with OpenAIServer(fake_models_responder(histories), latency=0.2, slots=1) as server:
        # a process of its own: the run's threads and the server's then keep off each other's interpreter lock
        result = project.runpytest_subprocess(
            "-p", "no:xdist", *GRID_ARGS, *REAL, f"--restore-base-url={server.base_url}",
            f"--restore-cache={tmp_path / 'cache'}", "--restore-calibration=off", "--restore-timeout=1",
            timeout=300,
        )
        computed = server.computed
    assert result.ret == 0, result.outlines[-30:]
    assert computed and max(computed.values()) == 1  # no request computed twice
    summary = json.loads((project.path / "restore-report" / "summary.json").read_text())
    assert all(u["failed"] == 0 for u in summary["run"]["settings"]["model_usage"].values())
    reached = {name: d["concurrency"] for name, d in summary["run"]["checks"]["model_calls"]["result"].items()}
    assert 1 <= reached["reader openai:fake-reader"] <= 16 and reached["scorer openai:fake-scorer"] == 0  # never asked
    print("concurrency reached:", reached)


# -- 8. resources that fail under the run: one line, its own exit code (exits.py), no hang ---------


def fill_the_disk_at_the_first_claim(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk under the response cache fills once the run has started (its start check passed): at the
    first claim of a request, as a real disk fills while a long run writes its cache (``full_disk``, undone
    with the test's ``monkeypatch``)."""
    try_lock, filled = ResponseCache.try_lock, threading.Lock()

    def filling(self: ResponseCache, key: str) -> object:
        with filled:  # the calibration gate's calls claim from several threads at once
            if ResponseCache.try_lock is filling:
                full_disk(monkeypatch, self.directory)
                monkeypatch.setattr(ResponseCache, "try_lock", try_lock)
        return try_lock(self, key)

    monkeypatch.setattr(ResponseCache, "try_lock", filling)


@pytest.mark.parametrize("calibration", ["on", "off"])
def test_a_full_disk_under_the_cache_stops_the_run_with_one_line_and_exit_74(
    project: pytest.Pytester, server: OpenAIServer, tmp_path: Path, calibration: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    fill_the_disk_at_the_first_claim(monkeypatch)
    with hang_fails(60):  # a hang fails here (in this process: no interpreter started for the run)
        result = project.runpytest_inprocess(
            "-p", "no:xdist", *GRID_ARGS, *REAL, f"--restore-base-url={server.base_url}", f"--restore-cache={cache}",
            f"--restore-calibration={calibration}",
        )
    assert result.ret == IO_ERROR, result.outlines[-20:]
    text = "\n".join(result.outlines + result.errlines)
    assert f"response cache {cache}: cannot write: No space left on device" in text
    assert "Traceback" not in text and "Exit" not in text
    assert server.total_requests == 0  # nothing paid for that could not be kept
    assert not list(cache.rglob("*.lock"))


@pytest.mark.parametrize("dry_run", [[], ["--restore-dry-run"]], ids=["run", "dry-run"])
def test_a_cache_path_that_is_a_file_is_said_before_any_work(
    project: pytest.Pytester, tmp_path: Path, dry_run: list[str]
) -> None:
    taken = tmp_path / "cache-file"
    taken.write_text("not a directory")
    result = project.runpytest_inprocess(
        *GRID_ARGS, *REAL, "--restore-base-url=http://127.0.0.1:9/v1", f"--restore-cache={taken}", *dry_run
    )
    assert_one_line_usage_error(result, f"--restore-cache: response cache {taken}: not a directory")


def test_a_data_file_removed_after_its_check_stops_the_run_with_one_line_and_exit_74(
    project: pytest.Pytester,
) -> None:
    data = project.path / "data.json"
    shutil.copy(TINY, data)
    # removed once the controller has checked it, before the xdist worker reads it (one worker: a
    # second would read the same missing file and say the same)
    project.makeconftest(
        "import os\n\ndef pytest_sessionstart(session):\n"
        "    if not hasattr(session.config, 'workerinput'):\n        os.remove('data.json')\n"
    )
    result = project.runpytest_inprocess("-n", "1", f"--restore-data={data}", *GRID_ARGS[1:])
    assert result.ret == IO_ERROR, result.outlines[-20:]
    text = "\n".join(result.outlines + result.errlines)
    assert "data.json: cannot read the file: No such file or directory" in text
    assert "Traceback" not in text and "UsageError" not in text and "During handling" not in text


def test_a_subset_prepares_only_its_histories(project: pytest.Pytester) -> None:
    result = project.runpytest_inprocess("-p", "no:xdist", *GRID_ARGS, "--restore-questions=3", "--restore-dry-run")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["restore: preparing 3 histories (*"])


# -- 9. part of the grid: the exit status is that of the items that ran --------------------------

#: A user's family that no grid item checks (``involves`` is never true) and that fails on fifo at
#: the smallest budget: the whole grid fails on it with its line; a part of the grid cannot decide it.
SESSION_ONLY_FAMILY = """
from pytest_restore.stats.families import Family
from pytest_restore.stats.results import HypothesisTest
from pytest_restore.stats.tally import IRR_ROW, N_ROW


def _no_irr(engine, reader, budgets):
    out = []
    for key in engine.keys:
        policy, budget = key.policy, key.budget
        if (key.regime, key.reader, key.ranker) != ("b", reader, "") or budget not in budgets:
            continue
        stat = engine.ratio(key, [IRR_ROW], [N_ROW])
        lo, hi = stat.interval(engine.settings.confidence)
        out.append(HypothesisTest(
            f"no-irr {policy} {budget}", "no-irr", reader, budget, policy, None, key.regime, stat.point, lo, hi,
            0.0, "greater", stat.p_greater(0.0), None, "", None, engine.n_questions(key), stat.undefined,
        ))
    return out


def pytest_restore_register_families(registry, config):
    registry.register(Family(
        name="no-irr", title="No irreversible error", tests="irr / N against 0", statistic="irr rate",
        build=_no_irr, expectation="an irreversible error", expect=lambda _t, significant: not significant,
        involves=lambda _t, _p, _b: False, size=lambda _s, policies, budgets: len(policies) * len(budgets),
    ))
"""


def test_part_of_the_grid_exits_as_its_items_and_the_whole_grid_names_what_failed(project: pytest.Pytester) -> None:
    project.makeconftest(FAST_RETRIES + SESSION_ONLY_FAMILY)
    args = ["-p", "no:xdist", f"--restore-data={TINY}", "--restore-budgets=600,100", "--restore-policies=fifo,no-evict",
            "--restore-bootstrap=200", "--restore-calibration=off"]
    whole = project.runpytest_inprocess(*args)
    whole.assert_outcomes(passed=4)
    assert whole.ret == pytest.ExitCode.TESTS_FAILED  # every item passed: the line says what failed
    whole.stdout.fnmatch_lines(["*expectations not met: fail the run*", "no-irr: fifo at 100: an irreversible error*"])
    # -k (as --lf after a failure) runs part of the grid: its items decide the exit status
    for selection in (["-k", "100"], ["-k", "fifo"]):
        part = project.runpytest_inprocess(*args, *selection)
        assert part.ret == pytest.ExitCode.OK, (selection, part.outlines[-15:])
        part.stdout.fnmatch_lines(["*not met on this part of the grid: not decided*", "no-irr: fifo at 100:*"])


FLAKY_POLICY = """
import os
from pytest_restore.memory.eviction import VictimPolicy


class Flaky(VictimPolicy):
    name = "flaky"

    def choose_victim(self, stored, units):
        if os.environ.get("RESTORE_TEST_FLAKY"):
            raise RuntimeError("the flaky policy failed")
        return stored[0]


def pytest_restore_register_policies(registry, config):
    registry.register(Flaky())
"""


def test_lf_after_a_failure_exits_as_the_items_it_runs_again(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makeconftest(FAST_RETRIES + FLAKY_POLICY)
    # 100 tokens binds for every history of tiny.json, so the flaky policy evicts (and fails) there
    args = ["-p", "no:xdist", f"--restore-data={TINY}", "--restore-budgets=100", "--restore-policies=fifo,flaky",
            "--restore-bootstrap=200", "--restore-calibration=off"]
    monkeypatch.setenv("RESTORE_TEST_FLAKY", "1")
    first = project.runpytest_inprocess(*args)
    first.assert_outcomes(passed=1, failed=1)
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    monkeypatch.delenv("RESTORE_TEST_FLAKY")
    again = project.runpytest_inprocess(*args, "--lf")
    again.assert_outcomes(passed=1)  # only the failed item runs again
    assert again.ret == pytest.ExitCode.OK, again.outlines[-15:]
    again.stdout.fnmatch_lines(["*grid cells not selected in this run (1): fifo-100*"])

# -- 10. the report's own directory fails under the run, or the user quits while it is written -----


def test_a_full_disk_under_the_report_is_one_line_exit_74_and_the_earlier_report_stays(
    project: pytest.Pytester, complete_report: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = project.path / "out"
    report = out / "restore-report"
    shutil.copytree(complete_report, report)
    before = _files(report)
    full_disk(monkeypatch, out)
    with hang_fails(120):  # in this process: no interpreter started for the run
        result = project.runpytest_inprocess("-p", "no:xdist", *INTERRUPTED_ARGS, f"--restore-report-dir={report}")
    assert result.ret == IO_ERROR, result.outlines[-20:]
    said = f"report not written: {report}: No space left on device; {report} was left as it was"
    assert said in result.outlines
    text = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in text and "INTERNALERROR" not in text
    assert _files(report) == before
    assert sorted(p.name for p in out.iterdir()) == ["restore-report"]  # no staging left beside it


# Orphaned staging directories removed and a live session's kept: asserted on the whole run of
# test_a_selected_part_of_the_grid_says_so_first_and_leaves_the_complete_report.


#: The report's writer is busy for a long time (a large bootstrap in native code); a real Ctrl-C twice.
CTRL_C_TWICE_WHILE_WRITING = """
import os
import signal
import threading
import time

from pytest_restore.run import session as run_session  # the run session waits for its report
from pytest_restore.run import report as finish

_write_report, _await_report = finish.write_report, run_session.await_report


def _slow(*args, **kwargs):
    time.sleep(60)  # as a bootstrap deep in BLAS: not interruptible from the main thread
    return _write_report(*args, **kwargs)


def _awaited(report, cancelled, *args):
    def _twice():
        os.kill(os.getpid(), signal.SIGINT)
        if cancelled.wait(30):  # the first was taken: the writer was told to stop
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=_twice, daemon=True).start()
    return _await_report(report, cancelled, *args)


finish.write_report = _slow
run_session.await_report = _awaited
"""


def test_a_second_ctrl_c_while_the_report_is_written_quits_at_once(
    project: pytest.Pytester, complete_report: Path
) -> None:
    report = project.path / "restore-report"
    shutil.copytree(complete_report, report)
    before = _files(report)
    project.makeconftest(FAST_RETRIES + CTRL_C_TWICE_WHILE_WRITING)
    started = time.monotonic()
    cut = project.runpytest_subprocess("-p", "no:xdist", *INTERRUPTED_ARGS, timeout=50)
    assert time.monotonic() - started < 45  # not waiting for the writer
    assert cut.ret == pytest.ExitCode.INTERRUPTED
    cut.stdout.fnmatch_lines(["restore: quit at a second Ctrl-C: report not written; restore-report was left as it was"])
    assert "Traceback" not in cut.stdout.str() + cut.stderr.str()
    assert _files(report) == before
    assert not any(p.name.startswith(".restore-report") for p in project.path.iterdir())  # no staging left


def test_cells_without_records_are_called_failed_interrupted_or_not_selected() -> None:
    """A cell that ran and failed, or was cut off by Ctrl-C, is never listed as "not selected" (issue 44):
    only one the selection left out (-k, --lf) is."""
    from pytest_restore.plugin.finish import cells_not_run

    selected = {"test_grid.py::test_cell[fifo-300]", "test_grid.py::test_cell[bad-300]", "test_grid.py::test_cell[lru-300]"}
    failed = {"test_grid.py::test_cell[bad-300]"}
    not_run = ["bad-300", "lru-300", "random-300"]
    assert cells_not_run(not_run, selected, failed, stopped=True) == {
        "failed": ["bad-300"], "interrupted": ["lru-300"], "not run": [], "not selected": ["random-300"]
    }
    assert cells_not_run(not_run, selected, failed, stopped=False)["not run"] == ["lru-300"]
