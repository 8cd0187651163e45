"""The LoCoMo loader, the dataset loaders' registry, and histories shared by a conversation's questions."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset, RawData, load_dataset
from pytest_restore.data.fields import DataError
from pytest_restore.data.loaders import (
    DatasetLoader,
    DatasetRegistry,
    Locomo,
    default_datasets,
    load_data,
)
from pytest_restore.data.locomo import (
    ADVERSARIAL,
    LOCOMO_BUDGETS,
    NO_EVIDENCE,
    REPAIR_KINDS,
    UNRESOLVED,
    parse_locomo_date,
    resolve_reference,
)
from pytest_restore.data.units import Granularity, build_histories
from pytest_restore.memory.eviction import default_registry
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.records_file import read_records

#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOCOMO = FIXTURES / "locomo_tiny.json"
TINY = FIXTURES / "tiny.json"

Conversations = list[dict[str, Any]]


def conversations() -> Conversations:
    loaded: Conversations = json.loads(LOCOMO.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_data(LOCOMO)


def write(tmp_path: Path, payload: Any) -> Path:
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


# --- the loader on the fixture -----------------------------------------------------


def test_fixture_is_picked_as_locomo_and_read_as_its_users_read_it(locomo: Dataset) -> None:
    assert locomo.name == "locomo"
    assert locomo.budgets == LOCOMO_BUDGETS
    by_id = {q.question_id: q for q in locomo.questions}
    q = by_id["fx-1:q0"]
    assert (q.question_type, q.answer, q.history_id) == ("single-hop (4)", "Wednesdays", "fx-1")
    # the question is dated by the conversation's last session
    assert q.question_date == "8:05 pm on 2 April, 2023"
    # a bare-integer answer becomes text; the speaker is the turn's role
    assert by_id["fx-1:q4"].answer == "24"
    assert q.haystack_sessions[1][0].role == "Ines"
    # every question of a conversation shares the one history (the same objects)
    assert all(p.haystack_sessions is q.haystack_sessions for p in locomo.questions if p.history_id == "fx-1")


def test_image_caption_is_in_the_turn_text(locomo: Dataset) -> None:
    q = locomo.questions[0]
    assert q.haystack_sessions[1][1].content == (
        "Here is the first bowl I made! [shares a photo of a lopsided blue bowl on a wooden table]"
    )


def test_date_without_its_session_is_ignored(locomo: Dataset) -> None:
    # fx-2 dates a session 4 it does not have: three sessions, the last one dates the questions
    q = next(q for q in locomo.questions if q.history_id == "fx-2")
    assert len(q.haystack_sessions) == 3
    assert q.question_date == "6:15 am on 1 July, 2022"


def test_adversarial_and_evidence_less_questions_are_excluded_with_reasons(locomo: Dataset) -> None:
    assert dict(locomo.excluded) == {
        "fx-1:q6": ADVERSARIAL,
        "fx-2:q3": UNRESOLVED,  # its only reference names a missing session
        "fx-2:q4": NO_EVIDENCE,
        "fx-2:q5": ADVERSARIAL,
    }
    assert len(locomo.questions) == 10


def test_every_flawed_reference_is_counted_by_kind(locomo: Dataset) -> None:
    assert dict(locomo.repairs) == {
        REPAIR_KINDS["several"]: 1,
        REPAIR_KINDS["colon"]: 1,
        REPAIR_KINDS["padded"]: 1,
        REPAIR_KINDS["no-id"]: 1,
        REPAIR_KINDS["no-session"]: 1,
        REPAIR_KINDS["no-turn"]: 1,
    }
    by_id = {q.question_id: q for q in locomo.questions}
    assert by_id["fx-1:q3"].evidence == ((1, 1), (1, 2))  # 'D2:2; D2:3' split
    assert by_id["fx-1:q4"].evidence == ((2, 2),)  # 'D:3:3'
    assert by_id["fx-1:q5"].evidence == ((1, 4),)  # 'D2:05'
    assert by_id["fx-1:q7"].evidence == ((2, 4),)  # 'D' dropped beside 'D3:5'
    assert by_id["fx-2:q2"].evidence == ((2, 2),)  # 'D3:40' (past the end) dropped


@pytest.mark.parametrize(
    ("reference", "resolved", "kinds"),
    [
        ("D1:2", [(0, 1)], []),
        ("D1:2; D2:1", [(0, 1), (1, 0)], ["several"]),
        ("D1:2 D2:1", [(0, 1), (1, 0)], ["several"]),
        ("D:1:2", [(0, 1)], ["colon"]),
        ("D1:02", [(0, 1)], ["padded"]),
        (" D1:2", [(0, 1)], ["around"]),
        ("D", [], ["no-id"]),
        ("D1:9", [], ["no-turn"]),
        ("D7:1", [], ["no-session"]),
    ],
)
def test_the_one_rule_for_evidence_references(reference: str, resolved: list[tuple[int, int]], kinds: list[str]) -> None:
    turns = {(1, 1): (0, 0), (1, 2): (0, 1), (2, 1): (1, 0)}
    assert resolve_reference(reference, turns) == (resolved, kinds)


def test_locomo_dates() -> None:
    assert parse_locomo_date("1:56 pm on 8 May, 2023") is not None
    assert parse_locomo_date("12:05 am on 1 January, 2020").hour == 0  # type: ignore[union-attr]
    assert parse_locomo_date("sometime in May") is None
    assert parse_locomo_date("13:00 pm on 8 May, 2023") is None


# --- malformed LoCoMo files: one line naming file, conversation and field -------------------

Mutation = Callable[[Conversations], None]


def _drop_qa(c: Conversations) -> None:
    del c[1]["qa"]


def _drop_session_date(c: Conversations) -> None:
    del c[0]["conversation"]["session_2_date_time"]


def _bad_session_date(c: Conversations) -> None:
    c[0]["conversation"]["session_3_date_time"] = "the day after"


def _bad_category(c: Conversations) -> None:
    c[1]["qa"][1]["category"] = 7


def _missing_answer(c: Conversations) -> None:
    del c[0]["qa"][2]["answer"]


def _duplicate_dia_id(c: Conversations) -> None:
    c[1]["conversation"]["session_2"][3]["dia_id"] = "D2:1"


def _duplicate_sample_id(c: Conversations) -> None:
    c[1]["sample_id"] = "fx-1"


def _turn_without_text(c: Conversations) -> None:
    del c[0]["conversation"]["session_1"][4]["text"]


def _no_sessions(c: Conversations) -> None:
    c[1]["conversation"] = {"speaker_a": "Ruth", "speaker_b": "Sam"}


def _padded_session_key(c: Conversations) -> None:
    conversation = c[0]["conversation"]
    conversation["session_01"] = conversation.pop("session_1")  # was a traceback (KeyError 'session_1')


def _category_as_string(c: Conversations) -> None:
    c[0]["qa"][0]["category"] = "4"


MALFORMED: list[tuple[str, Mutation, str, str, str]] = [
    ("missing-qa", _drop_qa, "'fx-2' (index 1)", "qa", "missing"),
    (
        "session-without-date",
        _drop_session_date,
        "'fx-1' (index 0)",
        "conversation.session_2_date_time",
        "missing (session 2 has no date)",
    ),
    ("unparseable-date", _bad_session_date, "'fx-1' (index 0)", "conversation.session_3_date_time", "not a date: 'the day after'"),
    ("unknown-category", _bad_category, "'fx-2' (index 1)", "qa[1].category", "expected a category 1-5, got '7'"),
    ("missing-answer", _missing_answer, "'fx-1' (index 0)", "qa[2].answer", "missing"),
    ("duplicate-dia-id", _duplicate_dia_id, "'fx-2' (index 1)", "conversation.session_2[3].dia_id", "'D2:1' repeats conversation.session_2[0]"),
    ("duplicate-sample-id", _duplicate_sample_id, "'fx-1' (index 1)", "sample_id", "also used by the conversation at index 0"),
    ("turn-without-text", _turn_without_text, "'fx-1' (index 0)", "conversation.session_1[4].text", "missing"),
    ("no-sessions", _no_sessions, "'fx-2' (index 1)", "conversation", "holds no session_N list"),
    ("padded-session-key", _padded_session_key, "'fx-1' (index 0)", "conversation.session_01",
     "a zero-padded session number: write session_1 (and session_1_date_time)"),
    ("category-as-string", _category_as_string, "'fx-1' (index 0)", "qa[0].category",
     "expected a category 1-5, got the string '4' (a category is a number: 4, not \"4\")"),
]


@pytest.mark.parametrize(("mutate", "where", "field", "problem"), [pytest.param(*c[1:], id=c[0]) for c in MALFORMED])
def test_malformed_locomo(tmp_path: Path, mutate: Mutation, where: str, field: str, problem: str) -> None:
    data = copy.deepcopy(conversations())
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(DataError) as info:
        load_data(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: conversation {where}: field {field!r}: "), message
    assert problem in message


def test_evidence_naming_a_missing_session_is_a_counted_exclusion(tmp_path: Path) -> None:
    data = conversations()
    data[0]["qa"][0]["evidence"] = ["D12:1"]
    loaded = load_data(write(tmp_path, data))
    assert dict(loaded.excluded)["fx-1:q0"] == UNRESOLVED
    assert dict(loaded.repairs)[REPAIR_KINDS["no-session"]] == 2


# --- the registry: picked by shape, forced by name, extended by users -------------------------


def test_registry_has_the_builtins_in_order() -> None:
    assert list(default_datasets()) == ["longmemeval", "locomo"]


def test_longmemeval_is_picked_from_its_shape_and_unchanged() -> None:
    picked = load_data(TINY)
    assert picked.name == "longmemeval"
    assert picked == load_dataset(TINY)


def test_a_file_fitting_no_loader_names_what_each_expected(tmp_path: Path) -> None:
    path = write(tmp_path, [{"prompt": "hello", "completion": "world"}])
    with pytest.raises(DataError) as info:
        load_data(path)
    message = str(info.value)
    assert message.startswith(f"{path}: fits no dataset loader: found a list of objects (the first with keys prompt, completion); ")
    assert "longmemeval expects a JSON list of question records" in message
    assert "locomo expects a JSON list of conversations" in message
    assert "\n" not in message


def test_forcing_a_loader_reads_the_file_with_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"field 'question_id': missing"):
        load_data(LOCOMO, name="longmemeval")
    with pytest.raises(DataError, match=r"no dataset loader named 'nope'; registered: longmemeval, locomo"):
        load_data(LOCOMO, name="nope")


class OneLineQa(DatasetLoader):
    """A user's loader: a JSON object of question -> answer over a one-session history."""

    name = "one-line-qa"
    expects = "a JSON object with 'lines' and 'qa'"
    budgets = (50,)

    def fits(self, value: Any) -> bool:
        return isinstance(value, dict) and "lines" in value

    def load(self, data: RawData) -> Dataset:
        from pytest_restore.data.dataset import Question, Turn

        lines = tuple(Turn("user", text, False) for text in data.value["lines"])
        questions = tuple(
            Question(f"q{i}", "lookup", q, a, "2024/01/02 (Tue) 10:00", ("s",), ("2024/01/01 (Mon) 09:00",),
                     (lines,), ("s",), i, evidence=((0, line),), history_id="h")
            for i, (q, a, line) in enumerate(data.value["qa"])
        )
        return Dataset(data.path, data.sha256, questions, False, name=self.name, budgets=self.budgets)


def test_a_registered_loader_is_picked_after_the_builtins(tmp_path: Path) -> None:
    registry = default_datasets()
    registry.register(OneLineQa())
    path = write(tmp_path, {"lines": ["the key is under the mat", "the car is blue"], "qa": [["Where is the key?", "under the mat", 0]]})
    loaded = load_data(path, registry)
    assert loaded.name == "one-line-qa"
    assert loaded.questions[0].evidence == ((0, 0),)
    with pytest.raises(TypeError):
        registry.register(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Locomo())
    assert isinstance(registry, DatasetRegistry)


def test_prepared_copy_keeps_what_the_loader_said(tmp_path: Path, locomo: Dataset) -> None:
    first = load_data(LOCOMO, cache_dir=tmp_path)
    again = load_data(LOCOMO, cache_dir=tmp_path)
    assert list(tmp_path.glob("dataset-*.marshal"))
    assert again == first == locomo


# --- one history per conversation -------------------------------------------------------------


def test_gold_is_the_evidence_turns_at_both_granularities(locomo: Dataset) -> None:
    turn = build_histories(locomo.questions, Granularity.TURN)
    by_id = {h.question.question_id: h for h in turn}
    h = by_id["fx-1:q1"]
    assert [(h.units[g].session, h.units[g].turn) for g in h.gold] == [(0, 2), (1, 3)]
    assert h.units[h.gold[0]].snippet.startswith("[10:15 am on 3 March, 2023] Ines:\n")
    session = {h.question.question_id: h for h in build_histories(locomo.questions, Granularity.SESSION)}
    assert session["fx-1:q1"].gold == (0, 1)
    # the conversation's questions share its units
    assert by_id["fx-1:q0"].units is by_id["fx-1:q1"].units


def test_a_conversation_is_evicted_once_per_seed_and_shared_by_its_questions(locomo: Dataset) -> None:
    calls: list[str] = []
    registry = default_registry()
    policy = registry["random"]
    original = policy.evict

    def counting(units: Any, sizes: Any, budget: int, ctx: Any) -> Any:
        calls.append(ctx.question_id)
        return original(units, sizes, budget, ctx)

    audit = Audit(locomo, AuditConfig(seeds=(0, 1)), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    object.__setattr__(policy, "evict", counting)
    planned = audit.conditions(policy, 60, audit.questions, {}, {})
    plan, stores = planned.plan, planned.stores
    assert sorted(calls) == ["fx-1", "fx-1", "fx-2", "fx-2"]  # 2 conversations x 2 seeds, not 10 questions x 2
    assert len(plan) == 20
    assert stores[("fx-1:q0", 0)] is stores[("fx-1:q3", 0)]
    assert not np.array_equal(stores[("fx-1:q0", 0)], stores[("fx-1:q0", 1)])


def test_budget_binding_counts_each_history_once(locomo: Dataset) -> None:
    audit = Audit(locomo, AuditConfig(), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    totals = sorted({p.question.history_key: p.history.total_tokens for p in audit.questions}.values())
    assert len(totals) == 2
    between = (totals[0] + totals[1]) // 2
    assert audit.budget_binding([totals[1] + 1, between, totals[0] - 1]) == {
        totals[1] + 1: 0.0,
        between: 0.5,
        totals[0] - 1: 1.0,
    }
    assert audit.exclusion_counts() == {ADVERSARIAL: 2, NO_EVIDENCE: 1, UNRESOLVED: 1}


# --- through the plugin -------------------------------------------------------------------------

GRID = (Path(__file__).resolve().parent.parent / "benches" / "test_grid.py").read_text(encoding="utf-8")
QUICK = ["-p", "no:xdist", "--restore-bootstrap", "200", "--restore-family-checks", "report"]


def test_locomo_grid_names_its_loader_exclusions_repairs_and_budgets(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    # 100k binds for no conversation of the fixture: a warning that names it
    result = pytester.runpytest(*QUICK, f"--restore-data={LOCOMO}", "--restore-budgets", "100k,250,120", "--restore-policies", "fifo,no-evict")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [
            "restore: locomo_tiny.json read as locomo (picked from the file's shape): 10 questions, 4 left out*6 flawed evidence references*",
            "warning: budget 100,000 binds for no history of 2 (each holds fewer tokens): its cells evict nothing",
            "dataset: locomo_tiny.json read as locomo, sha256 *",
        ]
    )
    assert "budget 250 binds" not in result.stdout.str()
    out = pytester.path / "restore-report"
    report = (out / "report.md").read_text(encoding="utf-8")
    for line in (
        "| dataset loader | locomo |",
        "| histories audited (questions sharing one are evicted once) | 2 |",
        f"| {ADVERSARIAL} | 2 |",
        f"| {REPAIR_KINDS['colon']} | 1 |",
        "| 100,000 | 0.00 (binds for none: its cells evict nothing) |",
        "| 250 | 1.00 |",
    ):
        assert line in report, line
    assert "| fake | b | single-hop (4) |" in report  # bins by LoCoMo category
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["run"]["dataset"]["dataset"] == "locomo"
    assert summary["run"]["dataset"]["budget_binding"] == {"100000": 0.0, "250": 1.0, "120": 1.0}
    records = read_records(out / "records.jsonl")
    assert {r.question_id for r in records} == {"fx-1:q0", "fx-1:q1", "fx-1:q2", "fx-1:q3", "fx-1:q4", "fx-1:q5", "fx-1:q7", "fx-2:q0", "fx-2:q1", "fx-2:q2"}


def test_default_budgets_are_the_loaders(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest("-p", "no:xdist", "--collect-only", "-q", f"--restore-data={LOCOMO}")
    ids = [line for line in result.outlines if "test_cell[" in line]
    assert "test_grid.py::test_cell[fifo-16k]" in ids and "test_grid.py::test_cell[fifo-2k]" in ids
    assert len(ids) == 6 * len(LOCOMO_BUDGETS)


USERS_LOADER = '''
import json
from pytest_restore.data.dataset import Dataset, Question, Turn, check_encodable
from pytest_restore.data.loaders import DatasetLoader


class Notes(DatasetLoader):
    """One user's notes file: {"notes": [...], "qa": [[question, answer, note index], ...]}."""

    name = "notes"
    expects = "a JSON object with 'notes' and 'qa'"
    budgets = (60, 30)

    def fits(self, value):
        return isinstance(value, dict) and "notes" in value

    def load(self, data):
        check_encodable(data, None)
        turns = tuple(Turn("user", text, False) for text in data.value["notes"])
        questions = tuple(
            Question(f"n{i}", "lookup", q, a, "2024/03/01 (Fri) 09:00", ("notes",), ("2024/02/01 (Thu) 09:00",),
                     (turns,), ("notes",), i, evidence=((0, note),), history_id="notes")
            for i, (q, a, note) in enumerate(data.value["qa"])
        )
        return Dataset(data.path, data.sha256, questions, False, name=self.name, budgets=self.budgets)


def pytest_restore_register_datasets(registry, config):
    registry.register(Notes())
'''


def test_users_loader_from_a_conftest_runs_the_grid(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(USERS_LOADER)
    pytester.makepyfile(test_grid=GRID)
    notes = ["I parked the car on level three.", "The spare key is in the blue jar.", "Dentist moved to Thursday."]
    notes += [f"Filler note number {i} about nothing in particular at all." for i in range(8)]
    qa = [["Where is the spare key?", "in the blue jar", 1], ["Which level is the car on?", "level three", 0]]
    (pytester.path / "notes.json").write_text(json.dumps({"notes": notes, "qa": qa}), encoding="utf-8")
    result = pytester.runpytest(*QUICK, "--restore-data=notes.json", "--restore-policies", "fifo")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["restore: notes.json read as notes (picked from the file's shape): 2 questions"])
    # the loader's own budgets made the grid
    cells = (pytester.path / "restore-report" / "cells.csv").read_text(encoding="utf-8").splitlines()
    assert sorted({tuple(row.split(",")[:2]) for row in cells[1:]}) == [("fifo", "30"), ("fifo", "60")]
    # report.html has the notes' texts, read by the loader the session used (it said the loader was not registered)
    from pytest_restore.report.html import unpack

    page = (pytester.path / "restore-report" / "report.html").read_text(encoding="utf-8")
    packed = re.search(r'<script type="application/octet-stream" id="data">([^<]*)</script>', page)
    assert packed is not None
    data = unpack(packed.group(1))
    assert data["texts"] == "" and "not registered" not in page
    assert "The spare key is in the blue jar." in json.dumps(data["questions"])
    unknown = pytester.runpytest(*QUICK, "--restore-data=notes.json", "--restore-dataset", "diary")
    assert unknown.ret == pytest.ExitCode.USAGE_ERROR
    unknown.stderr.fnmatch_lines(["ERROR: --restore-dataset: unknown dataset loader 'diary'; registered: longmemeval, locomo, notes"])


def test_a_file_no_loader_fits_stops_the_run_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    (pytester.path / "odd.json").write_text(json.dumps({"rows": []}), encoding="utf-8")
    result = pytester.runpytest(*QUICK, "--restore-data=odd.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "odd.json: fits no dataset loader: found a JSON object; longmemeval expects" in errors[0]
    assert "Traceback" not in result.stderr.str() + result.stdout.str()


# --- hostile loaders and files (issue 32): one line naming the loader, the questions and the field ----------


def test_a_file_fitting_two_loaders_says_which_read_it_and_how_to_pick_the_other(tmp_path: Path) -> None:
    data = conversations()
    data[0]["haystack_sessions"] = []  # LongMemEval's key too: picked by shape as longmemeval, first registered
    path = write(tmp_path, data)
    with pytest.raises(DataError) as info:
        load_data(path)
    assert str(info.value).endswith(
        "field 'question_id': missing (read by the longmemeval loader, picked by the file's shape; "
        "it fits locomo too: --restore-dataset locomo reads it with that one)"
    ), str(info.value)
    assert load_data(path, name="locomo").name == "locomo"


HOSTILE_LOADER = '''
from pytest_restore.data.dataset import Dataset, Question, Turn
from pytest_restore.data.loaders import DatasetLoader


class Diary(DatasetLoader):
    """A user's loader that goes wrong as its file's "mode" says."""

    name = "diary"
    expects = "a JSON object with 'mode'"

    def fits(self, value):
        return isinstance(value, dict) and "mode" in value

    def load(self, data):
        mode = data.value["mode"]
        if mode == "raise":
            return {}["entries"]  # a bug in the user's code: KeyError
        if mode == "none":
            return None  # forgot the return
        one = (Turn("user", "the key is under the mat", False), Turn("user", "the car is blue", False))
        two = (Turn("user", "the key is in the drawer", False),)

        def question(i, history, evidence):
            return Question(f"d{i}", "lookup", "Where is the key?", "under the mat", "2024/03/01 (Fri) 09:00",
                            tuple(f"s{j}" for j in range(len(history))), ("2024/02/01 (Thu) 09:00",) * len(history),
                            history, ("s0",), i, evidence=evidence, history_id="diary")

        if mode == "past":  # evidence in a session the history does not have
            questions = (question(0, (one,), ((3, 0),)),)
        else:  # "shared": one history_id, two histories
            questions = (question(0, (one,), ((0, 0),)), question(1, (two,), ((0, 0),)))
        return Dataset(data.path, data.sha256, questions, False, name=self.name, budgets=(20,))


def pytest_restore_register_datasets(registry, config):
    registry.register(Diary())
'''

HOSTILE = [
    ("raise", "dataset loader 'diary' (conftest.Diary) raised KeyError: 'entries'"),
    ("none", "dataset loader 'diary' (conftest.Diary) returned None, not a Dataset (its load() must return one)"),
    ("past", "dataset loader 'diary' (conftest.Diary): question 'd0': evidence (3, 0) names no turn of its history (1 sessions)"),
    ("shared", ("dataset loader 'diary' (conftest.Diary): questions 'd0' and 'd1' share history_id 'diary' but not "
                "their history (the sessions differ): a history_id names one history")),
]


@pytest.mark.parametrize(("mode", "needle"), HOSTILE, ids=[m for m, _ in HOSTILE])
def test_a_users_loader_that_goes_wrong_stops_the_run_in_one_line_naming_it(
    pytester: pytest.Pytester, mode: str, needle: str
) -> None:
    pytester.makeconftest(HOSTILE_LOADER)
    pytester.makepyfile(test_grid=GRID)
    (pytester.path / "diary.json").write_text(json.dumps({"mode": mode}), encoding="utf-8")
    result = pytester.runpytest_inprocess(*QUICK, "--restore-data=diary.json", "--restore-granularity=session")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines + result.errlines
    errors = [line for line in result.errlines if line.startswith("ERROR:")]
    assert len(errors) == 1 and f"diary.json: {needle}" in errors[0], result.errlines
    text = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in text and "INTERNALERROR" not in text
