"""``python -m pytest_restore compare``: two runs cell by cell, and the gate on them."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from grid_helpers import GRID, ChildRun, flat_record, full_disk

from pytest_restore.__main__ import main
from pytest_restore.compare import (
    CompareError,
    compare_dirs,
    parse_threshold,
    render_terminal,
    worse_cells,
)
from pytest_restore.exits import IO_ERROR
from pytest_restore.record import Record
from pytest_restore.stats.comparison import compare_records

#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def _record(qid: str, bin_: str | None, correct: bool, seed: int = 0) -> Record:
    return flat_record(
        question_id=qid, question_type="multi-session", policy="fifo", budget=80_000, seed=seed, regime="b", reader="fake",
        oracle_correct=True, policy_correct=correct, bin=bin_, excluded=None,
    )


def test_paired_difference_on_shared_questions() -> None:
    old = [_record(f"q{i}", "irreversible" if i < 2 else None, i >= 2) for i in range(10)]
    # NEW: two more recoverable errors, and a question OLD does not have (left out of the pairing)
    new = [_record(f"q{i}", "irreversible" if i < 2 else "recoverable" if i < 4 else None, i >= 4) for i in range(10)]
    new.append(_record("extra", "recoverable", False))
    comparison = compare_records(old, new, resamples=2000)
    (cell,) = comparison.cells
    assert cell.shared_questions == 10
    rec = cell.figure("rec_rate")
    assert (rec.old, rec.new, rec.difference) == (0.0, 0.2, 0.2)
    assert rec.lo is not None and rec.hi is not None and 0.0 <= rec.lo < 0.2 < rec.hi
    assert cell.figure("two_bin_share").difference == pytest.approx(0.5 - 1.0)
    assert cell.figure("accuracy").worse_by == pytest.approx(0.2)
    head, row, note = render_terminal(comparison)
    assert head.split() == ["cell", "q", "two-bin", "irr/N", "rec/N", "dis/N", "destr", "acc"]
    # ten questions: every interval reaches 0, so no figure is starred as moved
    assert row.split()[3:] == ["10", "-0.500", "+0.000", "+0.200", "+0.000", "-0.500", "-0.200"]
    assert max(map(len, (head, row, note))) <= 100 and "* where its 95% interval leaves 0 out" in note
    assert worse_cells(comparison, [parse_threshold("rec_rate=0.1")])
    assert not worse_cells(comparison, [parse_threshold("rec_rate=0.25"), parse_threshold("irr_rate=0")])
    with pytest.raises(CompareError, match="FIGURE=THRESHOLD"):
        parse_threshold("recall=0.1")


@pytest.mark.slow
def test_a_ranker_change_moves_fifo_80k_and_the_gate_fails(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], embedded_data: Path
) -> None:
    """bm25-lite then recency on the same 40 questions of the embedded default: fifo 80k's recoverable errors move."""
    pytester.makepyfile(test_grid=GRID)
    common = ["-p", "no:xdist", f"--restore-data={embedded_data}", "--restore-questions", "40", "--restore-budgets", "80k", "--restore-policies",
              "fifo", "--restore-bootstrap", "500", "--restore-family-checks", "report"]
    for ranker in ("bm25-lite", "recency"):
        pytester.runpytest_inprocess(*common, "--restore-ranker", ranker, "--restore-report-dir", ranker)
    old, new, out = (str(pytester.path / x) for x in ("bm25-lite", "recency", "cmp"))
    capsys.readouterr()
    assert main(["compare", old, new, "--out", out, "--bootstrap", "2000"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((Path(out) / "compare.json").read_text())
    (cell,) = [c for c in result["cells"] if (c["policy"], c["budget"], c["regime"]) == ("fifo", 80_000, "b")]
    assert 0 < cell["shared_questions"] <= 40  # the oracle-answerable of the 40, in both runs
    assert f"| fifo 80k (b) | {cell['shared_questions']} |" in (Path(out) / "compare.md").read_text()
    rec = cell["figures"]["rec_rate"]
    assert rec["difference"] > 0 and rec["ci_lo"] > 0  # moved, and the interval says so
    row = next(line for line in printed.splitlines() if line.startswith("fifo 80k (b) "))
    # the cell's three words, then q, two-bin, irr/N, rec/N: rec/N moved and its interval leaves 0 out
    assert row.split()[3] == str(cell["shared_questions"]) and row.split()[6] == f"{rec['difference']:+.3f}*"
    table = printed.split("\nNEW - OLD on the q questions")[0].splitlines()  # the paths said after it are the user's
    assert len(table) > 1 and all(len(line) <= 100 for line in table)
    assert main(["compare", old, new, "--out", out, "--fail-if-worse", "rec_rate=0.05"]) == 1
    assert "worse: fifo 80k (b): rec_rate" in capsys.readouterr().out
    assert main(["compare", old, new, "--out", out, "--fail-if-worse", "rec_rate=0.9"]) == 0


# -- every argument checked before work; a disk that refuses is one line and exit 74 ---------------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--bootstrap", "0"], "argument --bootstrap: '0' is below the minimum of 100"),
        (["--bootstrap", "-5"], "argument --bootstrap: '-5' is below the minimum of 100"),
        (["--bootstrap", "lots"], "argument --bootstrap: 'lots' is not a whole number"),
        (["--bootstrap-seed", "-1"], "argument --bootstrap-seed: '-1' is below the minimum of 0"),
    ],
)
def test_a_bad_compare_argument_is_a_usage_error_not_worse(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:  # before any report directory is read
        main(["compare", "no-such-old", "no-such-new", *args])
    assert stopped.value.code == 2  # a usage error; 1 means "worse"
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"compare: error: {said}") and "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["full", "read-only"])
def test_a_report_out_on_a_disk_that_refuses_is_one_line_and_exit_74(
    tiny_grid_runs: tuple[ChildRun, ChildRun],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    code: int,
) -> None:
    records = tiny_grid_runs[0].report / "records.jsonl"
    out = tmp_path / "out"
    full_disk(monkeypatch, tmp_path, code=code)
    assert main(["report", str(records), "--out", str(out)]) == IO_ERROR
    assert capsys.readouterr().err == f"error: --out {out}: {os.strerror(code)}\n"


def test_an_out_that_cannot_be_made_is_said_before_any_work(
    tiny_grid_runs: tuple[ChildRun, ChildRun], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").write_text("a file")
    report = tiny_grid_runs[0].report
    for args in (["report", str(report / "records.jsonl")], ["compare", str(report), str(report)]):
        assert main([*args, "--out", str(tmp_path / "taken" / "out")]) == IO_ERROR
        said = f"error: --out {tmp_path / 'taken' / 'out'}: {tmp_path / 'taken'} is a file, not a directory\n"
        assert capsys.readouterr().err == said


def test_compare_out_on_a_full_disk_is_one_line_and_exit_74(
    tiny_grid_runs: tuple[ChildRun, ChildRun],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    serial, parallel = tiny_grid_runs
    full_disk(monkeypatch, tmp_path)
    assert main(["compare", str(serial.report), str(parallel.report), "--out", str(tmp_path / "cmp"), "--bootstrap", "200"]) == IO_ERROR
    assert capsys.readouterr().err == f"error: --out {tmp_path / 'cmp'}: No space left on device\n"


# -- no green without a comparison: unlike runs are refused, a gate over nothing fails, no cell dropped --


def test_runs_on_different_data_are_refused_in_one_line_unless_asked(
    embedded_report: Path,
    tiny_grid_runs: tuple[ChildRun, ChildRun],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old, new, out = str(embedded_report), str(tiny_grid_runs[0].report), str(tmp_path / "cmp")
    assert main(["compare", old, new, "--out", out, "--fail-if-worse", "rec_rate=0.0"]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith(f"error: {old} and {new} audited different data (sha256 ") and "--allow-unlike" in line
    assert not captured.out and not (tmp_path / "cmp").exists()
    # compared anyway: no question is in both, so a gate over them fails rather than passing on nothing
    assert main(["compare", old, new, "--out", out, "--fail-if-worse", "rec_rate=0.0", "--allow-unlike"]) == 1
    captured = capsys.readouterr()
    assert "| fifo 80k (b) |" not in captured.out  # the tiny run's budgets are not the embedded one's
    assert captured.err == "error: --fail-if-worse: no question was compared (no cell in both runs): the gate checked nothing\n"
    assert "not compared: " in captured.out


def test_other_questions_or_another_reader_are_refused(tmp_path: Path, tiny_grid_runs: tuple[ChildRun, ChildRun]) -> None:
    base = tiny_grid_runs[0].report
    records = [json.loads(line) for line in (base / "records.jsonl").read_text().splitlines()]
    fewer = [r for r in records if r["question_id"] != records[0]["question_id"]]
    other_reader = [{**r, "reader": "fake-strong"} for r in records]
    problems = {}
    for name, rows in (("fewer", fewer), ("reader", other_reader)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(CompareError) as refused:
            compare_dirs(base, folder, resamples=200)
        problems[name] = str(refused.value)
        assert compare_dirs(base, folder, resamples=200, allow_unlike=True).cells  # asked: compared
    assert "audited different questions (7 and 6, 6 in both)" in problems["fewer"]
    assert "have different readers (fake and fake-strong)" in problems["reader"]


def test_a_one_ranker_run_against_a_three_ranker_run_names_the_cells_only_one_holds(
    tiny_grid_runs: tuple[ChildRun, ChildRun],
    rankers_grid: ChildRun,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """issue 32: the dense and hybrid cells of the NEW run are named, not dropped."""
    old, new = str(tiny_grid_runs[0].report), str(rankers_grid.report)
    assert main(["compare", old, new, "--out", str(tmp_path / "cmp"), "--bootstrap", "200"]) == 0
    printed = capsys.readouterr().out
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert {c["ranker"] for c in result["cells"]} == {"bm25-lite"}  # matched ranker by ranker
    assert {(c["policy"], c["budget"]) for c in result["cells"]} == {
        (p, b) for p in ("no-evict", "fifo", "random") for b in (600, 300)
    }
    only_new = result["only_new"]
    assert len(only_new) == 3 * 2 * 2 * 2 and all("ranker dense:fake" in c or "ranker hybrid:fake" in c for c in only_new)
    assert f"not compared: 24 cells only in NEW: {', '.join(only_new)}" in printed
    assert "| fifo 600 (b) ranker bm25-lite |" in (tmp_path / "cmp" / "compare.md").read_text()
    assert any(line.startswith("fifo 600 (b) ranker bm25-lite ") for line in printed.splitlines())
    assert any("redundancy" in c for c in result["only_old"])  # the policies the NEW run did not have

