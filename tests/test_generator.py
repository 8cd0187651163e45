"""The synthetic LongMemEval-S generator: layout, mix, sizes, determinism, CLI."""

from __future__ import annotations

import datetime as dt
import importlib.util
import itertools
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_restore.__main__ import main
from pytest_restore.data.tokens import count_tokens
from pytest_restore.synthetic.generator import (
    ABSTENTION_MIX_500,
    QUESTION_TYPES,
    TYPE_MIX_500,
    GeneratorSettings,
    abstention_mix,
    generate,
    history_tokens,
    type_mix,
    write_dataset,
)

Record = dict[str, Any]
SMALL_TOKENS = 20_000
DATE = re.compile(r"^\d{4}/\d{2}/\d{2} \((Mon|Tue|Wed|Thu|Fri|Sat|Sun)\) \d{2}:\d{2}$")
FIELDS = {
    "question_id": str,
    "question_type": str,
    "question": str,
    "answer": str,
    "question_date": str,
    "haystack_session_ids": list,
    "haystack_dates": list,
    "haystack_sessions": list,
    "answer_session_ids": list,
}


@pytest.fixture(scope="module")
def small() -> list[Record]:
    return generate(24, seed=7, tokens_per_history=SMALL_TOKENS)


@pytest.fixture(scope="module")
def full_size() -> list[Record]:
    return generate(12, seed=11)


def _parse(date: str) -> dt.datetime:
    return dt.datetime.strptime(date[:10] + date[-6:], "%Y/%m/%d %H:%M")


def _gold_turns(record: Record) -> list[tuple[int, dict[str, Any]]]:
    """(session position, turn) of every has_answer turn of an answer session."""
    answer_ids = set(record["answer_session_ids"])
    return [
        (pos, turn)
        for pos, (sid, session) in enumerate(zip(record["haystack_session_ids"], record["haystack_sessions"]))
        if sid in answer_ids
        for turn in session
        if turn.get("has_answer")
    ]


def test_layout_matches_longmemeval_s(small: list[Record]) -> None:
    assert len(small) == 24
    ids: Counter[str] = Counter()
    questions: Counter[str] = Counter()
    for rec in small:
        assert set(rec) == set(FIELDS)
        for name, kind in FIELDS.items():
            assert isinstance(rec[name], kind), name
        ids[rec["question_id"]] += 1
        questions[rec["question"]] += 1
        assert rec["question_type"] in QUESTION_TYPES
        n = len(rec["haystack_session_ids"])
        assert n == len(rec["haystack_dates"]) == len(rec["haystack_sessions"])
        assert len(set(rec["haystack_session_ids"])) == n
        assert set(rec["answer_session_ids"]) <= set(rec["haystack_session_ids"])
        assert rec["answer_session_ids"]
        assert all(sid.startswith("answer_") for sid in rec["answer_session_ids"])
        for sid, session in zip(rec["haystack_session_ids"], rec["haystack_sessions"]):
            assert session, sid
            assert sid.startswith(("answer_", "sharegpt_", "ultrachat_")), sid
            for turn in session:
                assert turn["role"] in ("user", "assistant")
                assert isinstance(turn["content"], str) and turn["content"]
                if sid in rec["answer_session_ids"]:
                    assert isinstance(turn["has_answer"], bool)
                else:
                    assert "has_answer" not in turn
        for sid, session in zip(rec["haystack_session_ids"], rec["haystack_sessions"]):
            if sid in rec["answer_session_ids"]:
                assert any(t["has_answer"] for t in session), sid
        dates = [_parse(d) for d in rec["haystack_dates"]]
        assert all(DATE.match(d) for d in rec["haystack_dates"] + [rec["question_date"]])
        assert dates == sorted(dates)
        assert _parse(rec["question_date"]) > dates[-1]
    assert max(ids.values()) == 1
    assert max(questions.values()) == 1


def test_deterministic_in_the_seed(tmp_path: Path) -> None:
    first = generate(12, seed=3, tokens_per_history=SMALL_TOKENS)
    again = generate(12, seed=3, tokens_per_history=SMALL_TOKENS)
    other = generate(12, seed=4, tokens_per_history=SMALL_TOKENS)
    sha_a = write_dataset(first, tmp_path / "a.json")
    sha_b = write_dataset(again, tmp_path / "b.json")
    sha_c = write_dataset(other, tmp_path / "c.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert sha_a == sha_b != sha_c


def test_type_mix_of_500_is_the_benchmark_mix() -> None:
    assert type_mix(500) == TYPE_MIX_500
    abstention = abstention_mix(500)
    assert {k: v for k, v in abstention.items() if v} == ABSTENTION_MIX_500
    assert sum(abstention.values()) == 30


@pytest.mark.parametrize("n", [0, 1, 5, 6, 11, 12, 13, 24, 50, 99, 100, 250, 333, 499, 500])
def test_type_mix_scales(n: int) -> None:
    types, abstention = type_mix(n), abstention_mix(n)
    assert sum(types.values()) == n
    assert all(abstention[t] < max(types[t], 1) for t in QUESTION_TYPES)
    if n >= 12:
        assert all(types[t] >= 1 for t in QUESTION_TYPES)


def test_every_type_present_from_12_questions() -> None:
    for n in range(12, 501):
        types = type_mix(n)
        assert sum(types.values()) == n
        assert min(types.values()) >= 1, n


def test_generated_mix_follows_type_mix(small: list[Record]) -> None:
    got = Counter(r["question_type"] for r in small)
    assert got == Counter({k: v for k, v in type_mix(24).items() if v})
    abstained = Counter(r["question_type"] for r in small if r["question_id"].endswith("_abs"))
    assert abstained == Counter({k: v for k, v in abstention_mix(24).items() if v})


def test_history_size_at_default(full_size: list[Record]) -> None:
    sizes = [history_tokens(r) for r in full_size]
    mean = sum(sizes) / len(sizes)
    assert 95_000 <= mean <= 110_000
    # session sizes are log-normal (``session_size_spread``): the count per history varies around 50
    assert all(30 <= len(r["haystack_sessions"]) <= 70 for r in full_size)


def test_history_size_follows_target(small: list[Record]) -> None:
    sizes = [history_tokens(r) for r in small]
    assert 0.9 * SMALL_TOKENS <= sum(sizes) / len(sizes) <= 1.1 * SMALL_TOKENS


def test_evidence_turns_fit_their_bounds_and_hold_the_answer(small: list[Record]) -> None:
    _lo, hi = GeneratorSettings().gold_tokens
    for rec in small:
        gold = _gold_turns(rec)
        sizes = count_tokens([t["content"] for _, t in gold])
        assert sum(sizes) <= 2400  # at most four evidence turns
        for (_, turn), size in zip(gold, sizes):
            assert size <= hi, turn["content"]
        qtype, answer = rec["question_type"], rec["answer"]
        if rec["question_id"].endswith("_abs"):
            assert "not mention" in answer
            continue
        roles = {t["role"] for _, t in gold}
        assert roles == ({"assistant"} if qtype == "single-session-assistant" else {"user"})
        if qtype in ("single-session-user", "single-session-assistant", "knowledge-update"):
            assert answer in gold[-1][1]["content"]
        if qtype.startswith("single-session"):
            assert len(gold) == 1


def test_multi_session_gold_spans_two_to_four_sessions(small: list[Record]) -> None:
    multi = [r for r in small if r["question_type"] == "multi-session"]
    assert multi
    for rec in multi:
        gold = _gold_turns(rec)
        assert 2 <= len(gold) <= 4
        assert len({pos for pos, _ in gold}) == len(gold)


def test_knowledge_update_carries_a_superseded_fact(small: list[Record]) -> None:
    updates = [r for r in small if r["question_type"] == "knowledge-update"]
    assert updates
    for rec in updates:
        gold = _gold_turns(rec)
        assert len(gold) == 2 and gold[0][0] < gold[1][0]
        if not rec["question_id"].endswith("_abs"):
            assert rec["answer"] in gold[1][1]["content"]
            assert rec["answer"] not in gold[0][1]["content"]


def test_temporal_answers_follow_the_dates(small: list[Record]) -> None:
    for rec in small:
        if rec["question_type"] != "temporal-reasoning" or rec["question_id"].endswith("_abs"):
            continue
        gold = _gold_turns(rec)
        days = [_parse(rec["haystack_dates"][pos]).date() for pos, _ in gold]
        if rec["question"].startswith("How many days passed"):
            assert rec["answer"] == f"{(days[1] - days[0]).days} days"
        elif rec["question"].startswith("How many days ago"):
            asked = _parse(rec["question_date"]).date()
            assert rec["answer"] == f"{(asked - days[0]).days} days ago"


def test_filler_pool_is_shared_and_consistent(small: list[Record]) -> None:
    seen: dict[str, list[Any]] = {}
    shared = 0
    for rec in small:
        for sid, session in zip(rec["haystack_session_ids"], rec["haystack_sessions"]):
            if sid in seen:
                assert seen[sid] == session, sid
                shared += 1
            seen[sid] = session
    assert shared > 0
    histories = {tuple(sorted(r["haystack_session_ids"])) for r in small}
    assert len(histories) == len(small)


def test_distractor_knob(small: list[Record]) -> None:
    none = generate(6, seed=7, tokens_per_history=SMALL_TOKENS, distractors=(0, 0))
    many = generate(6, seed=7, tokens_per_history=SMALL_TOKENS, distractors=(10, 10))

    def overlap(records: list[Record]) -> int:
        """User turns outside answer sessions that share a content word with the question."""
        total = 0
        for rec in records:
            q = {w for w in re.findall(r"[a-z]{5,}", rec["question"].lower())}
            for sid, session in zip(rec["haystack_session_ids"], rec["haystack_sessions"]):
                if sid in rec["answer_session_ids"]:
                    continue
                total += sum(
                    1 for t in session
                    if t["role"] == "user" and q & set(re.findall(r"[a-z]{5,}", t["content"].lower()))
                )
        return total

    assert overlap(many) > overlap(none) + 30


@pytest.mark.skipif(importlib.util.find_spec("pytest_restore.data.dataset") is None, reason="no data.py")
def test_loads_with_the_dataset_loader(small: list[Record], tmp_path: Path) -> None:
    from pytest_restore.data.dataset import load_dataset

    write_dataset(small, tmp_path / "s.json")
    dataset = load_dataset(tmp_path / "s.json")
    assert len(dataset.questions) == len(small)
    assert sum(q.is_abstention for q in dataset.questions) == sum(abstention_mix(24).values())


def test_cli_writes_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "synthetic.json"
    argv = ["generate", "--questions", "12", "--seed", "5", "--out", str(out),
            "--tokens-per-history", str(SMALL_TOKENS)]
    assert main(argv) == 0
    records = json.loads(out.read_text(encoding="utf-8"))
    assert len(records) == 12
    write_dataset(generate(12, seed=5, tokens_per_history=SMALL_TOKENS), tmp_path / "api.json")
    assert out.read_bytes() == (tmp_path / "api.json").read_bytes()
    captured = capsys.readouterr()
    assert "12 questions" in captured.out and "sha256" in captured.out
    assert "12/12" in captured.err


def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:  # argparse's usage error, before any work
        main(["generate", "--questions", "-1", "--seed", "0", "--out", str(tmp_path / "x")])
    assert stopped.value.code == 2
    with pytest.raises(SystemExit):
        main([])


def _histories(records: list[Record], tmp_path: Path) -> list[Any]:
    from pytest_restore.data.dataset import load_dataset
    from pytest_restore.data.units import build_history

    write_dataset(records, tmp_path / "s.json")
    return [build_history(q) for q in load_dataset(tmp_path / "s.json").questions if not q.is_abstention]


def test_filler_is_lexically_diverse_and_gold_is_not_unique(full_size: list[Record], tmp_path: Path) -> None:
    """Unrelated turns share few words; the evidence's best similarity sits mid-distribution.

    ``redundancy`` evicts by each unit's best content-word similarity to
    another unit: with template filler every unit was near-duplicate (median
    best ~0.7) and the evidence always the most unique, so it was never evicted.
    """
    import numpy as np

    from pytest_restore.memory.eviction import similarity_matrix

    medians, gold_ranks = [], []
    for history in _histories(full_size, tmp_path):
        best = similarity_matrix(history.units).max(axis=1)
        medians.append(float(np.median(best)))
        gold_ranks += [float((best < best[g]).mean()) for g in history.gold]
    assert float(np.median(medians)) < 0.5
    low, mid, high = np.percentile(gold_ranks, [10, 50, 90])
    # spread across the middle (a quarter of questions keep their evidence recent, which
    # does not change its similarity rank but shifts which sample histories we see)
    assert low < 0.3 and 0.15 < mid < 0.7 and high > 0.5


def test_evidence_restatement_never_gives_the_answer(small: list[Record]) -> None:
    """The turn after an evidence turn restates part of it, never the answer."""
    restated = 0
    for rec in small:
        if rec["question_id"].endswith("_abs") or rec["question_type"] == "temporal-reasoning":
            continue
        for sid, session in zip(rec["haystack_session_ids"], rec["haystack_sessions"]):
            if sid not in rec["answer_session_ids"]:
                continue
            for before, after in itertools.pairwise(session):
                if before["has_answer"]:
                    assert rec["answer"] not in after["content"], rec["question_id"]
                    assert not re.search(r"\d", after["content"].split("\n\n")[0])
                    gold_words = set(re.findall(r"[A-Z][a-z]{3,}", before["content"]))
                    restated += bool(gold_words & set(re.findall(r"[A-Z][a-z]{3,}", after["content"])))
    assert restated > 0


def test_some_questions_keep_their_evidence_recent() -> None:
    """``recent_evidence`` puts a share of questions' evidence in the last part of the history."""

    def recent_share(records: list[Record]) -> float:
        hits = 0
        for rec in records:
            n = len(rec["haystack_session_ids"])
            first = min(rec["haystack_session_ids"].index(a) for a in rec["answer_session_ids"])
            hits += first >= int(n * 0.85)
        return hits / len(records)

    # 80 questions: 0.34 against 0.11 (160: 0.28 against 0.08, for twice the CPU)
    with_recent = recent_share(generate(80, 5, tokens_per_history=6000))
    without = recent_share(generate(80, 5, tokens_per_history=6000, recent_evidence=0.0))
    assert with_recent - without >= 0.1


# --- data statistics: the evidence is ordinary within its history, the filler is chat-like ---

_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|my|me|we|our)\b", re.IGNORECASE)


def _percentiles(records: list[Record]) -> tuple[list[float], list[float]]:
    """Each evidence turn's fact-density and length percentile among the turns of its history."""
    import numpy as np

    from pytest_restore.memory.eviction import fact_density

    density, length = [], []
    for rec in records:
        turns = [t for session in rec["haystack_sessions"] for t in session]
        texts = [t["content"] for t in turns]
        d = np.array([fact_density(x) for x in texts])
        n = np.array(count_tokens(texts))
        for i, turn in enumerate(turns):
            if turn.get("has_answer"):
                density.append(float((d < d[i]).mean()))
                length.append(float((n < n[i]).mean()))
    return density, length


def test_evidence_length_is_ordinary_within_its_history(full_size: list[Record]) -> None:
    """Evidence turns spread over the long half of their history's lengths, as real evidence does.

    LoCoMo's evidence turns sit at the 30th/74th/96th length percentiles of their
    conversation (10th/50th/90th of them): mostly longer than most, some short.
    """
    import numpy as np

    _density, length = _percentiles(full_size)
    low, mid, high = np.percentile(length, [10, 50, 90])
    assert low < 0.55 and 0.5 < mid < 0.85 and high > 0.85


def test_evidence_fact_density_is_not_extreme(full_size: list[Record]) -> None:
    """Evidence is denser in facts than most turns, as in real logs, but not always at the top."""
    import numpy as np

    density, _length = _percentiles(full_size)
    low, mid = np.percentile(density, [10, 50])
    assert low < 0.85 and mid < 0.97
    assert float(np.mean([d < 0.9 for d in density])) > 0.2


def test_world_statistics_fall_in_real_ranges(tmp_path: Path) -> None:
    """The two statistics that decided policies' outcomes sit where real text has them.

    ``memory/profile.py`` measures them; LoCoMo's ranges over its ten
    conversations (``benches/bench_world.py --locomo``): the gold's fact-density
    percentile 0.50-0.71, the next turn as the gold's most similar unit 0.04-0.15,
    first-person non-gold turns 0.51-0.60, the gold's best similarity at the
    25th-38th percentile. Before ``gold_long_share``, ``echo_share`` and
    ``mention_share``, the gold sat at the 85th density percentile and the next
    turn (an echo) was its most similar unit for about half of the gold turns.
    """
    from pytest_restore.memory.profile import profile

    world = profile(_histories(generate(30, seed=3), tmp_path))
    assert world.gold_turns >= 40
    assert 0.45 <= world.gold_density_percentile <= 0.75
    assert world.next_turn_most_similar <= 0.2
    assert 0.15 <= world.gold_similarity_percentile <= 0.6
    assert 0.45 <= world.first_person_rate <= 0.65


def test_echo_share_is_the_knob_of_the_restating_turn(tmp_path: Path) -> None:
    """Every evidence turn echoed (the old generator) makes the next turn the gold's most similar unit far more often."""
    from pytest_restore.memory.profile import profile

    echoed = generate(12, seed=5, tokens_per_history=SMALL_TOKENS, echo_share=1.0, echo_strength=(0.6, 0.9))
    quiet = generate(12, seed=5, tokens_per_history=SMALL_TOKENS, echo_share=0.0)
    (tmp_path / "e").mkdir()
    (tmp_path / "q").mkdir()
    loud = profile(_histories(echoed, tmp_path / "e")).next_turn_most_similar
    still = profile(_histories(quiet, tmp_path / "q")).next_turn_most_similar
    assert loud > 0.4 and still < 0.15, (loud, still)


def _filler_turns(records: list[Record], role: str) -> list[str]:
    return [t["content"] for rec in records for session in rec["haystack_sessions"] for t in session
            if "has_answer" not in t and t["role"] == role]


def test_filler_rates_follow_their_knobs(small: list[Record]) -> None:
    """Numbers, names and first-person statements in filler at the documented rates."""
    s = GeneratorSettings()
    assistant = _filler_turns(small, "assistant")
    user = _filler_turns(small, "user")
    digit = sum(bool(re.search(r"\d", t)) for t in assistant) / len(assistant)
    first_person = sum(bool(_FIRST_PERSON.search(t)) for t in user) / len(user)
    # a distractor answer or a long user turn adds a little; the rates are per-turn chances
    assert abs(digit - s.filler_digit_rate) < 0.1
    assert s.user_first_person_rate - 0.1 < first_person < s.user_first_person_rate + 0.25
    bare = generate(6, seed=7, tokens_per_history=SMALL_TOKENS, filler_digit_rate=0.0, user_first_person_rate=0.0,
                    filler_name_rate=0.0, filler_date_rate=0.0, long_user_share=0.0)
    assert not any(re.search(r"\d", t) for t in _filler_turns(bare, "assistant"))
    plain_user = _filler_turns(bare, "user")
    assert sum(bool(_FIRST_PERSON.search(t)) for t in plain_user) / len(plain_user) < first_person - 0.2


def test_readme_evict_longest_example_loses_gold_at_80k(full_size: list[Record], tmp_path: Path) -> None:
    """The README's custom policy is not blind to evidence: long evidence turns exist."""
    from pytest_restore.memory.eviction import EvictionContext, VictimPolicy

    class EvictLongest(VictimPolicy):  # as in the README
        name = "evict-longest"

        def choose_victim(self, stored: Any, units: Any) -> int:
            return int(max(stored, key=lambda p: (units[p].tokens, -p)))

    histories = _histories(full_size, tmp_path)
    lost = sum(
        any(not kept[g] for g in h.gold)
        for h in histories
        for kept in [EvictLongest().retain(h.units, h.sizes, 80_000, EvictionContext(h.question.question_id))]
    )
    assert 0 < lost < len(histories)
