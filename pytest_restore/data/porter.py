"""The Porter stemmer as LoCoMo's evaluation runs it (NLTK's ``PorterStemmer()``, its default extensions mode).

LoCoMo's token F1 stems every token with NLTK's Porter stemmer, whose
default mode adds a few departures to Porter's 1980 algorithm: a small table
of irregular forms (``dying`` -> ``die``, ``skies`` -> ``sky``, ...), words of
two letters or fewer left alone, ``ies``/``ied`` on a four-letter word kept
as ``ie``, ``y`` -> ``i`` only after a consonant that is not the word's first
letter, ``alli`` stripped before step 2's rules, and ``fulli`` and ``logi``
added to step 2. This module implements that algorithm, written from the
paper's rules and those departures; it is not NLTK's code.

Why not depend on NLTK: the stemmer is one function, while NLTK brings five
more packages, 14 MB, and about 2 s of import on a busy two-core machine for
every process that scores an answer. The cost of our own copy is the risk
of drifting from NLTK's output, so ``tests/test_answer_metrics.py`` stems
every word of a wide vocabulary both ways (NLTK is a development dependency
only) and requires the same stem.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

__all__ = ["stem"]

_VOWELS = frozenset("aeiou")

#: NLTK's irregular forms: the word -> its stem, before any rule.
_IRREGULAR: dict[str, str] = {
    "sky": "sky", "skies": "sky", "dying": "die", "lying": "lie", "tying": "tie", "news": "news",
    "innings": "inning", "inning": "inning", "outings": "outing", "outing": "outing",
    "cannings": "canning", "canning": "canning", "howe": "howe", "proceed": "proceed",
    "exceed": "exceed", "succeed": "succeed",
}

Condition = Callable[[str], bool] | None


def _consonants(word: str) -> list[bool]:
    """Whether each letter is a consonant: ``y`` is one at the start or after a vowel, else a vowel."""
    flags: list[bool] = []
    for i, ch in enumerate(word):
        if ch in _VOWELS:
            flags.append(False)
        elif ch == "y":
            flags.append(i == 0 or not flags[i - 1])
        else:
            flags.append(True)
    return flags


def _is_consonant(word: str, i: int) -> bool:
    return _consonants(word[: i + 1])[i]


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: how many vowel-consonant transitions the stem has."""
    pattern = "".join("c" if c else "v" for c in _consonants(stem))
    return pattern.count("vc")


def _positive(stem: str) -> bool:
    return _measure(stem) > 0


def _above_one(stem: str) -> bool:
    return _measure(stem) > 1


def _has_vowel(stem: str) -> bool:
    return not all(_consonants(stem))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Consonant-vowel-consonant at the end, the last not w, x or y; or a two-letter vowel-consonant word."""
    if len(word) >= 3:
        flags = _consonants(word)
        if flags[-3] and not flags[-2] and flags[-1] and word[-1] not in "wxy":
            return True
    return len(word) == 2 and not _is_consonant(word, 0) and _is_consonant(word, 1)


def _first_rule(word: str, rules: Sequence[tuple[str, str, Condition]]) -> str:
    """The first rule whose suffix the word ends with decides: replaced if its condition holds on the stem, else unchanged."""
    for suffix, replacement, condition in rules:
        if suffix == "*d":
            if _double_consonant(word):
                stem = word[:-2]
                return stem + replacement if condition is None or condition(stem) else word
            continue
        if word.endswith(suffix):
            stem = word[: len(word) - len(suffix)]
            return stem + replacement if condition is None or condition(stem) else word
    return word


def _step1a(word: str) -> str:
    if word.endswith("ies") and len(word) == 4:
        return word[:-3] + "ie"
    return _first_rule(word, [("sses", "ss", None), ("ies", "i", None), ("ss", "ss", None), ("s", "", None)])


def _step1b(word: str) -> str:
    if word.endswith("ied"):
        return word[:-3] + ("ie" if len(word) == 4 else "i")
    if word.endswith("eed"):
        stem = word[:-3]
        return stem + "ee" if _measure(stem) > 0 else word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            base = word[: -len(suffix)]
            break
    else:
        return word
    last = base[-1]
    return _first_rule(
        base,
        [
            ("at", "ate", None),
            ("bl", "ble", None),
            ("iz", "ize", None),
            ("*d", last, lambda _stem: last not in "lsz"),
            ("", "e", lambda stem: _measure(stem) == 1 and _cvc(stem)),
        ],
    )


def _step1c(word: str) -> str:
    return _first_rule(word, [("y", "i", lambda stem: len(stem) > 1 and _is_consonant(stem, len(stem) - 1))])


_STEP2: list[tuple[str, str, Condition]] = [
    ("ational", "ate", _positive), ("tional", "tion", _positive), ("enci", "ence", _positive),
    ("anci", "ance", _positive), ("izer", "ize", _positive), ("bli", "ble", _positive),
    ("alli", "al", _positive), ("entli", "ent", _positive), ("eli", "e", _positive),
    ("ousli", "ous", _positive), ("ization", "ize", _positive), ("ation", "ate", _positive),
    ("ator", "ate", _positive), ("alism", "al", _positive), ("iveness", "ive", _positive),
    ("fulness", "ful", _positive), ("ousness", "ous", _positive), ("aliti", "al", _positive),
    ("iviti", "ive", _positive), ("biliti", "ble", _positive), ("fulli", "ful", _positive),
]


def _step2(word: str) -> str:
    if word.endswith("alli") and _positive(word[:-4]):
        return _step2(word[:-4] + "al")
    # "logi" -> "log" when the word without its "ogi" has a positive measure
    return _first_rule(word, [*_STEP2, ("logi", "log", lambda _stem: _positive(word[:-3]))])


def _step3(word: str) -> str:
    return _first_rule(word, [
        ("icate", "ic", _positive), ("ative", "", _positive), ("alize", "al", _positive),
        ("iciti", "ic", _positive), ("ical", "ic", _positive), ("ful", "", _positive), ("ness", "", _positive),
    ])


def _step4(word: str) -> str:
    return _first_rule(word, [
        ("al", "", _above_one), ("ance", "", _above_one), ("ence", "", _above_one), ("er", "", _above_one),
        ("ic", "", _above_one), ("able", "", _above_one), ("ible", "", _above_one), ("ant", "", _above_one),
        ("ement", "", _above_one), ("ment", "", _above_one), ("ent", "", _above_one),
        ("ion", "", lambda stem: _measure(stem) > 1 and stem[-1:] in ("s", "t")),
        ("ou", "", _above_one), ("ism", "", _above_one), ("ate", "", _above_one), ("iti", "", _above_one),
        ("ous", "", _above_one), ("ive", "", _above_one), ("ize", "", _above_one),
    ])


def _step5(word: str) -> str:
    if word.endswith("e"):
        stem = word[:-1]
        if _measure(stem) > 1 or (_measure(stem) == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word[:-1]) > 1:
        word = word[:-1]
    return word


@lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """The stem of one word (lower-cased first), as NLTK's default ``PorterStemmer().stem`` gives it."""
    word = word.lower()
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if len(word) <= 2:
        return word
    for step in (_step1a, _step1b, _step1c, _step2, _step3, _step4, _step5):
        word = step(word)
    return word
