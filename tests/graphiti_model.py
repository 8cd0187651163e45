"""A model that answers graphiti's calls, for :class:`~openai_server.OpenAIServer`.

The loopback server hands a responder the messages only, so which of
graphiti's schemas a request asks for is read from its prompt's sections
(each of graphiti's prompts has its own); the answer is the package's
:func:`~pytest_restore.libraries.graphiti_shapes.graphiti_answer` for it.

Malformed answers, as a model gives them: an entity extraction for a message
longer than ``long`` characters comes back cut off in the middle of its JSON
(``answered["malformed"]``); one whose message holds ``FORMAT`` comes back as
JSON of another shape (``answered["wrong_shape"]``). What it answered is
counted by schema in ``answered``.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pytest_restore.libraries.graphiti_shapes import block, graphiti_answer

#: a message longer than this (characters) gets its entities cut off midway (``GraphitiModel(long=...)``)
LONG = 10_000


def schema_of(messages: list[dict[str, Any]]) -> str:
    """Which of graphiti's schemas a request asks for, by its prompt's sections."""
    text = "\n".join(str(m.get("content", "")) for m in messages)
    if "<NEW FACT>" in text:
        return "EdgeDuplicate"
    if "<EXISTING ENTITIES>" in text:
        return "NodeResolutions"
    if "<CURRENT MESSAGE>" in text and "<ENTITY TYPES>" in text:
        return "ExtractedEntities"
    if "<CURRENT_MESSAGE>" in text and "<ENTITIES>" in text:
        return "ExtractedEdges"
    if "<FACT>" in text and "<REFERENCE TIME>" in text:
        return "EdgeTimestamps"
    if "<ENTITIES>" in text and "summar" in text.lower():
        return "SummarizedEntities"
    raise ValueError(f"not a call graphiti makes: {text[:80]!r}")


class GraphitiModel:
    """The responder: graphiti's calls answered by the package's rules (module docstring)."""

    def __init__(self, long: int = LONG) -> None:
        self.long = long
        self.answered: Counter[str] = Counter()

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        schema = schema_of(messages)
        answer = graphiti_answer(schema, messages)
        assert answer is not None
        if schema == "ExtractedEntities":
            current = block("\n".join(str(m.get("content", "")) for m in messages), "CURRENT MESSAGE") or ""
            if len(current) > self.long:
                self.answered["malformed"] += 1
                return json.dumps(answer)[:25]
            if "FORMAT" in current:
                self.answered["wrong_shape"] += 1
                return json.dumps({"entities": answer["extracted_entities"]})
        self.answered[schema] += 1
        return json.dumps(answer)
