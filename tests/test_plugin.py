"""The plugin end to end, through pytester, on the small hand-checkable fixture."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any, Literal

import pytest
from grid_helpers import (
    GRID,
    TINY,
    ChildRun,
    assert_progress_before_first_result,
    report_file,
    small_args,
)

from pytest_restore.run.staging import swap_into_place

SMALL = small_args(bootstrap=2000)

#: No test here reads a report's figure (the tiny grid's runs render theirs, which test_report compares byte for
#: byte): the in-process runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def _cells(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_grid_has_one_item_per_policy_and_budget(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", "--collect-only", "-q", *SMALL)
    ids = [line for line in result.outlines if "test_cell[" in line]
    assert len(ids) == 6 * 3
    assert "test_grid.py::test_cell[random-300]" in ids
    assert "test_grid.py::test_cell[no-evict-100]" in ids


def test_report_files_and_columns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", *SMALL, "--restore-policies", "fifo,random")
    result.assert_outcomes(passed=6)
    out = pytester.path / "restore-report"
    rows = _cells(out / "cells.csv")
    header = (out / "cells.csv").read_text().splitlines()[0].split(",")
    assert header[:14] == [
        "policy", "budget", "regime", "reader", "ranker", "N", "err", "irr", "rec", "res", "two_bin_share", "irr_rate",
        "accuracy", "gold_evicted_rate",
    ]
    assert {(r["policy"], r["budget"], r["regime"]) for r in rows} == {
        (p, b, g) for p in ("fifo", "random") for b in ("600", "300", "100") for g in "ab"
    }
    # random pools its three seeds: three times the questions of fifo
    n = {(r["policy"], r["budget"], r["regime"]): int(r["N"]) for r in rows}
    assert n[("random", "300", "b")] == 3 * n[("fifo", "300", "b")] == 21
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 7 * 3 * 2 + 7 * 3 * 3 * 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["dataset"]["sha256"] == __import__("hashlib").sha256(TINY.read_bytes()).hexdigest()
    assert summary["run"]["exclusions"] == {"abstention question (no evidence to restore)": 1}
    report = (out / "report.md").read_text()
    assert summary["run"]["dataset"]["sha256"] in report
    assert "## Regime (b)" in report and "## Regime (a)" in report
    result.stdout.fnmatch_lines(["*restore-counterfactual audit (regime b)*", "fifo*600*7*"])


def test_serial_and_xdist_reports_are_identical(tiny_grid_runs: tuple[ChildRun, ChildRun]) -> None:
    serial, parallel = tiny_grid_runs
    serial.assert_passed(18)
    parallel.assert_passed(18)
    for name in ("cells.csv", "records.jsonl", "report.md", "summary.json"):
        assert report_file(serial.report / name) == report_file(parallel.report / name), name
    provenance = [json.loads((run.report / "summary.json").read_text())["provenance"] for run in tiny_grid_runs]
    assert provenance[0]["session_id"] != provenance[1]["session_id"] and provenance[0]["partial"] is None
    # the workers shared their cells through the project cache; the controller removed them after
    shared = parallel.report.parent / ".pytest_cache" / "d" / "restore" / "cells"
    assert shared.is_dir() and not any(shared.iterdir())


def test_xdist_keeps_the_cells_that_share_the_scorer_on_one_worker(tiny_grid_runs: tuple[ChildRun, ChildRun]) -> None:
    parallel = tiny_grid_runs[1]  # -n 2 -v: "[gw0] [ 5%] PASSED test_grid.py::test_cell[fifo-600]"
    passed = re.finditer(r"\[(gw\d+)\] \[ *\d+%\] PASSED \S+\[([^\]]+)\]", parallel.output)
    worker_of = {m.group(2): m.group(1) for m in passed}
    assert len(worker_of) == 18, parallel.output[-3000:]
    scored = {worker_of[f"llm-importance-{b}"] for b in ("600", "300", "100")}
    assert len(scored) == 1, worker_of  # each unit scored in one process, not in both
    assert set(worker_of.values()) == {"gw0", "gw1"}  # the rest of the grid was shared out
    assert "restore: cells that share the importance scorer (each unit scored once): 3 grid items" in parallel.output


def test_policy_from_a_users_conftest_joins_the_report(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from pytest_restore.memory.eviction import VictimPolicy


        class Newest(VictimPolicy):
            name = "evict-newest"

            def choose_victim(self, stored, units):
                return stored[-1]


        def pytest_restore_register_policies(registry, config):
            registry.register(Newest())
        """
    )
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", *SMALL, "--restore-policies", "no-evict,evict-newest")
    result.assert_outcomes(passed=6)
    rows = _cells(pytester.path / "restore-report" / "cells.csv")
    mine = [r for r in rows if r["policy"] == "evict-newest"]
    assert len(mine) == 6
    # evicting the newest unit keeps the oldest ones: at the tightest budget gold is lost
    tight = next(r for r in mine if r["budget"] == "100" and r["regime"] == "b")
    assert float(tight["gold_evicted_rate"]) > 0


def test_ini_keys_set_the_options(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        f"""
        [pytest]
        restore_data = {TINY}
        restore_budgets = 300
        restore_policies = fifo
        restore_report_dir = from-ini
        restore_family_checks = report
        """
    )
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist")
    result.assert_outcomes(passed=1)
    rows = _cells(pytester.path / "from-ini" / "cells.csv")
    assert {r["budget"] for r in rows} == {"300"}


def test_unknown_policy_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", *SMALL, "--restore-policies", "lifo")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown policy 'lifo'*"])


def test_a_report_dir_that_cannot_be_made_stops_the_run_first(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    (pytester.path / "taken").write_text("a file where the report would go")
    result = pytester.runpytest_inprocess("-p", "no:xdist", *SMALL, "--restore-report-dir=taken/report")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "--restore-report-dir taken/report" in errors[0] and "is a file" in errors[0]
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert "passed" not in result.stdout.str()  # no cell ran


@pytest.mark.parametrize("report_dir", ["notes", ".", ""])
def test_a_directory_that_is_not_a_report_is_never_replaced(pytester: pytest.Pytester, report_dir: str) -> None:
    # the report directory is replaced whole: a folder given by mistake (or the project) would be deleted
    pytester.makepyfile(test_grid=GRID)
    (pytester.mkdir("notes") / "keep.txt").write_text("a user's file")
    result = pytester.runpytest_inprocess("-p", "no:xdist", *SMALL, f"--restore-report-dir={report_dir}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "a report directory is replaced whole" in errors[0], errors
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert (pytester.path / "notes" / "keep.txt").read_text() == "a user's file"
    assert (pytester.path / "test_grid.py").exists()


def test_the_swap_leaves_a_directory_that_is_not_a_report_alone(tmp_path: Path) -> None:
    # the last guard, for a folder made after the start's check (the embedded default checks per item)
    target = tmp_path / "notes"
    (target / "sub").mkdir(parents=True)
    staging = tmp_path / "staging"
    (staging / "report.md").parent.mkdir()
    (staging / "report.md").write_text("# report")
    with pytest.raises(NotADirectoryError, match="holds files but no report"):
        swap_into_place(staging, target)
    assert (target / "sub").is_dir()
    (target / "sub").rmdir()
    (target / "summary.json").write_text("{}")  # an earlier report: replaced
    swap_into_place(staging, target)
    assert (target / "report.md").exists() and not (target / "summary.json").exists()


def test_without_data_a_bad_report_dir_fails_only_the_grid_items(pytester: pytest.Pytester) -> None:
    # the plugin loads in every pytest run: an unrelated test must not be stopped by it
    pytester.makepyfile(test_grid=GRID, test_other="def test_unrelated():\n    assert True\n")
    (pytester.path / "taken").write_text("a file where the report would go")
    result = pytester.runpytest_inprocess("-p", "no:xdist", "--restore-report-dir=taken/report")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("errors", 0) > 0, outcomes
    assert "is a file, not a directory" in result.stdout.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert not (pytester.path / "taken" / "report").exists()


def test_subset_is_stratified_and_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", *SMALL, "--restore-policies", "fifo", "--restore-questions", "3")
    result.assert_outcomes(passed=3)
    summary = json.loads((pytester.path / "restore-report" / "summary.json").read_text())
    assert summary["run"]["exclusions"]["outside the --restore-questions subset"] == 4
    assert summary["counts"]["questions"] == 3


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d[2].pop("answer"), "field 'answer'"),
        (lambda d: d[1]["haystack_dates"].pop(), "field 'haystack_dates'"),
        (lambda d: d[0]["haystack_sessions"][0][0].__setitem__("role", "system"), ".role"),
        (lambda d: d[3]["answer_session_ids"].append("answer_missing"), "field 'answer_session_ids[2]'"),
    ],
)
def test_malformed_data_stops_before_any_model_call(pytester: pytest.Pytester, mutate, expected) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(TINY.read_text())
    mutate(data)
    bad = pytester.path / "bad.json"
    bad.write_text(json.dumps(data))
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest_inprocess("-n", "2", "--restore-data", str(bad))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "bad.json" in errors[0] and expected in errors[0], result.stderr.lines
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert not (pytester.path / "restore-report").exists()


@pytest.mark.parametrize("run", [0, 1], ids=["serial", "xdist"])
def test_records_stay_out_of_junit_xml(tiny_grid_runs: tuple[ChildRun, ChildRun], run: int) -> None:
    result = tiny_grid_runs[run]  # run with --junitxml=serial.xml, --junitxml=parallel.xml
    result.assert_passed(18)
    xml = (result.report.parent / f"{result.report.name}.xml").read_text()
    assert xml.count("<testcase ") == 18
    assert "restore_records" not in xml and "question_id" not in xml
    # the report still has every record: 7 questions, 2 regimes, 5 one-seed policies and random's 3 seeds
    records = (result.report / "records.jsonl").read_text().splitlines()
    assert len(records) == 7 * 2 * 3 * (5 + 3)


def test_the_report_thread_hands_back_its_result_and_its_errors() -> None:
    from pytest_restore.run.report import Background

    def fails() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        Background(fails).result()
    assert Background(lambda x: x + 1, 1).result() == 2


def test_ctrl_c_while_the_report_is_written_leaves_the_earlier_report_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datetime
    import threading

    from pytest_restore.report.inputs import RunInfo
    from pytest_restore.report.writer import ReportFiles
    from pytest_restore.run import report as finish

    target = tmp_path / "restore-report"
    target.mkdir()
    (target / "report.md").write_text("the earlier, complete report")
    writing, release = threading.Event(), threading.Event()

    def slow_report(
        records: object,
        info: object,
        out: Path,
        data_file: Path | None = None,
        loaders: object = None,
        prepared: Path | None = None,
        page: object = None,
    ) -> ReportFiles:
        writing.set()
        release.wait(30)
        (out / "summary.json").write_text("{}")
        (out / "report.md").write_text("the new report")
        names = ("r", "c", "report.md", "summary.json", "h", "p", "s", "report.html")
        return ReportFiles(out, *(out / name for name in names))

    monkeypatch.setattr(finish, "write_report", slow_report)
    cancelled = threading.Event()
    now = datetime.datetime.now(datetime.timezone.utc)
    writer = finish.Background(finish.write_in_place, [], RunInfo(), target, None, None, now, "session", cancelled)
    assert writing.wait(30)

    ctrl_c = finish.HeldCtrlC()
    ctrl_c.count = 1  # a user's Ctrl-C, held by the session while the writer writes

    def go_on() -> None:  # the writer goes on only once the wait has taken the Ctrl-C
        if cancelled.wait(30):
            release.set()

    threading.Thread(target=go_on, daemon=True).start()
    files, cut = finish.await_report(writer, cancelled, None, ctrl_c)
    assert cut and files is None and cancelled.is_set()
    assert (target / "report.md").read_text() == "the earlier, complete report"
    assert [p.name for p in tmp_path.iterdir()] == ["restore-report"]  # no staging directory left
    # without a Ctrl-C the same writer swaps its report in
    release.clear()
    writer = finish.Background(finish.write_in_place, [], RunInfo(), target, None, None, now, "session", threading.Event())
    release.set()
    files, cut = finish.await_report(writer, threading.Event())
    assert not cut and files is not None and (target / "report.md").read_text() == "the new report"


def test_an_xdist_controller_lets_its_parsed_data_go_and_reloads_it_when_needed(pytester: pytest.Pytester) -> None:
    # the workers do the audit: the controller drops the file it parsed to validate it once they
    # start; the judge audit (run on the controller at the end) loads it again. One worker: the
    # controller's part is the same for any number of them
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(
        """
        from pathlib import Path
        from pytest_restore.plugin.options import SESSION_KEY

        def pytest_xdist_node_collection_finished(node, ids):
            held = node.config.stash[SESSION_KEY].parts.plan.data._dataset is not None
            Path("held.txt").write_text(str(held))
        """
    )
    result = pytester.runpytest_inprocess(
        "-n", "1", "-v", *SMALL, "--restore-policies", "fifo", "--restore-audit-judge", "fake",
        "--restore-audit-judge-sample", "5",
    )
    result.assert_outcomes(passed=3)
    assert (pytester.path / "held.txt").read_text() == "False"
    # the controller says what it does before the workers' first result (test_lazy.py checks it serially)
    assert_progress_before_first_result(result.outlines)
    report = (pytester.path / "restore-report" / "report.md").read_text()
    assert "Second judge `fake` re-graded a stratified sample" in report


def _item_report(when: Literal["setup", "call", "teardown"], properties: list[tuple[str, object]], nodeid: str = "test_grid.py::test_cell[fifo-8k]") -> pytest.TestReport:
    return pytest.TestReport(nodeid, ("test_grid.py", 0, "test_cell"), {}, "passed", None, when, user_properties=properties)


def test_the_controller_gathers_records_from_its_own_runner_and_from_a_worker() -> None:
    # the controller's gathering, in process: a message as the one process hands it (records as they are)
    # and as a worker ships it (one JSON string), the usage of each process (its latest message wins), an
    # item's exit status, and every phase's report stripped of the plugin's property (junitxml would write it)
    from pytest_restore.plugin.gather import Gathered
    from pytest_restore.plugin.options import MESSAGE_PROPERTY
    from pytest_restore.records_file import from_v1
    from pytest_restore.run.message import ItemMessage

    fields = {
        "question_id": "q1", "question_type": "single-session-user", "policy": "fifo", "budget": 8000, "seed": 0,
        "regime": "b", "reader": "fake", "oracle_correct": True, "policy_correct": False, "restored_correct": True,
        "negative_restore_gain": False, "gold_units": 2, "gold_evicted": 1, "bin": "irreversible", "excluded": None,
    }
    local = from_v1(fields)
    def used(sent: int) -> dict[str, Any]:
        return {"sent": sent, "cached": 0, "failed": 0, "input_tokens": 0, "output_tokens": 0, "served": []}

    usage = {"reader openai:m": used(1)}
    shipped = ItemMessage("gw0", (from_v1({**fields, "question_id": "q2"}),), usage=usage).to_text()
    gathered = Gathered()
    setup = _item_report("setup", [(MESSAGE_PROPERTY, ItemMessage("main", (local,))), ("mine", 1)])
    gathered.take(setup)
    assert setup.user_properties == [("mine", 1)] and gathered.records == []  # only the call's report counts
    gathered.take(_item_report("call", [(MESSAGE_PROPERTY, ItemMessage("main", (local,), {"sha256": "x"}))]))
    worker_call = _item_report("call", [(MESSAGE_PROPERTY, shipped)], "t.py::test_cell[fifo-80k]")
    gathered.take(worker_call)
    # a memory system's cell: its figures arrive from the worker as they left it
    memory = {"cell": "mem0-30k", "policy": "mem0", "budget": 30_000, "reader": "fake", "ranker": "",
              "figures": {"stores": 2, "rejected": {"fact extraction": {"not valid JSON": 3}}}}
    later = ItemMessage("gw0", (), {"sha256": "x"}, {"reader openai:m": used(3)}, memory=memory).to_text()
    gathered.take(_item_report("call", [(MESSAGE_PROPERTY, later)], "t.py::test_cell[fifo-30k]"))
    assert gathered.memory == {"mem0-30k": memory}
    assert [r.question_id for r in gathered.records] == ["q1", "q2"] and gathered.records[0] is local
    assert gathered.records[1] == from_v1({**fields, "question_id": "q2"})
    assert worker_call.user_properties == []
    assert gathered.ran == {"test_grid.py::test_cell[fifo-8k]", "t.py::test_cell[fifo-80k]", "t.py::test_cell[fifo-30k]"}
    assert gathered.run_meta == {"sha256": "x"}
    assert gathered.model_calls.usage_by_process == {"gw0": {"reader openai:m": used(3)}, "main": {}}
    assert gathered.exit_code is None
    gathered.take(_item_report("call", [(MESSAGE_PROPERTY, ItemMessage("gw1", exit_code=74).to_text())], "t.py::x"))
    assert gathered.exit_code == 74 and "t.py::x" not in gathered.ran


class _Worker:
    """A stand-in for xdist's ``WorkerController``: what the scheduler sends it."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def test_records_travel_between_the_runs_processes_as_they_were_made() -> None:
    import base64
    import pickle

    from pytest_restore.records_file import read_records
    from pytest_restore.run.shared import records_of_text, records_text

    records = tuple(read_records(Path(__file__).resolve().parent.parent / "fixtures" / "records-v2" / "records.jsonl"))
    assert records_of_text(records_text(records)) == records
    assert records_of_text(records_text(())) == ()
    with pytest.raises(TypeError, match="not a tuple of records"):
        records_of_text(base64.b64encode(pickle.dumps([1])).decode("ascii"))
    with pytest.raises(TypeError, match="not a grid item's records"):
        records_of_text(b"bytes")


def test_the_grid_scheduler_implements_xdist_s_scheduling_protocol(pytester: pytest.Pytester) -> None:
    from xdist.scheduler.protocol import Scheduling  # type: ignore[import-untyped]

    from pytest_restore.plugin.scheduling import GridScheduling

    members = {name for name in vars(Scheduling) if not name.startswith("_")}
    assert members and all(hasattr(GridScheduling, name) for name in members), members
    log = type("Log", (), {"loadsched": staticmethod(lambda *args: None)})()
    config = pytester.parseconfig("-p", "xdist")
    config.option.tx = ["2*popen"]  # two workers, as -n 2 sets them up
    scheduler = GridScheduling(config, log)
    one, two = _Worker("gw0"), _Worker("gw1")
    for node in (one, two):
        scheduler.add_node(node)
    collection = [f"t.py::test_{i}" for i in range(20)]
    scheduler.add_node_collection(one, collection)
    assert not scheduler.collection_is_completed
    scheduler.add_node_collection(two, collection)
    scheduler.schedule()  # no audit in this session: xdist's load scheduling, chunks of 20 // 2 // 4
    assert (one.sent, two.sent) == ([0, 1], [2, 3]) and scheduler.has_pending and not scheduler.tests_finished
    for index in (0, 1):
        scheduler.mark_test_complete(one, index)
    assert one.sent[2:] and set(one.sent).isdisjoint(two.sent)  # refilled from what is left
    assert scheduler.remove_node(two) == "t.py::test_2"  # the item it crashed in; the rest goes back
    while scheduler.pending or scheduler.node2pending[one]:
        scheduler.mark_test_complete(one, scheduler.node2pending[one][0])
    assert sorted(set(one.sent)) == [i for i in range(20) if i != 2] and one.shutting_down and scheduler.tests_finished
