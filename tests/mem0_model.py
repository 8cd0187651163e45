"""A model that answers mem0's two calls in mem0's formats, for :class:`~openai_server.OpenAIServer`.

mem0 1.0 makes two chat calls per message: a *fact extraction* (its system
prompt, then ``Input:\\n<role>: <text>``) answered with ``{"facts": [...]}``,
and a *memory update* (one user message holding the memories it found near
the new facts and the facts themselves, both as Python list literals)
answered with ``{"memory": [{"id", "text", "event", "old_memory"}, ...]}``.
:class:`Mem0Model` reads those prompts as a model would and answers by rules
a test can predict, never by the audit's gold:

- **Extraction.** Each sentence of the message that states something (ends
  in no question mark, at least four words) is a fact, written
  ``Speaker: sentence`` (the speaker the message names, else ``User``).
  A message over :data:`LONG` characters gets an answer cut off in the
  middle of its JSON, as a model that ran out of tokens gives: mem0 cannot
  parse it.
  A message holding ``FORMAT`` gets well-formed JSON of the wrong shape
  (``{"fact": [...]}``): mem0 rejects that too.
- **Update.** A new fact that names the speaker of a memory found and
  shares a word of six letters or more with it *updates* that memory (its
  text becomes the new fact); one that says ``no longer`` *deletes* it
  instead; any other fact is *added*. Memories it does not touch are
  returned with ``NONE``, as the prompt asks.

What it answered is counted (``answered``, ``malformed``, ``wrong_shape``);
``Mem0Model(long=0)`` cuts off every extraction answer.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from typing import Any

#: a message longer than this (characters) is answered with JSON cut off midway
LONG = 85
SENTENCE = re.compile(r"[^.!?]+[.!?]?")
LONG_WORD = re.compile(r"[A-Za-z]{6,}")
#: mem0's update prompt: the memories found, then the new facts, each between triple backticks
BLOCKS = re.compile(r"```\n(.*?)\n\s*```", re.DOTALL)


class Mem0Model:
    """The responder: mem0's extraction and update calls answered by rule (module docstring)."""

    def __init__(self, long: int = LONG) -> None:
        #: a message longer than this gets an answer cut off midway (0: every message does)
        self.long = long
        self.answered: Counter[str] = Counter()

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        if messages[0]["role"] == "system" and str(messages[-1]["content"]).startswith("Input:"):
            return self.extract(str(messages[-1]["content"]).removeprefix("Input:\n"))
        text = str(messages[-1]["content"])
        if "new retrieved facts" in text:
            return self.update(text)
        raise ValueError(f"not a call mem0 makes: {text[:80]!r}")

    def extract(self, conversation: str) -> str:
        _, _, said = conversation.strip().partition(": ")
        speaker, colon, line = said.partition(": ")
        if not colon:
            speaker, line = "User", said
        facts = [
            f"{speaker}: {s.strip()}"
            for s in SENTENCE.findall(line)
            if not s.strip().endswith("?") and len(s.split()) >= 4
        ]
        if len(line) > self.long:
            self.answered["malformed"] += 1
            return '{"facts": ["' + (facts[0] if facts else line)[:20]
        if "FORMAT" in line:
            self.answered["wrong_shape"] += 1
            return json.dumps({"fact": facts})
        self.answered["facts"] += 1
        return json.dumps({"facts": facts})

    def update(self, prompt: str) -> str:
        blocks = BLOCKS.findall(prompt)
        old: list[dict[str, str]] = ast.literal_eval(blocks[0].strip()) if len(blocks) == 2 else []
        new: list[str] = ast.literal_eval(blocks[-1].strip())
        out: dict[str, dict[str, str]] = {m["id"]: {"id": m["id"], "text": m["text"], "event": "NONE"} for m in old}
        for i, fact in enumerate(new):
            speaker = fact.partition(": ")[0]
            words = {w.lower() for w in LONG_WORD.findall(fact.partition(": ")[2])}
            near = next(
                (
                    m
                    for m in old
                    if m["text"].partition(": ")[0] == speaker
                    and out[m["id"]]["event"] == "NONE"
                    and words & {w.lower() for w in LONG_WORD.findall(m["text"].partition(": ")[2])}
                ),
                None,
            )
            if near is None:
                out[f"new{i}"] = {"id": f"new{i}", "text": fact, "event": "ADD"}
            elif "no longer" in fact:
                out[near["id"]] = {"id": near["id"], "text": near["text"], "event": "DELETE"}
            else:
                out[near["id"]] = {"id": near["id"], "text": fact, "event": "UPDATE", "old_memory": near["text"]}
        self.answered["update"] += 1
        return json.dumps({"memory": list(out.values())})
