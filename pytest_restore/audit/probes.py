"""The calibration gate's wrong answers a lenient judge accepts: vague but on topic, specific but wrong.

A judge that accepts an answer because it is about the right thing, or
because it is the right kind of thing, inflates accuracy and moves errors
out of every bin. Two probes of known verdict (INCORRECT) catch it; both are
built from text the judge is shown anyway (the question and the reference),
with no model call and nothing else of the gold:

- **vague but on topic** (:func:`vague_answer`): the question's own content
  words, restated as an answer, with every word of the reference left out
  (``When did Melanie paint a sunrise?`` -> ``That was about Melanie, paint
  and sunrise, as the conversation said.``). It names the subject and not
  the fact; a judge that accepts it grades by topic.
- **specific but wrong** (:func:`specific_wrong`): the reference with its
  value changed, so the answer has the right form and the wrong content.
  Numbers move (a year by -3, any other number by +3: ``10 years ago`` ->
  ``13 years ago``), month names by six months, weekday names by three days,
  number words (one to twelve) by three. A reference with none of these is
  replaced by the reference of another question of the same type that shares
  no word with it, the closest in length (the right kind of answer for that
  type). A question for which neither can be built has no such probe.

A probe equal to its reference once normalised (case, punctuation, articles)
is not made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pytest_restore.data.words import STOPWORDS

__all__ = ["MONTHS", "NUMBER_WORDS", "WEEKDAYS", "answer_tokens", "same_text", "specific_wrong", "vague_answer"]

MONTHS: tuple[str, ...] = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)
WEEKDAYS: tuple[str, ...] = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBER_WORDS: tuple[str, ...] = (
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
)
#: Question words and auxiliaries: they carry the question's form, not its subject.
_QUESTION_WORDS = frozenset((
    "what", "when", "where", "who", "whom", "whose", "which", "why", "how", "did", "does", "do", "is", "are",
    "was", "were", "has", "have", "had", "would", "could", "should", "can", "will", "may", "might", "kind",
    "type", "name", "names", "many", "much", "long",
))
_TOKEN = re.compile(r"[a-z0-9]+")
_WORD = re.compile(r"[A-Za-z0-9]+(?:'[A-Za-z]+)?")
_NUMBER = re.compile(r"\d+")


def answer_tokens(text: str) -> set[str]:
    """Lower-case letter and digit runs of ``text``, stopwords out (numbers kept: "3" is an answer)."""
    return set(_TOKEN.findall(text.lower())) - STOPWORDS


def same_text(a: str, b: str) -> bool:
    """Whether two answers are the same once case, punctuation and articles are set aside."""
    def norm(text: str) -> list[str]:
        return [t for t in _TOKEN.findall(text.lower()) if t not in ("a", "an", "the")]

    return norm(a) == norm(b)


def vague_answer(question: str, reference: str) -> str | None:
    """The question's subject restated as an answer, no word of the reference in it (``None``: nothing is left)."""
    banned = answer_tokens(reference)
    words: list[str] = []
    seen: set[str] = set()
    for word in _WORD.findall(question):
        tokens = answer_tokens(word)
        key = word.lower()
        if not tokens or key in _QUESTION_WORDS or tokens & banned or key in seen:
            continue
        seen.add(key)
        words.append(word)
    if not words:
        return None
    listed = words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"
    return f"That was about {listed}, as the conversation said."


def _shift(word: str, names: tuple[str, ...], by: int) -> str:
    """``word`` (one of ``names``, any case) moved ``by`` places round the list, its capitalisation kept."""
    moved = names[(names.index(word.lower()) + by) % len(names)]
    return moved.capitalize() if word[:1].isupper() else moved


def _changed_value(reference: str) -> str | None:
    """The reference with its numbers, months, weekdays or number words changed; ``None`` when it has none."""
    if _NUMBER.search(reference):
        return _NUMBER.sub(lambda m: str(int(m.group()) - 3 if 1900 <= int(m.group()) <= 2100 else int(m.group()) + 3), reference)
    for names, by in ((MONTHS, 6), (WEEKDAYS, 3), (NUMBER_WORDS, 3)):
        pattern = re.compile(r"\b(" + "|".join(names) + r")(s?)\b", re.IGNORECASE)  # "Wednesdays" too
        if pattern.search(reference):
            return _shift_all(pattern, reference, names, by)
    return None


def _shift_all(pattern: re.Pattern[str], text: str, names: tuple[str, ...], by: int) -> str:
    """Every match of ``pattern`` in ``text`` moved ``by`` places round ``names``."""
    return pattern.sub(lambda m: _shift(m.group(1), names, by) + m.group(2), text)


def specific_wrong(reference: str, same_type: Sequence[str]) -> str | None:
    """The right kind of answer with the wrong value (see the module docstring); ``None`` when none can be built.

    ``same_type`` is the references of the other questions of the reference's
    question type, in the order to try them.
    """
    changed = _changed_value(reference)
    if changed is not None:
        return None if same_text(changed, reference) else changed
    own = answer_tokens(reference)
    length = len(reference.split())
    candidates = [
        other for other in same_type
        if other.strip() and not same_text(other, reference) and not (own & answer_tokens(other))
    ]
    if not candidates:
        return None
    return min(candidates, key=lambda other: abs(len(other.split()) - length))
