"""graphiti's model calls answered by rule: what a fake writer says to each of graphiti's prompts.

graphiti (graphiti-core 0.31) asks its model for JSON of a fixed schema per
prompt (``response_format`` json_schema, the schema named after graphiti's
pydantic model). :func:`graphiti_answer` answers the five an episode needs,
deterministically and from the request's own text alone (never from gold),
so that graphiti runs in CI with no model:

- ``ExtractedEntities`` (entities of the CURRENT MESSAGE): the speaker (the
  part before ``": "``), then one entity per statement of the message (a
  sentence of four words or more that asks nothing; the first
  :data:`MAX_STATEMENTS`): its *key*, the first capitalised word after the
  sentence's first (not ``I``, not the speaker), else its longest word of
  five letters or more.
- ``ExtractedEdges`` (facts between the ENTITIES): one per statement whose
  key is an entity: speaker -> key, ``TALKS_ABOUT``, the fact
  ``"Speaker: sentence"``, no dates (graphiti then asks for them).
- ``EdgeTimestamps`` (when a fact became true): ``valid_at`` is the prompt's
  REFERENCE TIME, ``invalid_at`` none.
- ``NodeResolutions`` (which new entity is an existing one): the existing
  entity of the same name (case aside), else none.
- ``EdgeDuplicate`` (which existing facts the NEW FACT repeats or
  contradicts): a duplicate says the same sentence; a contradiction is
  another fact of the same speaker that shares a word of seven letters or
  more with it (``Ines: I moved my pottery class to Wednesdays`` contradicts
  ``Ines: I signed up for the pottery class``).
- ``SummarizedEntities``, ``EntitySummary``: no new summary (graphiti keeps
  the facts it appended itself).

Any other schema is not graphiti's: :func:`graphiti_answer` returns ``None``.
:func:`register` makes each answer the fake writer's shape for its schema
(:func:`~pytest_restore.models.fake_writer.register_shape`; graphiti's
adapter calls it when graphiti is first imported), so
``--restore-writer-model fake`` answers graphiti through the run's gateway.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_restore.models.fake_writer import WriterAsk, python_literal, register_shape

#: The statements of one message that become entities and facts (a long turn would otherwise cost a
#: timestamp call per sentence).
MAX_STATEMENTS = 2
SENTENCE = re.compile(r"[^.!?]+[.!?]?")
WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
#: A word long enough to say what a fact is about (``should``, ``really`` are not).
LONG_WORD = re.compile(r"[A-Za-z]{7,}")
#: The relation every fact is given.
RELATION = "TALKS_ABOUT"


def block(text: str, tag: str) -> str | None:
    """The text between ``<tag>`` and ``</tag>`` in ``text`` (``None``: no such block)."""
    match = re.search(rf"<{re.escape(tag)}>\n?(.*?)\n?</{re.escape(tag)}>", text, re.DOTALL)
    return match.group(1).strip() if match else None


def speaker_and_text(message: str) -> tuple[str, str]:
    """A message ``"Speaker: text"`` split in two (``"user"`` speaks a message that names no one)."""
    speaker, colon, text = message.strip().partition(": ")
    if not colon or not speaker or len(speaker.split()) > 3:
        return "user", message.strip()
    return speaker, text


def statements(text: str) -> list[str]:
    """The sentences of ``text`` that state something: four words or more, no question (the first few)."""
    found = [s.strip() for s in SENTENCE.findall(text)]
    return [s for s in found if s and not s.endswith("?") and len(s.split()) >= 4][:MAX_STATEMENTS]


def key_of(sentence: str, speaker: str) -> str | None:
    """What a statement is about: its first capitalised word after the first (not ``I``, not the speaker),
    else its longest word of five letters or more (the first of the longest)."""
    words: list[str] = WORD.findall(sentence)
    for word in words[1:]:
        if word[0].isupper() and word not in ("I", speaker) and not word.startswith("I'"):
            return word
    long = [w for w in words if len(w) >= 5 and w != speaker]
    return max(long, key=len) if long else None


def _user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages if m.get("role") != "system")


def entities(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``ExtractedEntities``: the speaker, then each statement's key."""
    current = block(_user_text(messages), "CURRENT MESSAGE") or ""
    speaker, text = speaker_and_text(current)
    names = [speaker]
    for sentence in statements(text):
        key = key_of(sentence, speaker)
        if key is not None and key not in names:
            names.append(key)
    return {"extracted_entities": [{"name": n, "entity_type_id": 0, "episode_indices": [0]} for n in names]}


def edges(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``ExtractedEdges``: speaker -> key for each statement whose key is among the ENTITIES."""
    text = _user_text(messages)
    speaker, said = speaker_and_text(block(text, "CURRENT_MESSAGE") or "")
    listed = {str(e.get("name")) for e in json.loads(block(text, "ENTITIES") or "[]")}
    out = []
    for sentence in statements(said):
        key = key_of(sentence, speaker)
        if key is not None and key in listed and speaker in listed:
            out.append({
                "source_entity_name": speaker, "target_entity_name": key, "relation_type": RELATION,
                "fact": f"{speaker}: {sentence}", "valid_at": None, "invalid_at": None, "episode_indices": [0],
            })
    return {"edges": out}


def timestamps(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``EdgeTimestamps``: the fact became true at the prompt's REFERENCE TIME."""
    when = block(_user_text(messages), "REFERENCE TIME")
    return {"valid_at": when.replace("+00:00", "Z") if when else None, "invalid_at": None}


def node_resolutions(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``NodeResolutions``: each new entity is the existing one of the same name, if any."""
    text = _user_text(messages)
    new = json.loads(block(text, "ENTITIES") or "[]")
    existing = json.loads(block(text, "EXISTING ENTITIES") or "[]")
    by_name = {str(e.get("name", "")).casefold(): int(e["candidate_id"]) for e in existing if "candidate_id" in e}
    return {"entity_resolutions": [
        {"id": int(e["id"]), "name": str(e["name"]), "duplicate_candidate_id": by_name.get(str(e["name"]).casefold(), -1)}
        for e in new
    ]}


def _facts(listing: str | None) -> list[tuple[int, str]]:
    """graphiti's fact lists (a Python literal of ``{"idx", "fact"}`` dicts) as (idx, fact)."""
    found = python_literal(listing) if listing else []
    return [(int(f["idx"]), str(f["fact"])) for f in found]


def _said(fact: str) -> tuple[str, str]:
    speaker, _, sentence = fact.partition(": ")
    return speaker, sentence.strip().casefold()


def edge_duplicates(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``EdgeDuplicate``: existing facts saying the same sentence; facts of the same speaker sharing a long word."""
    text = _user_text(messages)
    existing, candidates = _facts(block(text, "EXISTING FACTS")), _facts(block(text, "FACT INVALIDATION CANDIDATES"))
    speaker, sentence = _said(block(text, "NEW FACT") or "")
    words = {w.casefold() for w in LONG_WORD.findall(sentence)}
    duplicates = [i for i, fact in existing if _said(fact) == (speaker, sentence)]
    contradicted = [
        i for i, fact in existing + candidates
        if i not in duplicates and _said(fact)[0] == speaker and _said(fact)[1] != sentence
        and words & {w.casefold() for w in LONG_WORD.findall(_said(fact)[1])}
    ]
    return {"duplicate_facts": duplicates, "contradicted_facts": contradicted}


#: graphiti's schema names and how each is answered.
SHAPES: dict[str, Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]] = {
    "ExtractedEntities": entities,
    "ExtractedEdges": edges,
    "EdgeTimestamps": timestamps,
    "NodeResolutions": node_resolutions,
    "EdgeDuplicate": edge_duplicates,
    "SummarizedEntities": lambda _: {"summaries": []},
    "EntitySummary": lambda _: {"summary": ""},
}


def graphiti_answer(schema_name: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The answer to one of graphiti's requests, by the name of the schema it asks for (``None``: not graphiti's)."""
    shape = SHAPES.get(schema_name)
    return None if shape is None else shape(messages)


def register() -> None:
    """Register each answer as the fake writer's shape for its schema (graphiti's adapter does, at import)."""
    for name, shape in SHAPES.items():
        register_shape(name, _from_messages(shape), owner="graphiti")


def _from_messages(shape: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]]) -> Callable[[WriterAsk], dict[str, Any]]:
    """A shape answering from the request's messages, as the fake writer reads a request."""

    def answer(ask: WriterAsk) -> dict[str, Any]:
        return shape(ask.messages)

    return answer
