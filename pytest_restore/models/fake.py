"""Deterministic fake models: the reader, judge and scorer CI runs with.

They sit behind the same interface as the real models (chat messages in,
text out) and read the same prompts, so the audit cannot tell them apart.

The fake reader is an evidence-aware stand-in, built to validate the audit:

1. It finds the question (after ``Question:``) and its date (after
   ``Today's date:``) in the prompt and looks up what it knows of that
   question: the reference answer and the rendered gold snippets.
2. If any gold snippet is missing from the context, it answers
   ``I don't know.``
3. If every gold snippet is there, it answers the reference, except for a
   deterministic *utilisation error*: with probability
   ``UTILISATION_RATE[question_type] x min(1, other / SATURATION_CHARS)``,
   where ``other`` counts the characters of non-gold snippets in the context,
   it gives a wrong answer (a number off by one, or a partial list). The
   draw is one hash of the question id, compared with that probability: a
   question the reader is bad at fails in every crowded enough context, and
   the same context always gets the same answer. A clean-gold (oracle)
   context has no non-gold text and is always answered correctly;
   cross-session and temporal questions buried among many other snippets
   fail most often.

The fake judge normalises both answers (case, punctuation, articles,
whitespace) and says CORRECT only when they are equal. The fake scorer rates a
unit's content alone: first-person statements and numbers raise the score,
and a hash of the content adds jitter of up to two points either way.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pytest_restore.data.units import History
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.prompts import DONT_KNOW

if TYPE_CHECKING:
    from pytest_restore.memory.kernels import StandIns

#: Utilisation-error rate when the context is saturated with non-gold text.
UTILISATION_RATE: Mapping[str, float] = {
    "multi-session": 0.30,
    "temporal-reasoning": 0.30,
    "knowledge-update": 0.10,
    "single-session-user": 0.06,
    "single-session-assistant": 0.06,
    "single-session-preference": 0.06,
}
DEFAULT_UTILISATION_RATE = 0.06
#: Non-gold characters at which the error rate reaches its ceiling (~1,000 tokens).
SATURATION_CHARS = 4000


@dataclass(frozen=True)
class KnownQuestion:
    """What the fake reader knows of one question."""

    question_id: str
    question_type: str
    answer: str
    gold_snippets: tuple[str, ...]


def _unit_draw(*parts: str) -> float:
    """A deterministic draw in [0, 1) from strings."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _between(text: str, start: str, end: str | None, *, from_end: bool = False) -> str | None:
    """The text after the first ``start`` (the last with ``from_end``) and before ``end``.

    ``end`` is searched from the back, and ``None`` means the end of the line.
    Markers that precede free text are taken from the front and markers that
    follow it from the back, so a snippet or an answer that happens to quote a
    marker cannot cut the text short.
    """
    i = text.rfind(start) if from_end else text.find(start)
    if i < 0:
        return None
    i += len(start)
    if end is None:
        j = text.find("\n", i)
        return text[i:] if j < 0 else text[i:j]
    j = text.rfind(end)
    return text[i:j] if j >= i else None


def _user_message(request: ChatRequest) -> str:
    return "\n".join(content for role, content in request.messages if role == "user")


def wrong_answer(answer: str) -> str:
    """A deterministic wrong variant of ``answer``: first number off by one, else a partial answer."""
    match = re.search(r"\d+", answer)
    if match:
        value = int(match.group()) + 1
        return answer[: match.start()] + str(value) + answer[match.end() :]
    half = answer.split()[: max(1, len(answer.split()) // 2)]
    return " ".join(half) + " and nothing else I can find"


class _Named:
    """A fake model's name, as records show it."""

    def __init__(self, *, name: str = "fake") -> None:
        self._name = name

    @property
    def name(self) -> str:
        """The model's name in records."""
        return self._name


class FakeReader(_Named):
    """The evidence-aware fake reader (rules in the module docstring)."""

    def __init__(
        self, histories: Iterable[History] = (), *, name: str = "fake", utilisation_scale: float = 1.0
    ) -> None:
        super().__init__(name=name)
        #: multiplies every utilisation-error rate: ``fake-strong`` (0.4) stands in for a stronger reader
        self.utilisation_scale = utilisation_scale
        self._known: dict[tuple[str, str], KnownQuestion] = {}
        self.learn(histories)

    def learn(self, histories: Iterable[History]) -> None:
        """Learn the answers and gold snippets of these questions."""
        for history in histories:
            q = history.question
            snippets = tuple(history.units[p].snippet for p in history.gold)
            known = KnownQuestion(q.question_id, q.question_type, q.answer, snippets)
            self._known[(q.question, q.question_date)] = known

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer each reader request."""
        return [ChatResult(self.answer(_user_message(r))) for r in requests]

    def answer(self, prompt: str) -> str:
        """The fake reader's answer to one reader prompt."""
        question = _between(prompt, "\n\nQuestion: ", "\nAnswer:", from_end=True)
        date = _between(prompt, "Today's date: ", None)
        known = self._known.get((question or "", date or ""))
        if known is None:
            return DONT_KNOW
        block = _between(prompt, "Memory snippets:\n", "\n\nQuestion: ") or prompt
        if not all(g in block for g in known.gold_snippets):
            return DONT_KNOW
        gold_chars = sum(len(g) + 2 for g in known.gold_snippets)  # each with its separator
        other = max(0, len(block) + 2 - gold_chars)
        rate = self.utilisation_scale * UTILISATION_RATE.get(known.question_type, DEFAULT_UTILISATION_RATE)
        p_error = rate * min(1.0, other / SATURATION_CHARS)
        # one draw per question: the context sets the error's probability, so the
        # same question fails in every crowded context, as a weak reader would
        if _unit_draw("utilisation", known.question_id) < p_error:
            return wrong_answer(known.answer)
        return known.answer


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces, articles dropped, whitespace folded."""
    return " ".join(_ARTICLES.sub(" ", _NON_WORD.sub(" ", text.lower())).split())


class FakeJudge(_Named):
    """Says CORRECT when the normalised candidate equals the normalised reference."""

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Grade each judge request."""
        return [ChatResult(self.grade(_user_message(r))) for r in requests]

    def grade(self, prompt: str) -> str:
        """The verdict for one judge prompt."""
        reference = _between(prompt, "\nReference answer: ", "\nCandidate answer: ")
        candidate = _between(prompt, "\nCandidate answer: ", "\n\nVerdict")
        if reference is None or candidate is None:
            return "INCORRECT"
        same = normalise(candidate) == normalise(reference) and normalise(reference) != ""
        return "CORRECT" if same else "INCORRECT"


# The scorer's two tests as written; the compiled scan (``scores``) gives their answers, and
# tests/test_text_paths.py holds it to them.
_FIRST_PERSON = re.compile(r"\b(i|i'm|i've|my|me|we|our)\b", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
# ``_FIRST_PERSON`` over ASCII text: "i'm" and "i've" already match as "i" followed by a boundary.
_FIRST_PERSON_WORDS = ("i", "my", "me", "we", "our")


class FakeScorer(_Named):
    """Rates a unit's content alone from 1 to 10 (rules in the module docstring)."""

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Score each scorer request."""
        contents = [_between(_user_message(r), "Snippet: ", "\nImportance (1-10):") or "" for r in requests]
        return [ChatResult(str(score)) for score in self.scores(contents)]

    @staticmethod
    def score(content: str) -> int:
        """The fake importance of one content."""
        return FakeScorer.scores([content])[0]

    @staticmethod
    def scores(contents: Sequence[str]) -> list[int]:
        """The fake importance of each content: 4, +2 for a first-person word, +1 for a digit, +-2 jitter."""
        from pytest_restore.memory import kernels

        # the same two tests as the regexes, compiled: one pass over all the bytes, with
        # non-ASCII characters through ASCII stand-ins
        stand_ins = _scorer_stand_ins()
        ascii_texts = [c if c.isascii() else stand_ins.apply(c) for c in contents]
        first_person, digit = kernels.word_and_digit(ascii_texts, _first_person_codes())
        out = []
        for content, f, d in zip(contents, first_person, digit):
            score = 4 + (2 if f else 0) + (1 if d else 0) + round(4 * _unit_draw("importance", content)) - 2
            out.append(min(10, max(1, score)))
        return out


def _scorer_stand_in(char: str) -> str:
    """A non-ASCII character's part in the scorer's two regexes (``_FIRST_PERSON``, ``_DIGIT``).

    Under ``re.IGNORECASE`` four non-ASCII letters match ASCII ones ("İ" and
    "ı" match "i", "ſ" "s", the Kelvin sign "k"): they stand in as those. A
    ``\\d`` digit (``isdecimal``) stands in as "0"; any other ``\\w``
    character (``isalnum``) as "x", a word character in no first-person word;
    everything else as a space.
    """
    folded = _ASCII_FOLD.get(char)
    if folded is not None:
        return folded
    if char.isdecimal():
        return "0"
    return "x" if char.isalnum() else " "


_ASCII_FOLD = {"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}


@lru_cache(maxsize=1)
def _scorer_stand_ins() -> StandIns:
    """The scorer's stand-ins (numba loads with the kernels module, on first use)."""
    from pytest_restore.memory.kernels import StandIns

    return StandIns(_scorer_stand_in)


@lru_cache(maxsize=1)
def _first_person_codes() -> npt.NDArray[np.int64]:
    """``_FIRST_PERSON_WORDS`` as the compiled test's word codes (numba loads on first use)."""
    from pytest_restore.memory import kernels

    return kernels.word_codes(_FIRST_PERSON_WORDS)
