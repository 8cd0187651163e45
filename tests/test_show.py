"""``python -m pytest_restore show``: one question's story from the records and the data file, no model call."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import TINY

from pytest_restore.__main__ import main
from pytest_restore.data.dataset import Question, load_dataset
from pytest_restore.data.units import Granularity, build_history
from pytest_restore.report.story import _Units, history_texts
from pytest_restore.stats.results import budget_label


def _section(story: str, name: str) -> str:
    """The lines of one condition in a printed story: its header and the lines indented under it."""
    lines = story.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {name}"))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[start:end])


def _question(question_id: str) -> Question:
    return next(q for q in load_dataset(TINY).questions if q.question_id == question_id)


def _show(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["show", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_units_a_story_names_are_the_audits(tiny_records: list[dict[str, Any]]) -> None:
    """The texts come back from the data file in the audit's order: the same units, the same gold."""
    dataset = load_dataset(TINY)
    for question in dataset.questions[:3]:
        for granularity in Granularity:
            history = build_history(question, granularity)
            texts = history_texts(question, granularity)
            assert [(u.session, u.turn, u.date, u.role, u.content) for u in history.units] == [
                (u.session, u.turn, u.date, u.role, u.content) for u in texts
            ]
            # a story makes each unit when it names one, backwards or forwards, and they are the same units
            named = _Units(question, granularity)
            assert len(named) == len(texts) and [named[p] for p in reversed(range(len(texts)))] == texts[::-1]
            assert named[-1] == texts[-1] and named[1:4] == texts[1:4] and list(named) == texts
            with pytest.raises(IndexError):
                named[len(texts)]
    by_id = {q.question_id: q for q in dataset.questions}
    for r in tiny_records[:20]:
        assert tuple(r["gold_positions"]) == build_history(by_id[r["question_id"]]).gold


def test_show_tells_a_question_of_each_bin(
    tiny_report: Path, tiny_records: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """The first record of each bin the tiny grid holds (irreversible and recoverable; no residual)."""
    firsts = {r["bin"]: r for r in reversed(tiny_records) if r["bin"]}
    assert {"irreversible", "recoverable"} <= set(firsts)
    for bin_, r in firsts.items():
        _check_story(tiny_report, r, bin_, capsys)


def _check_story(report: Path, r: dict[str, Any], bin_: str, capsys: pytest.CaptureFixture[str]) -> None:
    cell = f"{r['policy']}-{r['budget'] // 1000}k-{r['regime']}" if r["budget"] % 1000 == 0 else ""
    cell = cell or f"{r['policy']}-{r['budget']}-{r['regime']}"
    code, out, err = _show(capsys, r["question_id"], "--report-dir", str(report), "--data", str(TINY), "--cell", cell)
    assert code == 0, err
    blocks = out.split("\n== ")
    head, stories = blocks[0], [b for b in blocks[1:] if f"seed {r['seed']}," in b.splitlines()[0]]
    assert f"question:  {r['question']}" in head and f"reference: {r['reference']}" in head
    assert head.count("[gold] ") == len(r["gold_positions"])
    story = stories[0]
    assert story.splitlines()[0].endswith(f": {bin_.upper()}")
    # one cell is shown whole: each unit a reader saw with its whole text under its line
    texts = {u.position: u.content for u in history_texts(_question(r["question_id"]), Granularity.TURN)}
    flat = " ".join(story.split())
    for position in r["conditions"]["policy"]["injected_positions"]:
        assert " ".join(texts[position].split()) in flat
    evicted = set(r["gold_evicted_units"])
    fates = [line for line in story.splitlines() if line.startswith("  gold #")]
    for pos, line, after, rank in zip(r["gold_positions"], fates, r["gold_evicted_after"], r["gold_ranks"]):
        assert line.startswith(f"  gold #{pos} ")
        if pos in evicted:
            assert f"evicted when #{after} " in line
        else:
            assert "kept in the store" in line and (f"rank {rank} " in line if rank is not None else "not ranked" in line)
    for name in ("oracle", "policy", "restored"):
        condition = r["conditions"][name]
        text = _section(story, name)
        seen = [int(m) for m in re.findall(r"^    [* ] #(\d+) ", text, flags=re.MULTILINE)]
        assert seen == condition["injected_positions"], name
        verdict = {True: "correct", False: "wrong", None: "no verdict"}[condition["correct"]]
        assert f"answer ({verdict}): " in text
        for line in re.findall(r"^    [* ] #\d+ .*$", text, flags=re.MULTILINE):
            pos = int(line.split("#")[1].split()[0])
            assert ("gold" in line.split("[")[-1]) == (pos in r["gold_positions"])


def test_show_without_a_cell_is_one_line_a_record_and_a_pointer(
    tiny_report: Path, tiny_records: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    qid = next(r for r in tiny_records if r["bin"] == "irreversible")["question_id"]
    mine = [r for r in tiny_records if r["question_id"] == qid]
    code, out, err = _show(capsys, qid, "--report-dir", str(tiny_report), "--data", str(TINY))
    assert code == 0, err
    head, listed = out.split(f"{len(mine)} records, one a line (bin: gold evicted; verdicts):\n")
    assert f"question:  {mine[0]['question']}" in head
    lines = listed.strip().splitlines()
    assert len(lines) == len(mine) + 2 and lines[-2] == ""
    first = min((r for r in mine if r["bin"]), key=lambda r: r["regime"] != "b")
    cell = f"{first['policy']}-{budget_label(first['budget'])}-{first['regime']}"
    assert lines[-1].startswith(f"one cell whole (every memory its readers saw, each text in full): python -m pytest_restore show {qid} --cell {cell}")
    row = next(line for line in lines if line.startswith(f"  {cell} seed {first['seed']}: {first['bin']}: gold evicted "))
    verdict = {True: "correct", False: "wrong", None: "no verdict"}
    assert row.endswith(", ".join(f"{n} {verdict[first['conditions'][n]['correct']]}" for n in ("oracle", "policy", "restored")))
    # --full: every cell's story whole, as --cell gives one
    code, whole, _ = _show(capsys, qid, "--report-dir", str(tiny_report), "--data", str(TINY), "--full")
    assert code == 0 and whole.count("\n== ") == len(mine) and "..." not in whole


def test_show_refuses_in_one_line(tiny_report: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qid = json.loads((tiny_report / "records.jsonl").read_text().splitlines()[0])["question_id"]
    code, out, err = _show(capsys, "no-such-question", "--report-dir", str(tiny_report), "--data", str(TINY))
    assert (code, out, err) == (2, "", "error: no record of question 'no-such-question'\n")
    code, _, err = _show(capsys, qid, "--report-dir", str(tiny_report), "--data", str(TINY), "--cell", "fifo-1k")
    assert code == 2 and err.startswith(f"error: question {qid!r} has no record in cell 'fifo-1k'; its cells: ")
    assert len(err.splitlines()) == 1
    other = tmp_path / "tiny.json"
    other.write_text(TINY.read_text() + "\n")  # the same questions, another file
    code, _, err = _show(capsys, qid, "--report-dir", str(tiny_report), "--data", str(other))
    assert code == 2 and "is not the data this run read" in err and len(err.splitlines()) == 1
    code, _, err = _show(capsys, qid, "--report-dir", str(tmp_path))
    assert code == 2 and err.startswith("error: ") and "records.jsonl" in err and len(err.splitlines()) == 1


def test_show_given_another_data_file_names_the_mismatch(capsys: pytest.CaptureFixture[str]) -> None:
    """``show --data`` given a file that is not the run's (another dataset, or JSON of another shape) says so,
    with both digests, rather than the loader's complaint about a field (issue 44)."""
    import hashlib

    run = Path(__file__).resolve().parent.parent / "fixtures" / "records-v2"
    other = TINY.with_name("locomo_tiny.json")
    assert main(["show", "0a995998", "--report-dir", str(run), "--data", str(other)]) == 2
    got, want = (hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in (other, TINY))
    assert capsys.readouterr().err == (
        f"error: {other} is not the data this run read: its sha256 is {got}..., the run read tiny.json, "
        f"sha256 {want}...: pass that file with --data\n"
    )


def test_the_report_reads_the_runs_prepared_copy_of_the_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session's report takes the page's texts from the run's prepared copy of the data (no second parse of the
    file) when it holds the questions the run's loader read; without one it reads the file and prepares nothing."""
    from pytest_restore.data import loaders
    from pytest_restore.report.inputs import RunInfo
    from pytest_restore.report.story import open_data

    data = tmp_path / "tiny.json"
    data.write_bytes(TINY.read_bytes())
    prepared = tmp_path / "prepared"
    parsed = loaders.load_data(data, cache_dir=prepared)  # the run prepares it, as Plan.dataset does
    info = RunInfo(dataset={"dataset": parsed.name, "sha256": parsed.sha256})
    read: list[str] = []
    monkeypatch.setattr(loaders, "read_json", lambda *a, **k: read.append("parsed") or pytest.fail("parsed again"))
    assert open_data(info, data, prepared=prepared) == parsed and not read
    monkeypatch.undo()
    elsewhere = tmp_path / "unprepared"
    assert open_data(info, data, prepared=elsewhere) == parsed and not elsewhere.exists()  # read, nothing written
    other = RunInfo(dataset={"dataset": "locomo", "sha256": parsed.sha256})  # the copy's loader is not the run's
    with pytest.raises(Exception, match="sample_id"):  # read by the run's loader, not taken from the copy
        open_data(other, data, prepared=prepared)
