"""Prompts for the reader, the judge and the importance scorer, and reading their replies.

The wording is ours; the constraints follow the paper's appendix D: the
reader answers only from the snippets, gives complete list answers, computes
dates from the question date and falls back to an exact "I don't know"; the
judge replies with one word (or, asked for a structured reply, a JSON object
whose one field is the verdict); the scorer replies with one integer from 1 to
10. Decoding is temperature 0 with at most 600 / 16 (32 structured) / 4 output
tokens.

Every template can be replaced from a file (``{field}`` placeholders, as in
:meth:`str.format`). The reader never sees session ids or labels: it gets
the rendered snippets only. The scorer gets one unit's content and nothing
else.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from pytest_restore.data.tokens import count_joined
from pytest_restore.models.base import REPLY_STYLES, ChatRequest, ReplyFormat

READER_MAX_TOKENS = 600
JUDGE_MAX_TOKENS = 16
SCORER_MAX_TOKENS = 4

#: The reader's exact fallback when the snippets do not hold the answer.
DONT_KNOW = "I don't know."

READER_SYSTEM = (
    "You answer a question about a user from memory snippets of their earlier "
    "conversations with an assistant. Use the snippets and nothing else. Be brief and "
    "direct, but complete: when the question asks for several items or for an order, "
    "give every item, in order; when it asks how long ago something happened or how "
    "much time passed, work it out from today's date. If the snippets do not contain "
    f"the answer, reply with exactly: {DONT_KNOW}"
)
READER_USER = (
    "Today's date: {question_date}\n\n"
    "Memory snippets:\n{snippets}\n\n"
    "Question: {question}\n"
    "Answer:"
)
_JUDGE_TASK = "You check a candidate answer against a reference answer to the same question. "
_JUDGE_RULES = (
    "It is CORRECT when it states the "
    "same key facts as the reference; wording, letter case, articles and additional "
    "detail do not matter. For a list, every item of the reference must be there (the "
    "order counts only when the question asks for an order). Numbers, amounts and "
    "dates must agree."
)
JUDGE_SYSTEM = _JUDGE_TASK + "Reply with a single word: CORRECT or INCORRECT. " + _JUDGE_RULES
#: The judge's system prompt when its reply is structured (``--restore-judge-format``): the same rules.
JUDGE_JSON_SYSTEM = (
    _JUDGE_TASK + 'Reply with a JSON object holding one field, verdict, set to "CORRECT" or "INCORRECT", '
    'e.g. {"verdict": "INCORRECT"}. ' + _JUDGE_RULES
)
#: The judge's structured reply (``--restore-judge-format``): one field whose value is a verdict.
VERDICT_SCHEMA = (
    '{"type":"object","properties":{"verdict":{"type":"string","enum":["CORRECT","INCORRECT"]}},'
    '"required":["verdict"],"additionalProperties":false}'
)
#: How the judge may be asked to reply: free text, or one of ``base.REPLY_STYLES``.
JUDGE_FORMATS = ("text", *REPLY_STYLES)
#: A structured verdict is a dozen tokens; a server's grammar may let a model put whitespace between them.
JUDGE_JSON_MAX_TOKENS = 32
JUDGE_USER = (
    "Question: {question}\n"
    "Reference answer: {answer}\n"
    "Candidate answer: {prediction}\n\n"
    "Verdict (CORRECT or INCORRECT):"
)
SCORER_SYSTEM = (
    "Rate how important it is, in general, to remember this single memory snippet "
    "about a user, from 1 (small talk, nothing worth keeping) to 10 (a lasting fact, "
    "preference or commitment). Reply with the integer only."
)
SCORER_USER = "Snippet: {content}\nImportance (1-10):"


#: The placeholders each template may use (system prompts take none).
PLACEHOLDERS: dict[str, frozenset[str]] = {
    "reader_system": frozenset(),
    "reader_user": frozenset({"question", "question_date", "snippets"}),
    "judge_system": frozenset(),
    "judge_json_system": frozenset(),
    "judge_user": frozenset({"question", "answer", "prediction"}),
    "scorer_system": frozenset(),
    "scorer_user": frozenset({"content"}),
}


def check_template(text: str, allowed: frozenset[str], where: str) -> None:
    """Raise ``ValueError`` naming ``where`` and the placeholder when ``text`` cannot be formatted.

    System prompts are sent as they are (never formatted), so they are not
    checked; user templates are formatted with ``str.format`` and may use
    only ``allowed`` names (``{{`` and ``}}`` are literal braces).
    """
    if not allowed:
        return
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as err:  # a lone "{" or "}"
        raise ValueError(f"{where}: malformed placeholder: {err} (write {{{{ and }}}} for literal braces)") from None
    for _literal, name, _spec, _conversion in parsed:
        if name is None:
            continue
        if name not in allowed:
            shown = "{" + name + "}" if name else "{}"
            raise ValueError(f"{where}: unknown placeholder {shown}; this template may use {', '.join('{' + a + '}' for a in sorted(allowed))}")
    try:  # a bad conversion or format spec ({question!z}, {question:%})
        text.format(**dict.fromkeys(allowed, ""))
    except (ValueError, KeyError, IndexError) as err:
        raise ValueError(f"{where}: malformed placeholder: {err}") from None


@dataclass(frozen=True)
class PromptSet:
    """The templates (:data:`PLACEHOLDERS`' keys) and how the judge replies. Replace templates with :meth:`with_files`."""

    reader_system: str = READER_SYSTEM
    reader_user: str = READER_USER
    judge_system: str = JUDGE_SYSTEM
    judge_user: str = JUDGE_USER
    scorer_system: str = SCORER_SYSTEM
    scorer_user: str = SCORER_USER
    #: the judge's system prompt under a structured reply (``judge_format`` not ``text``)
    judge_json_system: str = JUDGE_JSON_SYSTEM
    #: one of :data:`JUDGE_FORMATS`: ``text`` (one word) or the style of a structured reply (``--restore-judge-format``)
    judge_format: str = "text"

    def with_files(self, files: Mapping[str, str | Path]) -> PromptSet:
        """A copy with some templates read from files, keyed by field name.

        Each template is test-formatted as it is loaded: an unknown or
        malformed placeholder is a ``ValueError`` naming the file and the
        placeholder, before any request is built.
        """
        known = set(PLACEHOLDERS)
        for key in files:
            if key not in known:
                raise ValueError(f"unknown prompt template {key!r}; known: {', '.join(sorted(known))}")
        texts = {}
        for key, path in files.items():
            try:
                text = Path(path).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as err:
                raise ValueError(f"{path}: cannot be read: {err}") from None
            check_template(text, PLACEHOLDERS[key], str(path))
            texts[key] = text
        return replace(self, **texts)

    def reader(self, *, question: str, question_date: str, snippets: str) -> ChatRequest:
        """The reader's request for one condition."""
        user = "".join(_filled(self.reader_user, question=question, question_date=question_date, snippets=snippets)[0])
        return ChatRequest((("system", self.reader_system), ("user", user)), READER_MAX_TOKENS)

    def reader_tokens(
        self, *, question: str, question_date: str, snippets: Sequence[str], counts: Sequence[int | None]
    ) -> tuple[int, int]:
        """The o200k tokens of :meth:`reader`'s two messages, counted from their parts (no prompt encoded).

        ``snippets`` are the parts that join to the request's ``snippets`` (the context's snippets and what
        separates them), ``counts`` their counts where known (a unit's size): see :func:`count_joined`.
        """
        user = _filled(
            self.reader_user, {"snippets": counts}, question=question, question_date=question_date, snippets=snippets
        )
        return _counted(self.reader_system), count_joined(*user)

    def _judge_system(self) -> str:
        return self.judge_system if self.judge_format == "text" else self.judge_json_system

    def judge(self, *, question: str, answer: str, prediction: str) -> ChatRequest:
        """The judge's request comparing a prediction with the reference (structured as ``judge_format`` says)."""
        user = "".join(_filled(self.judge_user, question=question, answer=answer, prediction=prediction)[0])
        if self.judge_format == "text":
            return ChatRequest((("system", self.judge_system), ("user", user)), JUDGE_MAX_TOKENS)
        return ChatRequest(
            (("system", self.judge_json_system), ("user", user)),
            JUDGE_JSON_MAX_TOKENS,
            reply_format=ReplyFormat("verdict", VERDICT_SCHEMA, self.judge_format),
        )

    def judge_tokens(self, *, question: str, answer: str, prediction: str) -> tuple[int, int]:
        """The o200k tokens of :meth:`judge`'s two messages, counted from their parts (the question, the
        reference and the prediction each counted once, the template's pieces once)."""
        user = _filled(self.judge_user, question=question, answer=answer, prediction=prediction)
        return _counted(self._judge_system()), count_joined(*user)

    def scorer(self, *, content: str) -> ChatRequest:
        """The importance scorer's request: one unit's content, nothing else."""
        user = "".join(_filled(self.scorer_user, content=content)[0])
        return ChatRequest((("system", self.scorer_system), ("user", user)), SCORER_MAX_TOKENS)

    def scorer_tokens(self, *, content: str) -> tuple[int, int]:
        """The o200k tokens of :meth:`scorer`'s two messages, counted from their parts (the content's count is
        the one the audit made of the unit)."""
        return _counted(self.scorer_system), count_joined(*_filled(self.scorer_user, content=content))


@lru_cache(maxsize=64)
def _template(text: str) -> tuple[tuple[str, str | None, str, str | None], ...]:
    """A user template's literal pieces and placeholders (:meth:`string.Formatter.parse`), parsed once."""
    return tuple((literal, name, spec or "", conversion) for literal, name, spec, conversion in string.Formatter().parse(text))


@lru_cache(maxsize=64)
def _counted(system: str) -> int:
    """A system prompt's o200k count, made once per text: every request of a role sends the same one."""
    return count_joined([system])


_FORMATTER = string.Formatter()


def _filled(
    template: str, known: Mapping[str, Sequence[int | None]] | None = None, **fields: str | Sequence[str]
) -> tuple[list[str], list[int | None]]:
    """``template`` filled with ``fields``, as the parts that join to ``template.format(**fields)``, and each
    part's count where ``known`` gives it (by field: the counts of that field's parts), else ``None``.

    A field given as a sequence of parts stays in those parts (a context's snippets); one with a
    conversion or a format spec is formatted whole, as :meth:`str.format` does it.
    """
    parts: list[str] = []
    counts: list[int | None] = []
    for literal, name, spec, conversion in _template(template):
        if literal:
            parts.append(literal)
            counts.append(None)
        if name is None:
            continue
        value = fields[name]
        if spec or conversion:
            text = value if isinstance(value, str) else "".join(value)
            parts.append(_FORMATTER.format_field(_FORMATTER.convert_field(text, conversion), spec))
            counts.append(None)
        elif isinstance(value, str):
            parts.append(value)
            counts.append(None)
        else:
            parts.extend(value)
            given = known.get(name) if known is not None else None
            counts.extend(given if given is not None else [None] * len(value))
    return parts, counts


_VERDICT = re.compile(r"^\W*(CORRECT|INCORRECT)\W*$", re.IGNORECASE)
_SCORE = re.compile(r"^[^\d-]*?(10|[1-9])(?!\d)")


def parse_verdict(reply: str) -> bool | None:
    """``True`` for CORRECT, ``False`` for INCORRECT, ``None`` for anything else.

    The verdict is the reply's one word, or the ``verdict`` field of a reply
    that is a JSON object holding that field alone (a structured reply,
    :data:`VERDICT_SCHEMA`).
    """
    text = reply.strip()
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except (ValueError, RecursionError):
            return None
        if not isinstance(found, dict) or set(found) != {"verdict"} or not isinstance(found["verdict"], str):
            return None
        text = found["verdict"].strip()
    match = _VERDICT.match(text)
    if match is None:
        return None
    return match.group(1).upper() == "CORRECT"


def parse_score(reply: str) -> int | None:
    """The 1-10 integer of a scorer reply, ``None`` when there is none."""
    match = _SCORE.match(reply.strip())
    return int(match.group(1)) if match else None


# -- the derived memory systems' writers (memory/derived.py: ModelSummary, ModelFacts) ------------------

SUMMARY_MAX_TOKENS = 400
FACTS_MAX_TOKENS = 200
#: Between two turns of a session in the summary request (a turn's text may hold blank lines).
TURN_SEPARATOR = "\n---\n"
SUMMARY_SYSTEM = (
    "You write the long-term memory of an assistant that chats with one user over many sessions. "
    "A session has just ended; you get its turns. Write a short summary of it in plain sentences that "
    "keeps every detail someone might ask about later: who did what, names, numbers, amounts, dates "
    "and times, places, things the user owns, likes, plans or has decided. Drop greetings, thanks and "
    "general advice that says nothing about the user. Reply with the summary alone."
)
SUMMARY_USER = "Session date: {date}\nTurns ({count}), each as speaker: text, separated by ---:\n\n{turns}\n\nSummary:"
FACTS_SYSTEM = (
    "You keep notes about the people in a chat. You get one message. Write down each fact in it that is "
    "worth remembering later about its speaker or the people they mention (names, numbers, dates, places, "
    "possessions, events, preferences, plans), one fact per line, each a short sentence that names who "
    "it is about. Keep numbers and names exactly as written. If the message holds no such fact, reply NONE."
)
FACTS_USER = "Date: {date}\n{role}: {content}\n\nFacts, one per line:"
_LIST_MARK = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s*")


def summary_request(date: str, turns: list[tuple[str, str]]) -> ChatRequest:
    """The request for one closed session's summary: its date and its turns as (speaker, text)."""
    text = TURN_SEPARATOR.join(f"{speaker}: {content}" for speaker, content in turns)
    user = SUMMARY_USER.format(date=date, count=len(turns), turns=text)
    return ChatRequest((("system", SUMMARY_SYSTEM), ("user", user)), SUMMARY_MAX_TOKENS)


def facts_request(date: str, role: str, content: str) -> ChatRequest:
    """The request for the facts of one turn."""
    user = FACTS_USER.format(date=date, role=role, content=content)
    return ChatRequest((("system", FACTS_SYSTEM), ("user", user)), FACTS_MAX_TOKENS)


def parse_facts(reply: str) -> list[str]:
    """The facts of a facts reply: one per non-empty line, list marks removed; ``NONE`` (alone) is none."""
    if reply.strip().strip(".").upper() == "NONE":
        return []
    out = []
    for line in reply.splitlines():
        fact = _LIST_MARK.sub("", line).strip()
        if fact and fact.strip(".").upper() != "NONE":
            out.append(fact)
    return out
