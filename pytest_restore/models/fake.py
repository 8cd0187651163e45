"""Deterministic fake models: the reader, judge and scorer CI runs with.

They sit behind the same interface as the real models (chat messages in,
text out) and read the same prompts, so the audit cannot tell them apart.
They are models of a reader, a judge and a scorer, not of the audit's
expected outcomes: what the fake reader answers depends on what its context
holds, and the figures a run prints check the pipeline on a simulated reader,
not any real model.

The fake reader (``report/simulated.py`` prints a short version of it, with
the :class:`ReaderKnobs` values):

1. It finds the question (after ``Question:``) and its date (after
   ``Today's date:``) in the prompt and looks up what it was taught of that
   question: the type, the reference answer and the rendered gold snippets
   in chronological order (label-keyed, so CI stays deterministic).
2. It reads the evidence in the context by question type. Knowledge update:
   the newest gold snippet suffices; an older one without it gives the stale
   (wrong) value. Multi-session: every gold snippet is needed; a partial set
   gives an aggregate of what is there (a smaller count or sum, a shorter
   list), which is wrong. Temporal reasoning and single-session types: every
   gold snippet is needed; otherwise it says ``I don't know.``, except that
   a question offering two options ("Which did I do first: A, or B?") draws a
   guess with probability ``guess``, right half the time.
   A gold snippet is in the context when it is there verbatim (a raw turn)
   or when a memory holds its fact (a derived memory: a snippet whose role
   line says ``memory``). A gold turn's fact is what its most fact-dense
   sentence (:func:`pytest_restore.memory.derived.key_sentence`) asserts:
   its numbers and its names (capitalised words that do not open the
   sentence, ``I`` aside), or, when it has neither, its content words. A
   memory holds the fact when every one of those words is among its own
   (case, punctuation and articles aside: :func:`normalise`). So a summary
   that keeps the sentence, or rewords it around the same numbers and
   names, holds the evidence; one that drops a number or a name does not.
   Contexts of raw turns hold no memory: the rule for them is the verbatim
   search alone, as before.
3. With the evidence it needs, it still misuses it now and then (a
   *utilisation error*: the first number off by one, or half a list). The
   error's probability is ``1 - exp(-h)`` with the hazard
   ``h = scale x type_factor x (h0 + crowding x other + position x depth)``:
   ``h0`` gives ``base_error`` on a clean one-snippet context, ``other`` is the
   non-gold text in the context in thousands of tokens (4,000 characters),
   ``depth`` is how far into the context the gold sits (0 at the start, 1 at
   the end). Aggregating types (multi-session, temporal) carry ``aggregate``
   as their type factor. The draw is a hash of the question id and the
   context's text, mixed with a per-question draw (``persistence`` is the
   correlation of one question's draws across contexts): the same context
   always gets the same answer, a hard question tends to fail everywhere, and
   a changed context can turn a right answer wrong. An oracle context can
   fail, so the oracle filter removes questions.

The knobs (:class:`ReaderKnobs`) were chosen once, on the no-evict cell and the
oracle of the 500-question synthetic file (``benches/bench_world.py`` prints
them beside the paper's figures); no evicting cell was used.

The fake judge normalises both answers (case, punctuation, articles,
whitespace) and says CORRECT only when they are equal. The fake scorer rates a
unit's content alone, as a whole: first-person statements and numbers raise
the score, a long turn (over :data:`LONG_WORDS` words) lowers it, since a
fact said in passing weighs little in a snippet that is mostly something
else, and a hash of the content adds jitter of up to three points either way
(a rater's scores of similar snippets spread widely).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

from pytest_restore.data.units import History
from pytest_restore.data.words import words
from pytest_restore.memory.derived import key_sentence
from pytest_restore.memory.memories import MEMORY_ROLE
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.prompts import DONT_KNOW, FACTS_SYSTEM, SUMMARY_SYSTEM, TURN_SEPARATOR
from pytest_restore.record import Record

#: Question types whose answer combines several pieces of evidence.
AGGREGATING_TYPES = frozenset({"multi-session", "temporal-reasoning"})
#: Characters per thousand tokens of English chat text (the reader's unit of "other" text).
CHARS_PER_KTOKEN = 4000.0


@dataclass(frozen=True)
class ReaderKnobs:
    """The fake reader's knobs; the defaults are the calibrated ones (module docstring)."""

    #: utilisation-error rate on a clean one-snippet context, single-evidence types
    base_error: float = 0.13
    #: type factor of the aggregating types (multi-session, temporal reasoning)
    aggregate: float = 3.0
    #: hazard added per thousand tokens of non-gold text in the context
    crowding: float = 0.07
    #: hazard added when the gold sits at the end of the context rather than the start
    position: float = 0.10
    #: correlation of one question's draws across contexts (0: independent, 1: one draw per question)
    persistence: float = 0.9
    #: multiplies the hazard: below 1 a stronger reader, above 1 a weaker one
    scale: float = 1.0
    #: chance that the reader guesses between a two-option question's options without the evidence
    guess: float = 0.5


@dataclass(frozen=True)
class KnownQuestion:
    """What the fake reader knows of one question."""

    question_id: str
    question_type: str
    answer: str
    gold_snippets: tuple[str, ...]  #: in chronological order
    #: each gold turn's fact as the words a memory must hold (:func:`evidence_words`), in the same order
    gold_facts: tuple[frozenset[str], ...] = ()


def _unit_draw(*parts: str) -> float:
    """A deterministic draw in [0, 1) from strings."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


_NORMAL = NormalDist()


def _z(u: float) -> float:
    """The standard normal quantile of a draw, kept off the infinite ends."""
    return _NORMAL.inv_cdf(min(max(u, 1e-12), 1.0 - 1e-12))


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
    # a list, not a generator: join makes one of it anyway, and a lone message comes back as it is
    return "\n".join([content for role, content in request.messages if role == "user"])


def _system_message(request: ChatRequest) -> str:
    return "\n".join(content for role, content in request.messages if role == "system")


#: The writers' system prompts (session-summary-model, fact-extract-model): the fake reader writes for them too.
WRITER_SYSTEMS = frozenset({SUMMARY_SYSTEM, FACTS_SYSTEM})


def write(request: ChatRequest) -> str:
    """The fake model's reply to a writer's request, as the offline writers write it (no labels read).

    A summary request gets the session's densest share of sentences
    (``ExtractiveSummary``); a facts request gets the turn's densest
    sentences cut short (``SentenceFacts``), one per line, or ``NONE``. The
    turns are read back from the request as the prompt lays them out.
    """
    from pytest_restore.data.units import Unit
    from pytest_restore.memory.derived import ExtractiveSummary, SentenceFacts

    prompt = _user_message(request)
    if _system_message(request) == SUMMARY_SYSTEM:
        date = (_between(prompt, "Session date: ", None) or "").strip()
        body = _between(prompt, "\n\n", "\n\nSummary:") or ""
        turns = [turn.partition(": ") for turn in body.split(TURN_SEPARATOR)]
        units = [Unit(i, 0, i, date, role, content, "", 0) for i, (role, _, content) in enumerate(turns)]
        written = ExtractiveSummary().summarize(units)
        return written[0].text if written else ""
    date = (_between(prompt, "Date: ", None) or "").strip()
    role, _, content = (_between(prompt, "\n", "\n\nFacts, one per line:") or "").partition(": ")
    facts = SentenceFacts().extract(Unit(0, 0, 0, date, role, content, "", 0))
    return "\n".join(facts) or "NONE"


_NUMBER = re.compile(r"\d[\d,]*")
_CHOICE = re.compile(r"^(which|who)\b.*\S or \S.*\?\s*$", re.IGNORECASE | re.DOTALL)


def is_choice(question: str) -> bool:
    """Whether a question offers two options to choose from ("Which did I do first: A, or B?")."""
    return _CHOICE.match(question) is not None


def wrong_answer(answer: str) -> str:
    """A deterministic wrong variant of ``answer``: first number off by one, else a partial answer."""
    match = re.search(r"\d+", answer)
    if match:
        value = int(match.group()) + 1
        return answer[: match.start()] + str(value) + answer[match.end() :]
    half = answer.split()[: max(1, len(answer.split()) // 2)]
    return " ".join(half) + " and nothing else I can find"


def partial_aggregate(answer: str, present: int, total: int) -> str:
    """The aggregate a reader gives from ``present`` of ``total`` pieces of evidence: always wrong.

    A count or a sum shrinks in proportion (and by at least one); a list keeps
    its share of items (at least one, never all); anything else is a
    :func:`wrong_answer`.
    """
    match = _NUMBER.search(answer)
    if match:
        value = int(match.group().replace(",", ""))
        partial = min(value - 1, round(value * present / total))
        text = f"{partial:,}" if "," in match.group() else str(partial)
        return answer[: match.start()] + text + answer[match.end() :]
    items = [x for x in re.split(r",\s*|\s+and\s+", answer) if x]
    if len(items) > 1:
        keep = min(len(items) - 1, max(1, len(items) * present // total))
        return ", ".join(items[:keep])
    return wrong_answer(answer)


class _Named:
    """A fake model's name, as records show it."""

    def __init__(self, *, name: str = "fake") -> None:
        self._name = name

    @property
    def name(self) -> str:
        """The model's name in records."""
        return self._name


class FakeReader(_Named):
    """The fake reader (rules in the module docstring)."""

    def __init__(
        self,
        histories: Iterable[History] = (),
        *,
        name: str = "fake",
        knobs: ReaderKnobs | None = None,
        utilisation_scale: float = 1.0,
    ) -> None:
        super().__init__(name=name)
        base = knobs or ReaderKnobs()
        #: ``utilisation_scale`` multiplies the knobs' scale: ``fake-strong`` (0.4) stands in for a stronger reader
        self.knobs = ReaderKnobs(**{**base.__dict__, "scale": base.scale * utilisation_scale})
        self._known: dict[tuple[str, str], KnownQuestion] = {}
        self.learn(histories)

    def learn(self, histories: Iterable[History]) -> None:
        """Learn the answers and gold snippets of these questions."""
        for history in histories:
            q = history.question
            snippets = tuple(history.units[p].snippet for p in sorted(history.gold))
            facts = tuple(evidence_words(history.units[p].content) for p in sorted(history.gold))
            known = KnownQuestion(q.question_id, q.question_type, q.answer, snippets, facts)
            self._known[(q.question, q.question_date)] = known

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer each reader request; a derived memory system's writer request as :func:`write` does."""
        return [ChatResult(write(r) if _system_message(r) in WRITER_SYSTEMS else self.answer(_user_message(r))) for r in requests]

    def answer(self, prompt: str) -> str:
        """The fake reader's answer to one reader prompt."""
        question = _between(prompt, "\n\nQuestion: ", "\nAnswer:", from_end=True)
        date = _between(prompt, "Today's date: ", None)
        known = self._known.get((question or "", date or ""))
        if known is None:
            return DONT_KNOW
        block = _between(prompt, "Memory snippets:\n", "\n\nQuestion: ") or prompt
        found = [block.find(g) for g in known.gold_snippets]
        lengths = [len(g) for g in known.gold_snippets]
        if MEMORY_HEADER in block:  # derived memories: read each for the facts not found verbatim
            memories = memory_snippets(block)
            for k, fact in enumerate(known.gold_facts):
                if found[k] < 0:
                    hit = next(((start, text) for start, text, held in memories if fact <= held), None)
                    if hit is not None:
                        found[k], lengths[k] = hit[0], len(hit[1])
        present = [i >= 0 for i in found]
        total = len(present)
        if not total:
            return DONT_KNOW
        if known.question_type == "knowledge-update":
            if not present[-1]:
                # an older value without the update: the reader reports what it sees
                return wrong_answer(known.answer) if any(present) else DONT_KNOW
            used = [found[-1]]
            used_lengths = [lengths[-1]]
        elif not all(present):
            if known.question_type == "multi-session" and any(present):
                return partial_aggregate(known.answer, sum(present), total)
            return self._guess(known, question or "", block)
        else:
            used, used_lengths = found, lengths
        if self._misused(known, block, used, used_lengths):
            return wrong_answer(known.answer)
        return known.answer

    def _guess(self, known: KnownQuestion, question: str, block: str) -> str:
        """Without its evidence: a guess between two offered options (right half the time), else I don't know."""
        if not is_choice(question):
            return DONT_KNOW
        draw = _unit_draw("guess", known.question_id, block)
        if draw >= self.knobs.guess:
            return DONT_KNOW
        return known.answer if draw < self.knobs.guess / 2 else wrong_answer(known.answer)

    def error_probability(self, question_type: str, other_chars: float, depth: float) -> float:
        """The utilisation-error probability for this much non-gold text and this gold depth."""
        k = self.knobs
        h0 = -math.log(1.0 - k.base_error)
        factor = k.aggregate if question_type in AGGREGATING_TYPES else 1.0
        hazard = k.scale * factor * (h0 + k.crowding * other_chars / CHARS_PER_KTOKEN + k.position * depth)
        return 1.0 - math.exp(-hazard)

    def _misused(self, known: KnownQuestion, block: str, found: Sequence[int], lengths: Sequence[int]) -> bool:
        """Whether the reader misuses evidence it has (a utilisation error), drawn per question and context.

        ``found`` are where the evidence it uses starts in the context, ``lengths`` how long each piece is.
        """
        gold_chars = sum(lengths)
        other = max(0, len(block) - gold_chars)
        depth = sum(i / max(1, len(block)) for i in found) / len(found)
        p_error = self.error_probability(known.question_type, other, depth)
        rho = self.knobs.persistence
        z = math.sqrt(rho) * _z(_unit_draw("question", known.question_id)) + math.sqrt(1.0 - rho) * _z(
            _unit_draw("context", known.question_id, block)
        )
        return _NORMAL.cdf(z) < p_error


#: How a derived memory's snippet opens, after its date: the reader reads these for facts.
MEMORY_HEADER = f"] {MEMORY_ROLE}:\n"
_SNIPPET_HEAD = re.compile(r"(?:\A|\n\n)\[[^\]\n]*\] ([a-z]+):\n")


def memory_snippets(block: str) -> list[tuple[int, str, frozenset[str]]]:
    """Each derived memory of a context: where its snippet starts, the snippet, and its words (normalised)."""
    heads = list(_SNIPPET_HEAD.finditer(block))
    out = []
    for k, head in enumerate(heads):
        if head.group(1) != MEMORY_ROLE:
            continue
        start = head.start() + (2 if block.startswith("\n\n", head.start()) else 0)
        end = heads[k + 1].start() if k + 1 < len(heads) else len(block)
        out.append((start, block[start:end], frozenset(normalise(block[head.end() : end]).split())))
    return out


_NAME = re.compile(r"[A-Z][A-Za-z]*")
_I_FORMS = frozenset({"I", "I'm", "I've", "I'd", "I'll"})


def evidence_words(content: str) -> frozenset[str]:
    """The words a memory must hold for the fake reader to find a gold turn's fact in it (module docstring)."""
    sentence = key_sentence(content)
    tokens = sentence.split()
    found: set[str] = set()
    for i, tok in enumerate(tokens):
        bare = tok.strip("\"'()[]*_,.;:!?")
        if any(c.isdigit() for c in tok):
            found.update(w for w in normalise(tok).split() if w.isdigit() or any(c.isdigit() for c in w))
        elif i > 0 and bare not in _I_FORMS and _NAME.match(bare) and not tokens[i - 1].endswith((".", "!", "?")):
            found.update(normalise(bare).split())
    return frozenset(found) if found else frozenset(normalise(" ".join(words(sentence))).split())


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces, articles dropped, whitespace folded."""
    return " ".join(_ARTICLES.sub(" ", _NON_WORD.sub(" ", text.lower())).split())


class FakeJudge(_Named):
    """Says CORRECT when the normalised candidate equals the normalised reference.

    Asked for a structured reply (``ChatRequest.reply_format``), it answers as
    a server constraining its decoding would: ``{"verdict": "CORRECT"}``.
    """

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Grade each judge request."""
        return [ChatResult(self.reply(r)) for r in requests]

    def reply(self, request: ChatRequest) -> str:
        """The reply to one judge request: the verdict, as a JSON object when a structured reply is asked."""
        verdict = self.grade(_user_message(request))
        return verdict if request.reply_format is None else json.dumps({"verdict": verdict})

    def grade(self, prompt: str) -> str:
        """The verdict for one judge prompt."""
        reference = _between(prompt, "\nReference answer: ", "\nCandidate answer: ")
        candidate = _between(prompt, "\nCandidate answer: ", "\n\nVerdict")
        if reference is None or candidate is None:
            return "INCORRECT"
        same = normalise(candidate) == normalise(reference) and normalise(reference) != ""
        return "CORRECT" if same else "INCORRECT"


# The scorer's two tests, as regular expressions (what they mean; a text that is not ASCII is read with them).
# ("i'm" and "i've" need no alternatives of their own: the apostrophe ends the word "i")
_FIRST_PERSON = re.compile(r"\b(?:i|m[ey]|we|our)\b", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
# The same tests on an ASCII text, with no regular expression: a grid scores every distinct unit content, and
# the two searches were most of the scorer's time. In ASCII, \w is [A-Za-z0-9_] and \d is 0-9, so a
# first-person word is a maximal run of word characters equal to one of these (case aside).
_FIRST_PERSON_WORDS = frozenset({"i", "me", "my", "we", "our"})
_ASCII_WORD = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
#: An ASCII text's bytes with every word character lower-cased and every other character a space: its words
#: are then the runs between spaces, and a first-person word is one of them with a space on each side (once
#: the text has a space at each end): one table, then one search for a literal on bytes, no word listed.
_WORDS_ONLY = bytes(
    ord(chr(c).lower()) if chr(c).lower() in _ASCII_WORD else ord(" ") for c in range(256)
)
_FIRST_PERSON_SPACED = re.compile(b" (?:" + b"|".join(w.encode("ascii") for w in sorted(_FIRST_PERSON_WORDS)) + b") ")
#: An ASCII text's bytes with each whitespace character (``str.split``'s: ``str.isspace``, the four
#: information separators too) a space and every other an ``x``: its words are the ``x`` that follow a space,
#: and the first byte when it is an ``x``.
_SPACE_OR_NOT = bytes(ord(" ") if chr(c).isspace() else ord("x") for c in range(128)) + b"x" * 128
_DIGITS = "0123456789"


def _says_first_person(content: str) -> bool:
    """Whether ``content`` holds a first-person word (``_FIRST_PERSON``)."""
    if content.isascii():
        return _FIRST_PERSON_SPACED.search(b" " + content.encode("ascii").translate(_WORDS_ONLY) + b" ") is not None
    return _FIRST_PERSON.search(content) is not None


def _more_words_than(content: str, limit: int) -> bool:
    """Whether ``content`` has more than ``limit`` words (``len(content.split()) > limit``), an ASCII text
    counted without making its words (a long turn's hundred strings were a fifth of the scorer's time)."""
    if content.isascii():
        marks = content.encode("ascii").translate(_SPACE_OR_NOT)
        return marks.count(b" x") + (marks[:1] == b"x") > limit
    return len(content.split()) > limit


def _has_digit(content: str) -> bool:
    """Whether ``content`` holds a decimal digit (``_DIGIT``)."""
    if content.isascii():
        return any(d in content for d in _DIGITS)
    return _DIGIT.search(content) is not None
#: Words past which the scorer takes a snippet for mostly something other than a fact.
LONG_WORDS = 120


class FakeScorer(_Named):
    """Rates a unit's content alone from 1 to 10 (rules in the module docstring)."""

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Score each scorer request."""
        # one content at a time: the snippets cut out of a full dataset's prompts are not held all at once
        return [
            ChatResult(str(self.score(_between(_user_message(r), "Snippet: ", "\nImportance (1-10):") or "")))
            for r in requests
        ]

    @staticmethod
    def score(content: str) -> int:
        """The fake importance of one content: 4, +2 for a first-person word, +1 for a digit, -2 when long, +-3 jitter."""
        score = 4 + (2 if _says_first_person(content) else 0) + (1 if _has_digit(content) else 0)
        score -= 2 if _more_words_than(content, LONG_WORDS) else 0
        score += round(6 * _unit_draw("importance", content)) - 3
        return min(10, max(1, score))

    @staticmethod
    def scores(contents: Sequence[str]) -> list[int]:
        """The fake importance of each content (see :meth:`score`)."""
        return [FakeScorer.score(c) for c in contents]


# -- which models of a run were these fakes (the report says so: report/simulated.py) -----------


def is_fake(name: str | None) -> bool:
    """Whether a model name in the records is one of these fakes (``fake``, ``fake-strong``, ``fake-*``)."""
    return name is not None and (name == "fake" or name.startswith("fake-"))


def simulated_models(records: Iterable[Record]) -> list[tuple[str, str]]:
    """``(role, name)`` of every fake model in the records, readers first, then judges, then scorers."""
    roles = ("reader", "judge", "scorer")
    found = {
        (i, name) for r in records for i, name in enumerate((r.reader, r.judge, r.scorer)) if name and is_fake(name)
    }
    return [(roles[i], name) for i, name in sorted(found)]
