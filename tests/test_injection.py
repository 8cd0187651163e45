"""Tests for the BM25-lite ranker and the injection procedure (pytest_restore.memory.retrieval)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pytest_restore.data.dataset import Question, Turn, load_dataset
from pytest_restore.data.units import History, build_history
from pytest_restore.memory.retrieval import (
    EMPTY_MEMORY,
    INJECT_CAP,
    TOP_K,
    LexicalIndex,
    bm25_scores,
    inject,
    rank,
    render_context,
)

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"


def history_of(contents: list[str], question: str) -> History:
    q = Question(
        question_id="q",
        question_type="single-session-user",
        question=question,
        answer="x",
        question_date="2023/06/01 (Thu) 10:00",
        haystack_session_ids=("s0",),
        haystack_dates=("2023/05/01 (Mon) 10:00",),
        haystack_sessions=(tuple(Turn("user", c, False) for c in contents),),
        answer_session_ids=("s0",),
        index=0,
    )
    return build_history(q)


QUESTION = "Where did I buy my red bike?"  # content words: buy, red, bike
CONTENTS = [
    "I want to buy a bike",  # want buy bike: len 3
    "The red bike, the red car and the bike shop",  # red bike red car bike shop: len 6
    "Nothing about cycling here",  # nothing cycling: len 2
]


def hand_bm25(tfs: list[dict[str, int]], lengths: list[int], terms: list[str]) -> list[float]:
    k1, b = 1.2, 0.75
    n = len(tfs)
    avgdl = sum(lengths) / n
    scores = []
    for tf, dl in zip(tfs, lengths):
        s = 0.0
        for t in terms:
            df = sum(1 for d in tfs if d.get(t, 0) > 0)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            f = tf.get(t, 0)
            s += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))
        scores.append(s)
    return scores


def test_bm25_matches_hand_computation() -> None:
    h = history_of(CONTENTS, QUESTION)
    index = LexicalIndex.build(h)
    assert index.lengths.tolist() == [3, 6, 2]
    assert index.tf.tolist() == [[1, 0, 1], [0, 2, 2], [0, 0, 0]]  # columns buy, red, bike
    tfs = [{"buy": 1, "bike": 1}, {"red": 2, "bike": 2}, {}]
    want = hand_bm25(tfs, [3, 6, 2], ["buy", "red", "bike"])
    # written out for u0: idf(buy) = ln(1 + 2.5/1.5), idf(bike) = ln(1 + 1.5/2.5), avgdl = 11/3
    u0 = (
        (math.log(1 + 2.5 / 1.5) + math.log(1 + 1.5 / 2.5))
        * 2.2
        / (1 + 1.2 * (0.25 + 0.75 * 3 / (11 / 3)))
    )
    assert want[0] == pytest.approx(u0)
    store = np.ones(3, dtype=bool)
    assert bm25_scores(index, store) == pytest.approx(want)
    assert want[1] > want[0] > want[2] == 0.0
    assert rank(index, store) == [1, 0]  # zero-overlap unit 2 is not retrieved


def test_bm25_statistics_come_from_the_store() -> None:
    h = history_of(CONTENTS, QUESTION)
    index = LexicalIndex.build(h)
    store = np.array([True, False, True])
    want = hand_bm25([{"buy": 1, "bike": 1}, {}], [3, 2], ["buy", "red", "bike"])
    scores = bm25_scores(index, store)
    assert scores[[0, 2]] == pytest.approx(want)
    assert scores[1] == 0.0  # outside the store
    assert rank(index, store) == [0]
    assert rank(index, np.zeros(3, dtype=bool)) == []


def test_query_words_counted_once_and_stopwords_ignored() -> None:
    h = history_of(CONTENTS, "bike bike BIKE? the of and")
    index = LexicalIndex.build(h)
    assert index.tf.shape == (3, 1)
    assert index.tf[:, 0].tolist() == [1, 2, 0]
    h2 = history_of(CONTENTS, "the of and I")  # no content word at all
    assert rank(LexicalIndex.build(h2), np.ones(3, dtype=bool)) == []


def test_ties_go_to_the_newer_unit() -> None:
    contents = ["my bike", "weather", "my bike", "bike my", "my bike"]
    h = history_of(contents, "bike?")
    index = LexicalIndex.build(h)
    store = np.ones(5, dtype=bool)
    scores = bm25_scores(index, store)
    assert scores[0] == scores[2] == scores[3] == scores[4] > 0
    assert rank(index, store) == [4, 3, 2, 0]


def test_top_k_respected() -> None:
    contents = ["bike " + "filler " * (i % 5) + f"n{i}" for i in range(100)]
    h = history_of(contents, "bike")
    index = LexicalIndex.build(h)
    store = np.ones(100, dtype=bool)
    assert len(rank(index, store)) == TOP_K == 60
    top5 = rank(index, store, 5)
    assert top5 == rank(index, store)[:5]
    scores = bm25_scores(index, store)
    ranked = rank(index, store, 100)
    assert [scores[p] for p in ranked] == sorted(scores[ranked], reverse=True)
    assert top5 == [95, 90, 85, 80, 75]  # shortest units score best, newest first


def test_fixture_ranking_is_sorted_and_within_store() -> None:
    ds = load_dataset(TINY)
    for q in ds.questions:
        h = build_history(q)
        index = LexicalIndex.build(h)
        store = np.arange(len(h.units)) % 2 == 0
        ranked = rank(index, store)
        scores = bm25_scores(index, store)
        assert all(store[p] and scores[p] > 0 for p in ranked)
        assert set(ranked) == {int(p) for p in np.flatnonzero(store & (scores > 0))}
        keys = [(-scores[p], -p) for p in ranked]
        assert keys == sorted(keys)


# --- inject -------------------------------------------------------------------

SIZES = np.array([100, 900, 50, 1500, 700, 300, 10], dtype=np.int64)


def test_inject_forced_first_dedup_and_chronological() -> None:
    out = inject([5, 2, 5, 2], [0, 5, 1], SIZES, cap=2000)
    # forced 5, 2 (350 tokens, deduplicated); then 0 (450), 5 skipped, 1 (1350)
    assert out == [0, 1, 2, 5]


def test_forced_never_truncated_past_cap() -> None:
    out = inject([3, 4], [6, 2, 0], SIZES, cap=2000)
    assert out == [3, 4]  # 2200 forced > cap: nothing ranked fits any more
    assert inject([3, 1, 4], [], SIZES, cap=100) == [1, 3, 4]


def test_ranked_skipped_when_too_big_but_smaller_later_ones_added() -> None:
    out = inject([], [3, 1, 4, 0, 2, 6], SIZES, cap=2000)
    # 3 (1500), 1 would make 2400: skipped; 4 (2200) skipped; 0 -> 1600; 2 -> 1650; 6 -> 1660
    assert out == [0, 2, 3, 6]
    assert int(SIZES[out].sum()) <= 2000
    assert inject([], [1, 4, 5, 0], SIZES, cap=2000) == [0, 1, 4, 5]  # exactly 2000 fits


def test_inject_default_cap_and_empty() -> None:
    assert INJECT_CAP == 2000
    assert inject([], [], SIZES) == []
    assert inject([], [3, 4], SIZES) == [3]


def test_render_context() -> None:
    h = history_of(CONTENTS, QUESTION)
    assert render_context(h, []) == EMPTY_MEMORY == "(no memory available)"
    assert render_context(h, [0, 2]) == h.units[0].snippet + "\n\n" + h.units[2].snippet
