"""The fast paths over ASCII text agree with the rules as written, on adversarial strings."""

from __future__ import annotations

import collections
import random
import re
import threading
from pathlib import Path

import numpy as np
import pytest

from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import Granularity, build_histories
from pytest_restore.memory import eviction, lexical
from pytest_restore.memory.retrieval import LexicalIndex
from pytest_restore.synthetic.generator import generate, write_dataset

# letters of the first-person words in both cases, digits, the stripped punctuation,
# every ASCII whitespace str.split() knows, and a few other separators
ALPHABET = list("iImMyYeEwWoOrRvVdDnNzZ'\".,;:!?()[]0123456789_- \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")


# characters outside ASCII that play a part in some rule: letters that fold to ASCII ones
# under re.IGNORECASE (dotted and dotless i, long s, the Kelvin sign), capitals and a
# titlecase letter, decimal digits of other scripts and a superscript (a \w that is no \d),
# Unicode whitespace (NBSP, em space, NEL, line separator), punctuation, an emoji, a
# combining mark and a lone surrogate
NON_ASCII = list("\u0130\u0131\u017f\u212aÉéǅ\u0663\uff11²\xa0\u2003\x85\u2028\u2019\u2014\U0001f600\u0307\ud800")


def strings(n: int, seed: int, extra: list[str] | None = None) -> list[str]:
    rng = random.Random(seed)
    alphabet = ALPHABET + (extra or [])
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(n)]


def test_fact_density_kernel_is_the_rule() -> None:
    texts = [*strings(30_000, 1), "I met Anna at 5pm. She said my car was fine!", "(I'm) [mine] we. Our",
             "i\x00 my\x00\x00 x we\x01"]  # NUL and control bytes are token characters too
    assert all(t.isascii() for t in texts)
    rule = [eviction._fact_density_python(t) for t in texts]
    assert eviction.fact_densities(texts).tolist() == rule  # one compiled pass over them all
    eviction._DENSITIES.clear()  # a text at a time, none known from an earlier test
    assert [eviction.fact_density(t) for t in texts] == rule


def test_fact_density_of_non_ascii_text_is_the_rule() -> None:
    texts = [*strings(30_000, 7, NON_ASCII), "Café owner Zoë told me: my order is 12 crêpes.",
             "\u0130 met \u212aelvin at \u0663pm\u2003today. \u00c9mile said my car\xa0was fine"]
    assert not all(t.isascii() for t in texts)
    rule = [eviction._fact_density_python(t) for t in texts]
    assert eviction.fact_densities(texts).tolist() == rule  # one compiled pass over them all
    eviction._DENSITIES.clear()  # a text at a time, none known from an earlier test
    assert [eviction.fact_density(t) for t in texts] == rule


def test_words_ascii_path_matches_the_regex() -> None:
    def by_regex(text: str) -> tuple[str, ...]:
        return tuple(w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1 and w not in lexical.STOPWORDS)

    texts = [*strings(20_000, 3), "The Quick-brown fox's 42nd jump", "Ünïcode ǅ İstanbul K"]
    assert [lexical.words.__wrapped__(t) for t in texts] == [by_regex(t) for t in texts]


def test_word_profile_counts_every_content_word() -> None:
    text = "Apples and pears, apples again; 7 pears? PEARS apples x"  # "and", "again": stopwords
    profile = lexical.word_profile(text)
    by_word = {w: int(c) for w, c in zip(
        [next(k for k, v in lexical._VOCABULARY.items() if v == i) for i in profile.ids], profile.counts)}
    assert by_word == {"apples": 3, "pears": 3}
    assert profile.total == 6
    assert list(profile.ids) == sorted(profile.ids)


@pytest.fixture
def fresh_word_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty word table and memo, and passes of ~2 KB (many passes; the table grows and is rehashed mid-pass)."""
    monkeypatch.setattr(lexical, "_TABLE", None)
    monkeypatch.setattr(lexical, "_PROFILES", {})
    monkeypatch.setattr(lexical, "_VOCABULARY", {})
    monkeypatch.setattr(lexical, "_CHUNK_BYTES", 2048)


@pytest.mark.usefixtures("fresh_word_table")
def test_compiled_word_profiles_are_the_plain_word_counts() -> None:
    rng = random.Random(4)
    # non-ASCII: lower() turns the Kelvin sign into "k" and "İ" into "i" + a combining dot; "ß", "ﬁ",
    # fullwidth "１", an emoji and a lone surrogate are never [a-z0-9]
    letters = list("aAbBcCzZ09_-'. \n\tÉéİ\u212aß\ufb01\uff11\U0001f600\ud800") + ["the", "The", "I", "and", "x", "ab" * 30]
    texts = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 40))) for _ in range(6_000)]
    texts += ["Zoë's café", "İstanbul \u212a", "ǅemal and the THE tHe", "", "a b c", "x" * 5000]
    profiles = lexical.word_profiles(texts)
    assert len(lexical._VOCABULARY) > 4096  # the table grew past its first size
    name = {i: w for w, i in lexical._VOCABULARY.items()}
    for text, profile in zip(texts, profiles):
        expected = collections.Counter(lexical.words.__wrapped__(text))
        assert {name[i]: c for i, c in zip(profile.ids.tolist(), profile.counts.tolist())} == expected, text
        assert profile.total == sum(expected.values())
        assert profile.ids.tolist() == sorted(profile.ids.tolist())
    # memoised: the same objects again, and one text alone gives the same profile
    assert all(a is b for a, b in zip(lexical.word_profiles(texts[:10]), profiles[:10]))
    assert lexical.word_profile(texts[7]) is profiles[7]


@pytest.mark.usefixtures("fresh_word_table")
def test_word_profiles_from_many_threads_at_once() -> None:
    rng = random.Random(6)
    batches = [[" ".join(f"w{rng.randint(0, 20_000)}" for _ in range(40)) for _ in range(2_000)] for _ in range(4)]
    out: dict[int, list[lexical.WordProfile]] = {}
    threads = [threading.Thread(target=lambda k=k: out.__setitem__(k, lexical.word_profiles(batches[k]))) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    name = {i: w for w, i in lexical._VOCABULARY.items()}
    for k, batch in enumerate(batches):
        for text, profile in zip(batch, out[k]):
            expected = collections.Counter(lexical.words.__wrapped__(text))
            assert {name[i]: c for i, c in zip(profile.ids.tolist(), profile.counts.tolist())} == expected


def test_lexical_index_tf_is_the_plain_count(tmp_path: Path) -> None:
    write_dataset(generate(4, 5, tokens_per_history=4_000), tmp_path / "data.json")
    questions = [q for q in load_dataset(tmp_path / "data.json").questions if not q.is_abstention]
    for history in build_histories(questions, Granularity.TURN):
        index = LexicalIndex.build(history)
        terms = list(dict.fromkeys(lexical.words(history.question.question)))
        expected = np.array([[lexical.words(u.content).count(t) for t in terms] for u in history.units], dtype=float)
        assert np.array_equal(index.tf.reshape(expected.shape), expected)
        assert np.array_equal(index.lengths, [len(lexical.words(u.content)) for u in history.units])


def test_lazy_pool_is_deterministic_and_mostly_distinct() -> None:
    def filler(records: list[dict[str, object]]) -> list[str]:
        return [sid for r in records for sid in r["haystack_session_ids"] if not sid.startswith("answer_")]  # type: ignore[attr-defined]

    first = generate(40, 3, tokens_per_history=6_000, lazy_pool=True, pool_factor=40.0)
    assert first == generate(40, 3, tokens_per_history=6_000, lazy_pool=True, pool_factor=40.0)
    lazy = filler(first)
    eager = filler(generate(40, 3, tokens_per_history=6_000))
    # a pool of 40 histories' worth: most filler sessions appear once; the default pool
    # (2.5 histories' worth) is shared by every question
    assert len(set(lazy)) / len(lazy) > 0.8
    assert len(set(eager)) / len(eager) < 0.65


@pytest.mark.parametrize("lazy", [False, True])
def test_no_history_holds_a_session_twice(lazy: bool) -> None:
    for record in generate(8, 11, tokens_per_history=6_000, lazy_pool=lazy, pool_factor=3.0):
        ids = record["haystack_session_ids"]
        assert len(ids) == len(set(ids))
