"""Tests for memory units, rendering and gold (pytest_restore.data.units)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pytest_restore.data.dataset import Dataset, Question, Turn, load_dataset
from pytest_restore.data.tokens import count_tokens
from pytest_restore.data.units import Granularity, build_history, render_session, turn_header

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


def make_question(
    sessions: list[list[tuple[str, str, bool]]],
    answer_sessions: tuple[int, ...],
    *,
    qid: str = "q1",
    dates: list[str] | None = None,
) -> Question:
    ids = tuple(
        f"answer_{qid}_{i}" if i in answer_sessions else f"sess_{i}" for i in range(len(sessions))
    )
    return Question(
        question_id=qid,
        question_type="single-session-user",
        question="What did I buy?",
        answer="a bike",
        question_date="2023/06/01 (Thu) 10:00",
        haystack_session_ids=ids,
        haystack_dates=tuple(
            dates or [f"2023/05/{10 + i:02d} (Mon) 09:00" for i in range(len(sessions))]
        ),
        haystack_sessions=tuple(tuple(Turn(r, c, h) for r, c, h in s) for s in sessions),
        answer_session_ids=tuple(ids[i] for i in answer_sessions),
        index=0,
    )


def test_turn_units_order_and_rendering(tiny: Dataset) -> None:
    for q in tiny.questions:
        h = build_history(q)
        expected = [
            (s, t, q.haystack_dates[s], turn.role, turn.content)
            for s, session in enumerate(q.haystack_sessions)
            for t, turn in enumerate(session)
        ]
        assert [(u.session, u.turn, u.date, u.role, u.content) for u in h.units] == expected
        assert [u.position for u in h.units] == list(range(len(h.units)))
        for u in h.units:
            assert u.snippet == turn_header(u.date, u.role) + u.content
            assert u.snippet.startswith(f"[{u.date}] {u.role}:\n")
        assert h.granularity is Granularity.TURN


def test_turn_sizes_exact_for_every_fixture_unit(tiny: Dataset) -> None:
    for q in tiny.questions:
        h = build_history(q)
        whole = count_tokens([u.snippet for u in h.units])
        assert [u.tokens for u in h.units] == whole
        assert h.sizes.tolist() == whole
        assert h.total_tokens == sum(whole)
        assert h.gold_tokens == sum(whole[g] for g in h.gold)


EDGE_CONTENTS = [
    "/etc/hosts holds it",
    "//comment",
    "\nstarts with a newline",
    "\n\n\nthree newlines",
    "\r\nwindows newline",
    "\rcarriage",
    " \nspace then newline",
    "   leading spaces",
    "'s a contraction start",
    ":colon start",
    "!!! punctuation",
    "123 numbers first",
    "",
    "\tTab start",
    "Ünïcode start",
    "😀 emoji",
    "/\n/\n",
]


@pytest.mark.parametrize("role", ["user", "assistant"])
def test_turn_sizes_exact_for_edge_contents(role: str) -> None:
    sessions = [[(role, c, False) for c in EDGE_CONTENTS], [("user", "I bought a bike", True)]]
    q = make_question(sessions, (1,), dates=["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 11:59"])
    h = build_history(q)
    assert [u.tokens for u in h.units] == count_tokens([u.snippet for u in h.units])
    # the trick's exceptions really do merge across the header boundary
    header = turn_header("2023/05/20 (Sat) 02:21", role)
    merged = [
        c for c in EDGE_CONTENTS if count_tokens([header + c])[0] != sum(count_tokens([header, c]))
    ]
    assert merged and all(c.startswith(("/", "\n", "\r")) for c in merged)


def test_gold_is_has_answer_turns_of_answer_sessions_only() -> None:
    sessions = [
        [("user", "I bought a bike", True), ("assistant", "Nice bike!", False)],  # answer session
        [("user", "I bought a car", True), ("assistant", "ok", False)],  # has_answer but not answer
        [("user", "hello", False), ("assistant", "The bike is red", True)],  # answer session
        [("user", "no flags", False)],  # answer session without has_answer turns
    ]
    q = make_question(sessions, (0, 2, 3))
    h = build_history(q, Granularity.TURN)
    # positions: s0 -> 0,1; s1 -> 2,3; s2 -> 4,5; s3 -> 6
    assert h.gold == (0, 5)
    assert h.units[2].content == "I bought a car"  # has_answer, not gold


def test_no_gold_when_answer_sessions_have_no_flags() -> None:
    q = make_question([[("user", "hi", True)], [("user", "bike", False)]], (1,))
    assert build_history(q).gold == ()
    assert build_history(q).gold_tokens == 0


def test_session_granularity(tiny: Dataset) -> None:
    for q in tiny.questions:
        h = build_history(q, Granularity.SESSION)
        assert len(h.units) == len(q.haystack_sessions)
        answer = set(q.answer_session_ids)
        assert h.gold == tuple(s for s, sid in enumerate(q.haystack_session_ids) if sid in answer)
        for s, u in enumerate(h.units):
            assert (u.position, u.session, u.turn, u.role) == (s, s, -1, "session")
            assert u.date == q.haystack_dates[s]
            pairs = [(t.role, t.content) for t in q.haystack_sessions[s]]
            assert u.snippet == render_session(q.haystack_dates[s], pairs)
            assert u.snippet.startswith(f"[{q.haystack_dates[s]}] session:\n")
            assert u.content == "\n".join(t.content for t in q.haystack_sessions[s])
        assert [u.tokens for u in h.units] == count_tokens([u.snippet for u in h.units])


def test_session_gold_ignores_has_answer_flags() -> None:
    sessions = [[("user", "x", True)], [("user", "y", False)], [("user", "z", False)]]
    h = build_history(make_question(sessions, (1, 2)), Granularity.SESSION)
    assert h.gold == (1, 2)


def test_snippets_never_reveal_gold(tiny: Dataset) -> None:
    for q in tiny.questions:
        for gran in Granularity:
            h = build_history(q, gran)
            for u in h.units:
                for sid in q.haystack_session_ids:
                    assert sid not in u.snippet
                assert "has_answer" not in u.snippet
                assert "answer_" not in u.snippet
            # a unit carries no gold flag at all
            assert not any("answer" in f.name or "gold" in f.name for f in dataclasses.fields(h.units[0]))


def test_units_identical_whatever_the_gold() -> None:
    sessions = [[("user", "I bought a bike", True)], [("user", "I bought a car", True)]]
    a = build_history(make_question(sessions, (0,)))
    b = build_history(make_question(sessions, (1,)))
    assert a.units == b.units
    assert a.gold == (0,) and b.gold == (1,)


def test_fast_unit_construction_is_a_plain_unit() -> None:
    """A turn unit keeps no snippet of its own (its header and content make it when read) and is the Unit
    that keeps one in every other way: equal, hashed, shown, copied, pickled alike."""
    import copy
    import pickle

    from pytest_restore.data.units import Unit, _turn_unit

    date = "2023/05/01 (Mon) 10:00"
    fast = _turn_unit(3, 1, 2, date, "user", "hello there", 9)
    slow = Unit(3, 1, 2, date, "user", "hello there", f"[{date}] user:\nhello there", 9)
    with pytest.raises(AttributeError):
        Unit.snippet.__get__(fast)  # type: ignore[attr-defined]  # its slot is empty: the text is not kept twice
    assert fast.snippet == slow.snippet
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert type(fast) is Unit and copy.copy(fast) == slow and pickle.loads(pickle.dumps(fast)) == slow
    assert build_history(make_question([[("user", "hello there", True)]], (0,))).units[0].snippet.endswith("user:\nhello there")

    assert dataclasses.asdict(fast) == dataclasses.asdict(slow) and dataclasses.replace(fast, tokens=9) == slow
    with pytest.raises(AttributeError, match="no attribute 'snipet'"):
        fast.snipet  # type: ignore[attr-defined]  # noqa: B018
    try:
        fast.tokens = 1  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:  # pragma: no cover
        raise AssertionError("a fast unit must stay frozen")
