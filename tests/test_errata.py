"""Corrections to a dataset's labels (``--restore-errata``): the LoCoMo audit's layout on a fixture of the project's own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.data.dataset import Dataset, RawData
from pytest_restore.data.errata import (
    UNANSWERABLE,
    Correction,
    ErrataFormat,
    ErrataRegistry,
    apply_errata,
    default_errata_formats,
    load_errata,
    parse_parts,
)
from pytest_restore.data.fields import DataError
from pytest_restore.data.loaders import load_data

#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOCOMO = FIXTURES / "locomo_tiny.json"
ERRATA = FIXTURES / "locomo_tiny_errata.json"


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_data(LOCOMO)


def applied(dataset: Dataset, parts: tuple[str, ...], path: Path = ERRATA) -> tuple[Dataset, dict[str, Any]]:
    data, name, corrections = load_errata(path, dataset)
    fixed, summary = apply_errata(dataset, data, name, corrections, parts)
    return fixed, summary.to_json()


def by_id(dataset: Dataset) -> dict[str, Any]:
    return {q.question_id: q for q in dataset.questions}


def test_corrected_evidence_replaces_the_cited_and_answers_stay(locomo: Dataset) -> None:
    fixed, summary = applied(locomo, ("evidence",))
    before, after = by_id(locomo), by_id(fixed)
    # locomo_0_qa1 (fx-1:q1) cited D1:3 and D2:4; corrected: D1:3 only (session 1, turn index 2)
    assert before["fx-1:q1"].evidence == ((0, 2), (1, 3))
    assert after["fx-1:q1"].evidence == ((0, 2),)
    assert after["fx-1:q1"].answer_session_ids == ("fx-1:session_1",)
    # locomo_1_qa1: a box, two turns; the answer is not replaced unless asked
    assert after["fx-2:q1"].evidence == ((1, 2), (1, 3))
    assert after["fx-2:q1"].answer == "in a cardboard box"
    # the zero-padded citation the loader already read as D2:5: the same gold, nothing replaced
    assert after["fx-1:q5"].evidence == before["fx-1:q5"].evidence
    # an unanswerable correction excludes its question with the reason, and the rest keep their order
    assert "fx-1:q7" not in after and (("fx-1:q7", UNANSWERABLE) in fixed.excluded)
    assert [q.index for q in fixed.questions] == list(range(len(locomo.questions) - 1))
    assert summary["read"] == 6 and summary["parts"] == ["evidence"]
    assert summary["by_type"] == {
        "WRONG_CITATION": {"read": 3, "evidence": 1, "answer": 0, "unanswerable": 0, "not_applied": 1},
        "AMBIGUOUS": {"read": 1, "evidence": 0, "answer": 0, "unanswerable": 1, "not_applied": 0},
        "HALLUCINATION": {"read": 1, "evidence": 1, "answer": 0, "unanswerable": 0, "not_applied": 0},
        "INCOMPLETE": {"read": 1, "evidence": 1, "answer": 0, "unanswerable": 0, "not_applied": 0},
    }


def test_answers_are_a_separate_choice(locomo: Dataset) -> None:
    fixed, summary = applied(locomo, ("answers",))
    after = by_id(fixed)
    assert after["fx-2:q1"].answer == "in a box"
    assert after["fx-2:q1"].evidence == by_id(locomo)["fx-2:q1"].evidence  # evidence untouched
    assert after["fx-1:q0"].answer == "Wednesdays (moved from Thursdays)"
    assert "fx-1:q7" not in after  # unanswerable whichever part is applied
    assert sum(c["answer"] for c in summary["by_type"].values()) == 2
    assert sum(c["evidence"] for c in summary["by_type"].values()) == 0
    both, _ = applied(locomo, ("evidence", "answers"))
    assert by_id(both)["fx-2:q1"].answer == "in a box" and by_id(both)["fx-2:q1"].evidence == ((1, 2), (1, 3))


def test_parts_are_checked() -> None:
    assert parse_parts("answers, evidence") == ("evidence", "answers")
    with pytest.raises(ValueError, match="expected evidence, answers or evidence,answers"):
        parse_parts("evidence,gold")


def entries() -> list[dict[str, Any]]:
    loaded: list[dict[str, Any]] = json.loads(ERRATA.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize(
    ("index", "field", "value", "problem"),
    [
        (1, "question", "Who teaches pottery?", "field 'question': is not the text of fx-1:q1"),
        (1, "question_id", "conv-26_qa1", "field 'question_id': expected locomo_C_qaJ, got 'conv-26_qa1'"),
        (1, "question_id", "locomo_7_qa1", "field 'question_id': conversation 7 is past the dataset's 2"),
        (1, "correct_evidence", ["D1:30"], "field 'correct_evidence': 'D1:30' names no turn of fx-1"),
        (1, "correct_evidence", "D1:3", "field 'correct_evidence': expected a list of strings"),
        (1, "error_type", None, "field 'error_type': expected a non-empty string, got null"),
    ],
)
def test_a_malformed_correction_is_one_line_naming_file_entry_and_field(
    tmp_path: Path, locomo: Dataset, index: int, field: str, value: Any, problem: str
) -> None:
    bad = entries()
    bad[index][field] = value
    path = tmp_path / "errors.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(DataError) as err:
        applied(locomo, ("evidence",), path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: correction ") and f"(index {index})" in message
    assert message.endswith(problem) or problem in message, message


def test_a_second_correction_of_one_question_is_refused(tmp_path: Path, locomo: Dataset) -> None:
    twice = entries() + [entries()[1]]
    path = tmp_path / "errors.json"
    path.write_text(json.dumps(twice), encoding="utf-8")
    with pytest.raises(DataError, match="a second correction of question fx-1:q1"):
        applied(locomo, ("evidence",), path)


class Pairs(ErrataFormat):
    """A user's own layout: {"fix": {QUESTION_ID: [session position, turn index]}}."""

    name = "pairs"
    expects = "an object with 'fix'"

    def fits(self, value: Any) -> bool:
        return isinstance(value, dict) and "fix" in value

    def read(self, data: RawData, dataset: Dataset) -> list[Correction]:
        return [Correction(qid, "MOVED", ((s, t),), None) for qid, (s, t) in data.value["fix"].items()]


def test_a_registered_format_is_picked_by_shape(tmp_path: Path, locomo: Dataset) -> None:
    formats = default_errata_formats()
    formats.register(Pairs())
    assert list(formats) == ["locomo-audit", "pairs"] and isinstance(formats, ErrataRegistry)
    path = tmp_path / "fix.json"
    path.write_text(json.dumps({"fix": {"fx-2:q0": [0, 0]}}), encoding="utf-8")
    data, name, corrections = load_errata(path, locomo, formats)
    fixed, summary = apply_errata(locomo, data, name, corrections, ("evidence",))
    assert name == "pairs" and by_id(fixed)["fx-2:q0"].evidence == ((0, 0),)
    assert summary.to_json()["by_type"] == {"MOVED": {"read": 1, "evidence": 1, "answer": 0, "unanswerable": 0, "not_applied": 0}}
    with pytest.raises(DataError, match="fits no errata format: locomo-audit expects"):
        load_errata(path, locomo)


# --- through the plugin -------------------------------------------------------------------------

GRID = (Path(__file__).resolve().parent.parent / "benches" / "test_grid.py").read_text(encoding="utf-8")
QUICK = ["-p", "no:xdist", "--restore-bootstrap", "200", "--restore-family-checks", "report", "--restore-budgets", "250",
         "--restore-policies", "fifo"]


def run_ids(out: Path) -> set[str]:
    return {json.loads(line)["run_id"] for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()}


def test_errata_on_a_grid_are_counted_in_the_report_and_join_the_run_id(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    plain = pytester.runpytest(*QUICK, f"--restore-data={LOCOMO}", "--restore-report-dir=plain")
    plain.assert_outcomes(passed=1)
    result = pytester.runpytest(*QUICK, f"--restore-data={LOCOMO}", f"--restore-errata={ERRATA}", "--restore-errata-apply=evidence,answers")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        (
            "restore: locomo_tiny_errata.json read as locomo-audit: 6 corrections (3 WRONG_CITATION, 1 AMBIGUOUS, "
            "1 HALLUCINATION, 1 INCOMPLETE); applied (evidence, answers): 3 evidence, 2 answers replaced, "
            "1 questions excluded as unanswerable, 1 to questions left out"
        ),
    ])
    out = pytester.path / "restore-report"
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "| WRONG_CITATION | 3 | 1 | 0 | 0 | 1 |" in report
    assert "| HALLUCINATION | 1 | 1 | 1 | 0 | 0 |" in report
    assert f"| {UNANSWERABLE} | 1 |" in report  # in the exclusions, with its reason
    errata = json.loads((out / "summary.json").read_text(encoding="utf-8"))["run"]["dataset"]["errata"]
    assert errata["read"] == 6 and errata["parts"] == ["evidence", "answers"] and len(errata["sha256"]) == 64
    records = [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["question_id"] for r in records if r["question_id"] == "fx-1:q7"} == set()
    # the run's identity covers the errata file: the same grid without it has another run id
    assert run_ids(out) != run_ids(pytester.path / "plain")
    # the parts must be known, and errata need data to correct
    unknown = pytester.runpytest(*QUICK, f"--restore-data={LOCOMO}", f"--restore-errata={ERRATA}", "--restore-errata-apply=gold")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["ERROR: --restore-errata-apply: 'gold': expected evidence, answers or evidence,answers"])
