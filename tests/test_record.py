"""The per-question record: schema, validation, the N rule, the bins and the tally."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import RECORD_DEFAULTS

from pytest_restore.record import (
    FIELDS,
    REQUIRED_FIELDS,
    CellKey,
    Record,
    RecordError,
    bin_of,
    schema_markdown,
)
from pytest_restore.records_file import V1_MOVED, dumps, from_v1, migrate_v1, read_records
from pytest_restore.stats.tally import tally, tally_cells


def rec(qid: str = "q1", **kw: Any) -> dict[str, Any]:
    """A saved record (version 2) with the required fields; ``kw`` overrides, named as in version 1."""
    return migrate_v1(flat(qid, **kw))


def flat(qid: str = "q1", **kw: Any) -> dict[str, Any]:
    """A saved record of version 1 (one flat object) with the required fields; ``kw`` overrides."""
    return {**RECORD_DEFAULTS, "question_id": qid, "budget": 8000, **kw}


def test_fields_table_is_the_dataclasses() -> None:
    top = [path for path, _c, _w in FIELDS if "." not in path]
    assert top == list(Record.__dataclass_fields__)
    assert REQUIRED_FIELDS[0] == "question_id" and "excluded" in REQUIRED_FIELDS
    for condition in ("oracle", "policy", "restored"):
        assert f"conditions.{condition}.correct" in REQUIRED_FIELDS
        assert f"conditions.{condition}.answer" not in REQUIRED_FIELDS
    assert "ablations" not in REQUIRED_FIELDS and "ablations.excluded" in REQUIRED_FIELDS
    # every version-1 field that moved has a place in version 2
    assert set(V1_MOVED.values()) <= {path for path, _c, _w in FIELDS}


def test_json_round_trip_and_attribute_reads() -> None:
    data = rec(
        gold_evicted_units=[3, 4],
        policy_answer="Paris",
        policy_injected_tokens=12,
        ablation_excluded={"placebo": "not constructible: x"},
        ablation_store_correct=True,
    )
    record = Record.from_json(data)
    assert record.gold_evicted_units == (3, 4) and record.policy == "fifo" and record.ranker is None
    assert record.conditions.policy.answer == "Paris" and record.conditions.policy.injected_tokens == 12
    assert record.conditions.oracle.correct is True and record.conditions.oracle.injected_tokens is None
    assert record.ablations is not None and record.ablations.verdict("store") is True
    assert record.ablations.excluded == {"placebo": "not constructible: x"}
    again = Record.from_json(record.to_json())
    assert again == record
    line = json.loads(dumps([record]))
    assert line["gold_evicted_units"] == [3, 4] and line["conditions"]["policy"]["answer"] == "Paris"
    assert line["ablations"]["store_correct"] is True
    assert Record.from_json(rec()).ablations is None


def test_version_1_is_migrated_field_by_field() -> None:
    old = flat(
        policy_answer="Paris",
        restored_prompt="abc",
        restored_injected_units=3,
        ablation_excluded={},
        ablation_placebo_units=[1, 2],
    )
    record = from_v1(old)
    assert record == Record.from_json(migrate_v1(old))
    assert record.conditions.policy.answer == "Paris" and record.conditions.restored.prompt == "abc"
    assert record.conditions.restored.injected_units == 3
    assert record.ablations is not None and record.ablations.placebo_units == (1, 2)
    assert from_v1(flat()).ablations is None  # ablation_excluded null: the ablations did not run
    # a version-1 error names the version-1 field
    with pytest.raises(RecordError, match="^question 'q1': field 'policy_correct': missing$"):
        from_v1({k: v for k, v in flat().items() if k != "policy_correct"})
    with pytest.raises(RecordError, match="field 'restored_answer': must be a string or null, got 3"):
        from_v1(flat(restored_answer=3))
    with pytest.raises(RecordError, match="field 'ablation_excluded': missing"):
        from_v1(flat(ablation_store_correct=True))  # an ablation's verdict where the ablations did not run


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"budget": "8k"}, "field 'budget': must be an integer, got \"8k\""),
        ({"regime": "c"}, "field 'regime': must be 'a' or 'b'"),
        ({"bin": "lost"}, "field 'bin': must be 'irreversible'"),
        ({"colour": "red"}, "field 'colour': not a record field"),
        ({"policy_correct": None}, "field 'conditions.policy.correct': null on an oracle-answerable"),
        ({"oracle_answer": 7}, "field 'conditions.oracle.answer': must be a string or null, got 7"),
        ({"bin": "residual"}, "field 'bin': 'residual' on a record that is not"),
        ({"oracle_correct": False, "policy_correct": False, "bin": "residual"}, "field 'bin'"),
    ],
)
def test_from_json_names_question_and_field(change: dict[str, Any], expected: str) -> None:
    with pytest.raises(RecordError) as err:
        Record.from_json(rec("q7", **change))
    assert str(err.value).startswith("question 'q7': ") and expected in str(err.value)


def test_missing_required_field_and_optional_fields_default_to_null() -> None:
    data = rec()
    del data["gold_evicted"]
    with pytest.raises(RecordError, match="field 'gold_evicted': missing"):
        Record.from_json(data)
    data = rec()
    del data["conditions"]["restored"]["correct"]
    with pytest.raises(RecordError, match="field 'conditions.restored.correct': missing"):
        Record.from_json(data)
    with pytest.raises(RecordError, match="field 'conditions': must be an object, got null"):
        Record.from_json({**rec(), "conditions": None})
    with pytest.raises(RecordError, match="field 'ablations': must be an object or null, got 3"):
        Record.from_json({**rec(), "ablations": 3})
    assert Record.from_json(rec()).ranker is None


def test_read_records_names_file_line_question_and_field(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(rec("q1")) + "\n\n" + json.dumps(rec("q2", seed=-0.5)) + "\n")
    with pytest.raises(RecordError) as err:
        read_records(path)
    message = str(err.value)
    assert message == f"{path}: line 3: question 'q2': field 'seed': must be an integer, got -0.5"
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(RecordError, match="line 1: not JSON"):
        read_records(path)


@pytest.mark.parametrize(
    ("oracle", "policy", "restored", "evicted", "expected"),
    [
        (True, True, True, 1, None),
        (False, False, True, 1, None),
        (None, False, True, 1, None),
        (True, False, True, 1, "irreversible"),
        (True, False, True, 0, "recoverable"),
        (True, False, False, 1, "residual"),
        (True, False, None, 0, "residual"),
    ],
)
def test_bin_rule(
    oracle: bool | None, policy: bool | None, restored: bool | None, evicted: int, expected: str | None
) -> None:
    assert (
        bin_of(oracle_correct=oracle, policy_correct=policy, restored_correct=restored, gold_evicted=evicted)
        == expected
    )


def test_tally_figures() -> None:
    records = [
        rec("q1"),
        rec("q2", policy_correct=False, bin="irreversible", gold_evicted=2),
        rec("q3", policy_correct=False, bin="recoverable"),
        rec("q4", policy_correct=False, bin="residual", gold_evicted=1),
        rec("q5", negative_restore_gain=True),
        rec("q6", oracle_correct=False, policy_correct=False),
        rec("q7", excluded="api_error: policy reader", policy_correct=None),
    ]
    records = [Record.from_json(r) for r in records]
    fig = tally(records)
    assert (fig.N, fig.err, fig.irr, fig.rec, fig.res, fig.correct) == (5, 3, 1, 1, 1, 2)
    assert (fig.excluded, fig.not_answerable, fig.records) == (1, 1, 7)
    assert fig.exclusions == {"api_error: policy reader": 1}
    assert (fig.gold_evicted, fig.negative_restore_gain) == (2, 1)
    assert fig.two_bin_share == 0.5
    assert fig.irr_rate == pytest.approx(0.2) and fig.accuracy == pytest.approx(0.4)
    assert fig.gold_evicted_rate == pytest.approx(0.4)
    assert fig.share("residual") == pytest.approx(1 / 3)
    empty = tally([])
    assert empty.two_bin_share is None and empty.accuracy is None and empty.share("residual") is None
    assert np.isclose(tally(records[:2]).two_bin_share or 0, 1.0)


def test_tally_cells_share_one_universe_and_pool_seeds() -> None:
    records = [
        Record.from_json(rec("q1", policy="random", seed=0)),
        Record.from_json(rec("q1", policy="random", seed=1, policy_correct=False, bin="residual")),
        Record.from_json(rec("q2", policy="fifo")),
    ]
    cells = tally_cells(records, ["q1", "q2", "q3"])
    random = cells[CellKey("random", 8000, "b", "fake")]
    assert random.question_ids == ("q1", "q2", "q3")
    assert random.counts[:, 0].tolist() == [2, 1, 0, 0, 1, 1, 0, 0]  # N, err, irr, rec, res, correct, gold, dis
    assert random.seeds == {0, 1} and random.N == 2
    assert cells[CellKey("fifo", 8000, "b", "fake")].counts[0].tolist() == [0, 1, 0]


def _write(path: Path, *records: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize(
    ("second", "expected"),
    [
        (rec("q2", run_id="bbb", granularity="turn"), "field 'run_id': 'bbb' differs from line 1's 'aaa' (records of two runs)"),
        (rec("q2", run_id="aaa", granularity="session"), "field 'granularity': 'session' differs from line 1's 'turn' (mixed granularity)"),
        (rec("q1", run_id="aaa", granularity="turn"), "repeats the record of line 1 (question_id='q1', policy='fifo', budget=8000"),
    ],
)
def test_read_records_refuses_a_second_run_repeated_keys_and_mixed_granularity(
    tmp_path: Path, second: dict[str, Any], expected: str
) -> None:
    first = rec("q1", run_id="aaa", granularity="turn")
    path = _write(tmp_path / "records.jsonl", first, rec("q3", run_id="aaa", granularity="turn"), second)
    with pytest.raises(RecordError) as err:
        read_records(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: line 3: question '{second['question_id']}': ")
    assert expected in message


def test_records_of_one_run_read_back(tmp_path: Path) -> None:
    records = [rec(q, run_id="aaa", granularity="turn") for q in ("q1", "q2")]
    records.append(rec("q1", run_id="aaa", granularity="turn", seed=1))  # another key
    assert [r.seed for r in read_records(_write(tmp_path / "r.jsonl", *records))] == [0, 0, 1]


def test_design_doc_shows_the_schema_of_record_py() -> None:
    design = (Path(__file__).resolve().parent.parent / "docs" / "DESIGN.md").read_text(encoding="utf-8")
    assert schema_markdown() in design, "docs/DESIGN.md: regenerate the table with record.schema_markdown()"
