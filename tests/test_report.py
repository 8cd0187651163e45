"""Tests of the report: interval columns, hypotheses.json, session failures, saved records."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import (
    TINY,
    ChildRun,
    bootstrap_settings,
    figures_not_rendered,
    flat_record,
    report_file,
)

from pytest_restore.__main__ import main
from pytest_restore.data.dataset import QUESTION_TYPES
from pytest_restore.record import Record
from pytest_restore.report.inputs import (
    RecordsError,
    RunInfo,
    analyse_records,
    read_records,
    sort_records,
)
from pytest_restore.report.markdown import render_report_md
from pytest_restore.report.model import build_model
from pytest_restore.report.writer import (
    ReportFiles,
    render_records_jsonl,
    terminal_lines,
    write_report,
)
from pytest_restore.stats.families import FAMILIES
from pytest_restore.stats.findings import findings, session_failures
from pytest_restore.stats.results import CELL_COLUMNS, INTERVAL_COLUMNS, PROTOCOL_COLUMNS

#: A record's fields in the flat layout of schema version 1 (see ``grid_helpers.flat_record``).
Flat = dict[str, Any]

BUDGETS = (80_000, 8_000)
SEEDS = {"random": (0, 1, 2)}
#: Probability that eviction removes gold, per policy and budget (loose, tight).
HEALTHY = {
    "no-evict": (0.0, 0.0),
    "fifo": (0.2, 0.4),
    "random": (0.2, 0.4),
    "redundancy": (0.15, 0.35),
    "llm-importance": (0.1, 0.3),
    "control": (0.9, 0.99),
}
#: The failing case: the control evicts gold no more often than the baselines.
TAME_CONTROL = {**HEALTHY, "control": (0.2, 0.4)}


def fixed_records(
    eviction: dict[str, tuple[float, float]] = HEALTHY, questions: int = 36, reader: str = "fake"
) -> list[Record]:
    """Deterministic records of a small grid (string-seeded ``random.Random``, no model).

    Gold evicted: the policy answer is wrong unless a lucky draw; restore fixes
    most (irreversible) but not all (residual). Gold kept: regime (a) answers as
    the restored condition does (no recoverable error by construction); regime
    (b) sometimes misses the gold (recoverable). One question in nine is not
    oracle-answerable; one record fails its reader call (excluded).
    """
    records: list[Flat] = []
    for i in range(questions):
        qid = f"q{i:03d}"
        qtype = QUESTION_TYPES[i % len(QUESTION_TYPES)]
        oracle = i % 9 != 4
        for policy, rates in eviction.items():
            for budget, rate in zip(BUDGETS, rates):
                for seed in SEEDS.get(policy, (0,)):
                    rng = random.Random(f"{policy}|{budget}|{seed}|{qid}")
                    evicted = rng.random() < rate
                    restored = rng.random() < 0.85
                    missed = rng.random() < 0.3
                    for regime in ("a", "b"):
                        if evicted:
                            correct = rng.random() < 0.1
                        elif regime == "a":
                            correct = restored
                        else:
                            correct = restored and not missed
                        records.append(
                            record(
                                qid,
                                qtype,
                                policy,
                                budget,
                                seed,
                                regime,
                                reader,
                                oracle,
                                correct,
                                restored,
                                evicted,
                            )
                        )
    records[7]["excluded"] = "api_error: reader"
    records[7]["policy_correct"] = records[7]["bin"] = None
    return [flat_record(**r) for r in records]


def record(
    qid: str,
    qtype: str,
    policy: str,
    budget: int,
    seed: int,
    regime: str,
    reader: str,
    oracle: bool,
    correct: bool,
    restored: bool,
    evicted: bool,
) -> Flat:
    """One record in the audit's schema, binned as the audit bins it."""
    bin_ = None
    if oracle and not correct:
        bin_ = "residual" if not restored else "irreversible" if evicted else "recoverable"
    return {
        "question_id": qid,
        "question_type": qtype,
        "policy": policy,
        "budget": budget,
        "seed": seed,
        "regime": regime,
        "reader": reader,
        "judge": "fake",
        "scorer": "fake",
        "oracle_correct": oracle,
        "policy_correct": correct,
        "restored_correct": restored,
        "negative_restore_gain": correct and not restored,
        "gold_units": 2,
        "gold_evicted": int(evicted),
        "bin": bin_,
        "excluded": None,
    }


INFO = RunInfo(
    settings=bootstrap_settings(2000), dataset={"sha256": "0" * 64}, exclusions={"no gold units": 1}
)
#: The data file these reports name for report.html's texts: none (the records are made by hand, of no data).
#: Unnamed, the settings' data (the embedded default) would be read, 0.5 CPU s a report (generated first on a
#: clean checkout), only to be refused for its sha256; the page says why it has no texts either way.
NO_DATA = Path(__file__).resolve().parent / "no-such-data.json"


def write(records: list[Record], out: Path, info: RunInfo = INFO) -> ReportFiles:
    """The report of hand-made ``records`` (:func:`write_report`, no data file for the page)."""
    return write_report(records, info, out, data_file=NO_DATA)


def report_md(records: list[Record], info: RunInfo = INFO) -> tuple[str, tuple[str, ...]]:
    """``report.md``'s text and the not-testable lines of ``records``, from the report model ``write_report``
    renders (:func:`build_model`): for tests of what the text says, without the figure and page (1 CPU s)."""
    model = build_model(sort_records(records), info)
    return render_report_md(model), model.log.not_testable


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.fixture(scope="module")
def healthy_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report written from the healthy records."""
    out = tmp_path_factory.mktemp("healthy")
    write(fixed_records(), out)
    return out


def test_cells_csv_gains_interval_columns_within_bounds(healthy_report: Path) -> None:
    text = (healthy_report / "cells.csv").read_text()
    header = text.splitlines()[0].split(",")
    assert header[:4] + header[5:14] == list(PROTOCOL_COLUMNS) and header[4] == "ranker"
    assert header[14:20] == list(INTERVAL_COLUMNS)
    assert header == list(CELL_COLUMNS)
    rows = _csv(text)
    assert len(rows) == 6 * 2 * 2
    checked = 0
    for row in rows:
        for point, stem in (
            ("two_bin_share", "two_bin"),
            ("irr_rate", "irr_rate"),
            ("accuracy", "accuracy"),
        ):
            if not row[point]:
                assert row[f"{stem}_lo"] == row[f"{stem}_hi"] == ""
                continue
            lo, value, hi = float(row[f"{stem}_lo"]), float(row[point]), float(row[f"{stem}_hi"])
            assert 0.0 <= lo <= value <= hi <= 1.0, (
                row["policy"],
                row["budget"],
                row["regime"],
                stem,
            )
            checked += 1
    assert checked > 60
    fifo = next(
        r for r in rows if (r["policy"], r["budget"], r["regime"]) == ("fifo", "80000", "b")
    )
    assert float(fifo["two_bin_hi"]) > float(fifo["two_bin_lo"])


def test_hypotheses_json_lists_every_family(healthy_report: Path) -> None:
    text = (healthy_report / "hypotheses.json").read_text()
    assert text.endswith("}\n")
    data = json.loads(text)
    # a run of one ranker has no ranker comparison to list
    assert set(data["families"]) == {family.name for family in FAMILIES if family.shown_empty}
    assert len(data["families"]["H1"]) == len(data["families"]["H3"]) == 4 * 2
    assert len(data["families"]["positive-control"]) == 3 * 2
    assert len(data["families"]["R1"]) == 6 * 2
    for family, tests in data["families"].items():
        for test in tests:
            for key in ("statistic", "ci_lo", "ci_hi", "p_raw", "p_holm", "decision"):
                assert key in test, (family, key)
    assert data["settings"]["resamples"] == 2000  # from RunInfo.settings["bootstrap"]
    matched = [m for m in data["matching"] if m["matched"]]
    assert len(data["families"]["H2"]) == len(data["families"]["TOST"]) == len(matched)
    assert all(("<=" in m["reason"]) == m["matched"] for m in data["matching"])
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_report_md_has_every_section(healthy_report: Path) -> None:
    report = (healthy_report / "report.md").read_text()
    for heading in (
        "## Regime (b)",
        "## Regime (a)",
        "## Hypothesis tests",
        "### H1",
        "### H3",
        "### R1",
        "### H2",
        "### Positive control",
        "### Equivalence (TOST)",
        "## H2 pairs",
        "## Bins by question type",
    ):
        assert heading in report, heading
    assert "Every testable expectation is met." in report
    # the answer first: the run line, the simulated-models sentence, the findings
    head = report.splitlines()[:25]
    assert "not a finding about any model" in head[2] and head[4].startswith("**Run:** ")
    assert any(line.startswith("- **Destruction.** At 80k") and "95% CI" in line for line in head)
    assert any(line.startswith("- **Regimes.**") for line in head)
    assert any(line.startswith("- **Matched accuracy.**") and "positive control" in line for line in head)
    assert report.index("## Run settings") > report.index("## Hypothesis tests")
    assert "| fifo | 80k | fake | 32 |" in report  # N: 36 questions, 4 not oracle-answerable
    assert (healthy_report / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (healthy_report / "figure.svg").read_text().lstrip().startswith("<?xml")


def test_session_failures_empty_for_a_healthy_grid() -> None:
    analysis = analyse_records(fixed_records(), INFO)
    assert session_failures(analysis) == []


def test_session_failures_name_a_tame_control(tmp_path: Path) -> None:
    records = fixed_records(TAME_CONTROL, questions=150)  # enough questions to have the power
    failures = session_failures(analyse_records(records, INFO))
    assert failures
    assert all(line.startswith("positive-control: control not shown more destructive than ") for line in failures)
    assert any(" at 80k (irr-rate difference " in line for line in failures)
    assert all(", CI " in line and len(line) < 120 for line in failures), failures
    with figures_not_rendered():  # the report's failures and text are read here, not its figure
        files = write(records, tmp_path)
    assert list(files.failures) == failures
    assert "Expectations not met (each fails the session):" in files.report.read_text()


@pytest.fixture(scope="module")
def tame_report(tmp_path_factory: pytest.TempPathFactory) -> ReportFiles:
    """The report of the tame control on 36 questions (too few to test it); its figure built, not rendered (not read)."""
    with figures_not_rendered():
        return write(fixed_records(TAME_CONTROL), tmp_path_factory.mktemp("tame"))


def test_a_tame_control_on_few_questions_is_not_testable_and_says_how_many_would_do(tame_report: ReportFiles) -> None:
    files = tame_report
    assert files.failures == ()
    (line,) = files.untestable
    assert line.startswith("positive-control: ") and " not testable at 32 questions" in line
    assert "questions would test them (raise --restore-questions" in line
    report = files.report.read_text()
    assert "Not testable at this N (reported, not failed):" in report
    assert json.loads(files.summary.read_text())["not_testable"] == [line]


def test_an_untestable_line_gives_the_least_detectable_effect_not_a_width_called_too_wide(tame_report: ReportFiles) -> None:
    (line,) = tame_report.untestable
    least = line.split("the least irr-rate difference they could detect is ")[1].split(",")[0]
    low, high = (float(x) for x in least.split(" to "))
    assert 0.15 < low <= high, line  # above the effect the family is about, as the sentence says
    assert "too wide" not in line and "±" not in line


#: Every policy keeps every gold unit: what a run sees where its budgets evict nothing.
NO_EVICTION = {policy: (0.0, 0.0) for policy in HEALTHY}


def test_contrasts_of_identical_stores_are_not_given_a_resolution_of_zero() -> None:
    # irr is 0 in every cell, so every contrast's interval is [0, 0]: nothing was resolved to ±0.000
    report, untestable = report_md(fixed_records(NO_EVICTION))
    matched = next(line for line in report.splitlines() if line.startswith("- **Matched accuracy.**"))
    assert "±0.000" not in matched and "pairs score every question alike on both sides" in matched, matched
    (line,) = untestable
    assert "±0.00" not in line and "score every question alike on both sides" in line, line


def test_budgets_that_bind_for_no_history_are_named_as_the_reason_not_the_number_of_questions() -> None:
    idle = RunInfo(settings=INFO.settings, dataset={"sha256": "0" * 64, "budget_binding": {"80000": 0.0, "8000": 0.0}})
    assert idle.idle_budgets == {80_000, 8_000}
    report, untestable = report_md(fixed_records(NO_EVICTION), idle)
    (line,) = untestable
    assert line.startswith("positive-control: 6 of 6 tests, nor at any N: budgets 80k, 8k bind for no history"), line
    assert "questions would test them" not in line  # more questions would not
    matched = next(line for line in report.splitlines() if line.startswith("- **Matched accuracy.**"))
    assert "at budgets that evict nothing (80k, 8k), where both sides are the same store" in matched, matched
    assert "so the control evicts no gold there" in matched and "resolution" not in matched


def test_the_terminal_table_ends_with_a_legend_of_its_policies_and_its_pooled_n() -> None:
    lines = terminal_lines(analyse_records(fixed_records({**HEALTHY, "mine": (0.1, 0.2)}), INFO))
    legend = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("policies: "))) :])
    assert all(len(line) <= 100 for line in lines if not line.startswith(("policy ", *HEALTHY, "mine")))
    assert "fifo evicts the oldest" in legend and "control evicts the most fact-dense, so the gold, first" in legend
    assert "mine" not in legend  # a registered policy is its author's to describe
    assert legend.endswith("N: questions answerable from their gold alone; random counts each once per seed (3 seeds: about 3x)")
    rows = {line.split()[0]: int(line.split()[2]) for line in lines if line.split()[1] == "80k"}
    assert rows["random"] == 3 * rows["fifo"]  # what the legend's N line explains


def test_session_failures_name_an_h1_cell_without_rejection() -> None:
    # regime (a) of fifo at 8k: recoverable errors only, so the two-bin share is 0
    records = [
        replace(r, bin="recoverable") if (r.policy, r.budget, r.regime, r.bin) == ("fifo", 8_000, "a", "irreversible") else r
        for r in fixed_records()
    ]
    failures = session_failures(analyse_records(records, INFO))
    h1 = [line for line in failures if line.startswith("H1")]
    assert h1 == [
        "H1: fifo at 8k: regime-(a) two-bin share not shown above 0 (two-bin share 0.00, CI 0.00 to 0.00)"
    ]


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda r: r.pop("bin"), "line 3: question 'q000': field 'bin': missing"),
        (lambda r: r.pop("question_type"), "field 'question_type': missing"),
        (
            lambda r: r.__setitem__("budget", "80k"),
            "field 'budget': must be an integer, got \"80k\"",
        ),
        (lambda r: r.__setitem__("regime", "c"), "field 'regime': must be 'a' or 'b'"),
        (lambda r: r.__setitem__("bin", "lost"), "field 'bin': must be 'irreversible'"),
        (
            lambda r: r["conditions"]["policy"].__setitem__("correct", None),
            "field 'conditions.policy.correct': null on an oracle-answerable",
        ),
        (lambda r: r["conditions"].pop("oracle"), "field 'conditions.oracle': missing"),
    ],
)
def test_read_records_names_line_question_and_field(
    tmp_path: Path, mutate: Any, expected: str
) -> None:
    records = fixed_records(questions=2)
    lines = render_records_jsonl(records).splitlines()
    bad = json.loads(lines[2])
    assert bad["question_id"] == "q000"
    mutate(bad)
    lines[2] = json.dumps(bad)
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordsError) as err:
        read_records(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    assert expected in message


def test_read_records_rejects_non_json_and_empty_files(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text('{"question_id": "q1"\n')
    with pytest.raises(RecordsError, match=r"line 1: not JSON"):
        read_records(path)
    path.write_text("\n")
    with pytest.raises(RecordsError, match=r"no records"):
        read_records(path)
    with pytest.raises(RecordsError, match=r"cannot read"):
        read_records(tmp_path / "absent.jsonl")


def _process(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_restore *args`` in a process of its own, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pytest_restore", *args], check=False, capture_output=True, text=True
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The same command through its ``main`` in this process (the process's start costs ~2 s of CPU)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        returncode = main(list(args))
    return subprocess.CompletedProcess(["pytest_restore", *args], returncode, out.getvalue(), err.getvalue())


def test_report_cli_error_is_one_line_exit_2(tmp_path: Path) -> None:
    records = [r.to_json() for r in fixed_records(questions=2)]
    del records[0]["gold_evicted"]
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = _process("report", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"error: {path}: line 1: question 'q000': field 'gold_evicted': missing"
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_report_cli_without_summary_uses_an_empty_run_info(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(render_records_jsonl(fixed_records(questions=12)))
    with figures_not_rendered():  # report.md and summary.json are read, not the figure
        result = _cli("report", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| dataset sha256 | `unknown` (unknown) |" in report and "| --restore-" not in report
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["run"]["settings"] == {}


def test_report_cli_refuses_out_that_is_a_file(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(render_records_jsonl(fixed_records(questions=2)))
    out = tmp_path / "out.txt"
    out.write_text("keep me\n")
    result = _cli("report", str(path), "--out", str(out))
    assert result.returncode == 74  # a file-system problem (exits.IO_ERROR), said before any work
    assert result.stderr.strip() == f"error: --out {out}: {out} is a file, not a directory"
    assert out.read_text() == "keep me\n"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"run_id": "another"}, "field 'run_id': 'abc' but"),
        ({"granularity": "session"}, "field 'granularity': 'turn' but"),
    ],
)
def test_report_cli_refuses_records_of_another_run_than_the_summary(
    tmp_path: Path, change: dict[str, str], expected: str
) -> None:
    records = [replace(r, run_id="abc", granularity="turn") for r in fixed_records(questions=2)]
    path = tmp_path / "records.jsonl"
    path.write_text(render_records_jsonl(records))
    saved = json.loads((RECORDS_V2 / "summary.json").read_text())["run"]["settings"]  # a whole run's settings
    settings = saved | {"run_id": "abc", "granularity": "turn", "ranker": "bm25-lite"} | change
    (tmp_path / "summary.json").write_text(json.dumps({"run": {"settings": settings}}))
    result = _cli("report", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}: line 1: question 'q000': ") and expected in line
    assert not (tmp_path / "out").exists()


def test_report_cli_refuses_concatenated_runs(tmp_path: Path) -> None:
    records = render_records_jsonl(fixed_records(questions=2))
    path = tmp_path / "records.jsonl"
    path.write_text(records + records)
    result = _cli("report", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    first = len(records.splitlines()) + 1
    assert f"line {first}: question 'q000': repeats the record of line 1" in result.stderr
    assert not (tmp_path / "out").exists()


REPORT_FILES = (
    "records.jsonl",
    "cells.csv",
    "hypotheses.json",
    "report.md",
    "summary.json",
    "figure.png",
    "figure.svg",
    "report.html",
)


def test_session_report_is_identical_with_xdist_and_rebuilt_from_records(
    tiny_grid_runs: tuple[ChildRun, ChildRun], tmp_path: Path
) -> None:
    """Serial and ``-n 2`` sessions write the same bytes; ``report`` rebuilds them exactly, provenance included."""
    serial, parallel = (run.report for run in tiny_grid_runs)
    rebuilt = tmp_path / "rebuilt"
    result = _cli("report", str(serial / "records.jsonl"), "--out", str(rebuilt), "--data", str(TINY))
    assert result.returncode == 0, result.stderr
    assert json.loads((serial / "hypotheses.json").read_text())["settings"]["resamples"] == 500
    records = [json.loads(line) for line in (serial / "records.jsonl").read_text().splitlines()]
    assert {(r["run_id"], r["granularity"]) for r in records} == {(records[0]["run_id"], "turn")}
    assert len(records[0]["run_id"]) == 16
    for name in REPORT_FILES:
        assert report_file(serial / name) == report_file(parallel / name), name
        assert (serial / name).read_bytes() == (rebuilt / name).read_bytes(), name
    # rebuilt into its own directory, the session's provenance stays (summary.json read before it is replaced);
    # only summary.json is read after this rebuild: its figure built, not rendered
    with figures_not_rendered():
        assert _cli("report", str(rebuilt / "records.jsonl"), "--out", str(rebuilt), "--data", str(TINY)).returncode == 0
    assert (rebuilt / "summary.json").read_bytes() == (serial / "summary.json").read_bytes()


#: One run's records as two writers wrote them: the version-1 writer (one flat object per record)
#: and this package's (``tiny.json``, fifo at 100 tokens, with the ablations; same run id).
RECORDS_V1 = Path(__file__).resolve().parent.parent / "fixtures" / "records-v1"
RECORDS_V2 = RECORDS_V1.with_name("records-v2")


def test_a_version_1_records_file_is_migrated_and_rebuilds_the_report_of_version_2(tmp_path: Path) -> None:
    from pytest_restore.record import SCHEMA_VERSION

    assert json.loads((RECORDS_V1 / "summary.json").read_text())["record_schema"] == 1
    assert json.loads((RECORDS_V2 / "summary.json").read_text())["record_schema"] == SCHEMA_VERSION == 2
    old, new = read_records(RECORDS_V1 / "records.jsonl"), read_records(RECORDS_V2 / "records.jsonl")
    assert old == new
    assert any(r.ablations is not None for r in old) and any(r.ablations is None for r in old)
    assert all(r.conditions.policy.answer is not None for r in old)
    for source in (RECORDS_V1, RECORDS_V2):
        with figures_not_rendered():  # the rebuilt records, tables and summary are compared, not the figures
            result = _cli("report", str(source / "records.jsonl"), "--out", str(tmp_path / source.name))
        assert result.returncode == 0, result.stderr
    for name in ("records.jsonl", "cells.csv", "hypotheses.json", "report.md"):
        rebuilt_v1, rebuilt_v2 = (tmp_path / d.name / name for d in (RECORDS_V1, RECORDS_V2))
        assert rebuilt_v1.read_bytes() == rebuilt_v2.read_bytes(), name
    summary = json.loads((tmp_path / RECORDS_V1.name / "summary.json").read_text())
    assert summary["record_schema"] == SCHEMA_VERSION  # rewritten in the current version


def test_a_saved_run_log_of_either_version_reads_back_typed() -> None:
    import inspect

    from pytest_restore.report import inputs
    from pytest_restore.run.checks import GridCoverage, read_check
    from pytest_restore.settings import AuditSettings

    for source, version in ((RECORDS_V1, 1), (RECORDS_V2, 2)):
        saved = json.loads((source / "summary.json").read_text())
        log = inputs.read_run_log(source / "records.jsonl", read_check)
        assert log is not None and log.record_schema == version
        settings = log.run.settings
        assert isinstance(settings, inputs.RunSettings) and isinstance(settings.audit, AuditSettings)
        assert settings.audit.budgets == (100,) and settings.audit.policies == ("fifo",) and settings.audit.bootstrap == 200
        assert settings.run_id == saved["run"]["settings"]["run_id"] and settings.model_usage == {}
        assert isinstance(log.run.checks["grid"], GridCoverage) and log.run.dataset["audited"] == 7
        assert log.run.provenance is not None and log.run.provenance.session_id == saved["provenance"]["session_id"]
        # written back as it was read: the run section whole, every key kept
        assert log.run.to_json() == saved["run"]
    # the read path builds each part typed: no cast of a dict stands in for a check
    for function in (inputs.read_run_log, inputs.RunInfo.from_json, inputs.RunSettings.from_json, inputs.data_description):
        assert "cast(" not in inspect.getsource(function), function


def test_report_refuses_another_record_schema_and_reads_an_unversioned_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_restore.record import SCHEMA_VERSION

    path = tmp_path / "records.jsonl"
    path.write_text(render_records_jsonl(fixed_records(questions=2)))
    summary, out = tmp_path / "summary.json", tmp_path / "out"
    summary.write_text(json.dumps({"run": {}, "record_schema": SCHEMA_VERSION + 1}))
    assert main(["report", str(path), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {summary}: records of schema version {SCHEMA_VERSION + 1}; this pytest-restore reads "
        "versions 1, 2 (and files without a version): use the pytest-restore release that wrote them"
    )
    assert not out.exists()
    summary.write_text(json.dumps({"run": {}}))  # written before versions: each record's shape says its version
    with figures_not_rendered():  # its summary is read, not its figure
        assert main(["report", str(path), "--out", str(out)]) == 0
    assert json.loads((out / "summary.json").read_text())["record_schema"] == SCHEMA_VERSION


# -- hostile names (issue 44): a name a user chose is text wherever it is drawn or written ----------

#: A policy name holding what matplotlib reads as mathtext (not valid TeX, so a parsed one fails the
#: draw), a markdown table's bar, emphasis, HTML and code.
HOSTILE_NAME = r"$\x^$ a|b *c* <i>d</i> `e`"


def test_a_policy_name_is_text_in_the_figure_markdown_html_and_csv(tmp_path: Path) -> None:
    """The report of a run whose policy is named as above is written whole (the figure once failed
    on the "$", and no report was left); the name is drawn as written, stays one cell of every
    markdown table, shows as written in report.html and is the CSV's field."""
    source = tmp_path / "run"
    source.mkdir()
    for name in ("records.jsonl", "summary.json"):
        text = (RECORDS_V2 / name).read_text(encoding="utf-8")
        (source / name).write_text(text.replace('"fifo"', json.dumps(HOSTILE_NAME)), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["report", str(source / "records.jsonl"), "--out", str(out)]) == 0
    assert (out / "figure.svg").stat().st_size and (out / "figure.png").stat().st_size

    from pytest_restore.report.figure import draw_figure
    from pytest_restore.report.inputs import read_run_info

    analysis = analyse_records(read_records(out / "records.jsonl"), read_run_info(out / "records.jsonl"))
    texts = {t.get_text() for ax in draw_figure(findings(analysis)).axes for t in ax.texts + ax.get_xticklabels()}
    assert any(HOSTILE_NAME in t for t in texts), texts

    report = (out / "report.md").read_text(encoding="utf-8")
    header = next(line for line in report.splitlines() if line.startswith("| policy | budget | reader | N |"))
    rows = [line for line in report.splitlines() if line.startswith(r"| $\\x^$ a\|b")]
    assert rows
    assert rows[0].replace("\\|", "").count("|") == header.count("|")  # one cell, its bar escaped
    assert "<i>" not in report

    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<td>$\\x^$ a|b *c* &lt;i&gt;d&lt;/i&gt; `e`</td>" in page

    with (out / "cells.csv").open(encoding="utf-8", newline="") as f:
        assert HOSTILE_NAME in {row["policy"] for row in csv.DictReader(f)}


def test_report_out_through_a_link_holds_exactly_this_runs_files_with_the_umasks_permissions(
    tmp_path: Path,
) -> None:
    """``report A --out B``: B, a symbolic link to another run's report directory (with that run's
    calibration.json), is written through (the link stays, nothing is left beside its target: no
    ``.B.PID....old``), holds exactly A's report files afterwards, and the directory's and files'
    permissions both follow the umask (the directory was 0700 while its files were 0644)."""
    import os
    import stat

    old_report = tmp_path / "old"
    old_report.mkdir()
    for name in ("report.md", "calibration.json", "cells.csv"):
        (old_report / name).write_text("another run's\n", encoding="utf-8")
    link = tmp_path / "B"
    link.symlink_to(old_report, target_is_directory=True)
    umask = os.umask(0o027)
    try:
        assert main(["report", str(RECORDS_V2 / "records.jsonl"), "--out", str(link)]) == 0
    finally:
        os.umask(umask)
    assert link.is_symlink() and link.resolve() == old_report.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["B", "old"]  # nothing set aside or staged left
    assert sorted(p.name for p in old_report.iterdir()) == sorted(
        ["cells.csv", "figure.png", "figure.svg", "hypotheses.json", "records.jsonl", "report.html", "report.md",
         "summary.json"]
    )
    assert stat.S_IMODE(old_report.stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in old_report.iterdir()} == {0o640}


def test_report_out_refuses_a_directory_holding_something_else(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report directory is replaced whole, so one that holds no report is refused in one line, untouched."""
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine\n", encoding="utf-8")
    assert main(["report", str(RECORDS_V2 / "records.jsonl"), "--out", str(mine)]) == 74
    err = capsys.readouterr().err.strip()
    assert err == f"error: --out {mine}: {mine} holds files but no report (no summary.json or report.md): a report directory is replaced whole"
    assert [p.name for p in mine.iterdir()] == ["todo.txt"]
