"""The fake writer: a deterministic, offline model that answers a library's request in the shape it carries.

A memory library asks its model for JSON of a schema (``response_format``
``json_schema``), for a call of one of its tools (``tools``/``tool_choice``),
for a JSON object its prompt describes (``json_object``) or for free text.
:class:`FakeWriter` answers each in that shape, with no network and no
model, so every library adapter runs in CI through the gateway:

- **a schema**: an instance of it (required properties, enums, arrays,
  nested objects, ``$ref``/``$defs`` as pydantic emits them, ``anyOf``),
  its strings taken from the request's own messages (the sentences of the
  last user message, in turn);
- **tools**: a call of the tool ``tool_choice`` names (else the first), its
  arguments an instance of the tool's parameters schema;
- **free text**: the last user message's first sentences.

It is label-free: it reads the request and nothing else (a library's ingest
requests carry the conversation, never the question or its gold).

**Shapes.** What a generic instance cannot get right (a library that wants
its own ids echoed, or a ``json_object`` whose shape only its prompt says)
is answered by a registered :class:`WriterShape`: a match on the schema's
name, a tool's name or a test of the request, and a function that gives the
JSON value. Each adapter registers its own in its module
(:func:`register_shape`); the first that matches answers. A shape may answer a
tools request with several calls (:class:`ToolCalls`), as langmem's prompt asks.

**Malformed mode** (``FakeWriter(malformed=1.0)``, the writer model
``fake-malformed``): that share of the requests (chosen by a hash of the
request, so reproducibly) is answered with JSON cut off mid-way or JSON of
the wrong shape, so that each library's rejections are seen and counted.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.models.base import ChatRequest, ChatResult, canonical_json, wire_reply

#: How many items an array gets when its schema does not say (at most this, at least ``minItems``).
ARRAY_ITEMS = 2
#: The date-time a ``format: date-time`` string gets (no clock: the same request, the same answer).
FIXED_DATETIME = "2023-05-08T13:56:00Z"

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


@dataclass
class WriterAsk:
    """A request as the fake writer reads it: its messages, the schema or tools it asks an answer in."""

    request: ChatRequest
    #: the messages in OpenAI's form
    messages: list[dict[str, Any]]
    #: the ``json_schema`` format's name and schema (``None``: no schema asked)
    schema_name: str | None
    schema: dict[str, Any] | None
    #: ``json_object`` asked, with no schema
    json_object: bool
    #: the tools offered, by name -> parameters schema
    tools: dict[str, dict[str, Any]]
    #: the tool to call (``tool_choice``'s, else the first offered; ``None``: no tool)
    tool: str | None
    #: the sentences of the last user message (else of every message), the texts an answer is made of
    sentences: list[str] = field(default_factory=list)
    _next: int = 0
    #: the tool calls of a shape's :class:`ToolCalls` answer, each ``(name, arguments as JSON text)``
    calls: list[tuple[str, str]] = field(default_factory=list)

    @property
    def system(self) -> str:
        """The system messages' text."""
        return "\n".join(_text_of(m.get("content")) for m in self.messages if m.get("role") in ("system", "developer"))

    @property
    def last_user(self) -> str:
        """The last user message's text."""
        users = [_text_of(m.get("content")) for m in self.messages if m.get("role") == "user"]
        return users[-1] if users else ""

    def sentence(self) -> str:
        """The next sentence of the request (in turn, from the first again after the last)."""
        if not self.sentences:
            return "nothing"
        text = self.sentences[self._next % len(self.sentences)]
        self._next += 1
        return text

    @classmethod
    def of(cls, request: ChatRequest) -> WriterAsk:
        """Read ``request`` (a gateway's request with its wire extras, or a plain one)."""
        wire = request.wire_fields()
        messages = request.as_openai_messages()
        schema_name: str | None = None
        schema: dict[str, Any] | None = None
        json_object = False
        if request.reply_format is not None:
            schema_name, schema = request.reply_format.name, json.loads(request.reply_format.schema)
        found = wire.get("response_format")
        if isinstance(found, dict):
            if found.get("type") == "json_schema":
                spec = found.get("json_schema") or {}
                schema_name, schema = str(spec.get("name") or ""), dict(spec.get("schema") or {})
            elif found.get("type") == "json_object":
                json_object = True
                if isinstance(found.get("schema"), dict):
                    schema = dict(found["schema"])
        tools = {
            str(t["function"]["name"]): dict(t["function"].get("parameters") or {"type": "object"})
            for t in wire.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)
        }
        choice = wire.get("tool_choice")
        tool: str | None = None
        if tools and choice != "none":
            named = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
            tool = str(named) if named in tools else next(iter(tools))
        source = [_text_of(m.get("content")) for m in messages if m.get("role") == "user"][-1:] or [
            _text_of(m.get("content")) for m in messages
        ]
        sentences = [s.strip() for text in source for s in _SENTENCE.split(text) if s.strip()]
        return cls(request, messages, schema_name, schema, json_object, tools, tool, sentences)


class ToolCalls(list[tuple[str, Any]]):
    """A shape's answer of several tool calls, each ``(tool name, arguments)``: a library that takes calls of
    more than one of its tools in one reply (langmem's ``Memory``, ``PatchDoc`` and ``RemoveDoc``)."""


#: A shape's answer: the JSON value of the reply (a schema's instance; a tool's arguments; :class:`ToolCalls`).
ShapeAnswer = Callable[[WriterAsk], Any]


@dataclass(frozen=True)
class WriterShape:
    """An answer the fake writer gives to the requests it matches.

    ``match``: a schema's name or a tool's name (the one to be called), or a
    test of the request. ``answer`` gives the JSON value: the content of a
    structured reply, or the arguments of the tool call.
    """

    match: str | Callable[[WriterAsk], bool]
    answer: ShapeAnswer
    #: who registered it (an adapter's name), for messages
    owner: str = ""

    def matches(self, ask: WriterAsk) -> bool:
        """Whether this shape answers ``ask``."""
        if isinstance(self.match, str):
            return self.match in (ask.schema_name, ask.tool)
        return bool(self.match(ask))


#: The registered shapes, in order (:func:`register_shape`).
SHAPES: list[WriterShape] = []


#: CPython before 3.11.9 keeps the AST constructor's recursion depth in state shared by threads: two
#: threads parsing at once fail with "SystemError: AST constructor recursion depth mismatch" (gh-106905),
#: and the gateway answers a library's calls on several threads. One parse at a time.
_PARSING = threading.Lock()


def python_literal(text: str) -> Any:
    """``ast.literal_eval(text)``, one thread at a time: the libraries' prompts quote their lists and
    dicts as Python literals (``ValueError``/``SyntaxError`` as ``literal_eval`` raises them)."""
    with _PARSING:
        return ast.literal_eval(text)


def register_shape(match: str | Callable[[WriterAsk], bool], answer: ShapeAnswer, *, owner: str = "") -> WriterShape:
    """Register an answer for the requests ``match`` names (a schema's or tool's name, or a test); returns it.

    Called by an adapter's module at import (each library's prompts answered
    in a way that makes sense for it); registering the same ``match`` and
    ``owner`` again replaces the earlier shape.
    """
    shape = WriterShape(match, answer, owner)
    SHAPES[:] = [s for s in SHAPES if not (s.match == match and s.owner == owner)]
    SHAPES.append(shape)
    return shape


def schema_instance(schema: Mapping[str, Any], ask: WriterAsk, root: Mapping[str, Any] | None = None, depth: int = 0) -> Any:
    """An instance of ``schema`` (its ``$ref``s resolved against ``root``), strings from ``ask``'s sentences."""
    root = root if root is not None else schema
    if depth > 12:  # a recursive schema: stop with the smallest value
        return None
    if "$ref" in schema:
        return schema_instance(_resolve(str(schema["$ref"]), root), ask, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key) or [] if isinstance(o, Mapping) and o.get("type") != "null"]
        if options:
            return schema_instance(options[0], ask, root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            part = _resolve(str(part["$ref"]), root) if "$ref" in part else part
            merged.update(part)
        return schema_instance(merged, ask, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        properties = schema.get("properties") or {}
        names = schema.get("required", list(properties))
        return {name: schema_instance(properties.get(name, {}), ask, root, depth + 1) for name in names}
    if kind == "array":
        n = max(int(schema.get("minItems", 0)), min(int(schema.get("maxItems", ARRAY_ITEMS)), ARRAY_ITEMS, max(len(ask.sentences), 1)))
        return [schema_instance(schema.get("items") or {}, ask, root, depth + 1) for _ in range(n)]
    if kind == "string":
        if schema.get("format") == "date-time":
            return FIXED_DATETIME
        if schema.get("format") == "date":
            return FIXED_DATETIME[:10]
        return ask.sentence()
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return False
    return None


def _resolve(ref: str, root: Mapping[str, Any]) -> Mapping[str, Any]:
    """The schema a local ``$ref`` (``#/$defs/Name``) points at."""
    node: Any = root
    for part in ref.removeprefix("#/").split("/") if ref.startswith("#/") else []:
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node if isinstance(node, Mapping) else {}


def _draw(request: ChatRequest, salt: str) -> float:
    """A number in [0, 1) fixed by the request (which requests the malformed mode breaks)."""
    digest = hashlib.sha256((salt + (request.wire or "") + repr(request.messages)).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class FakeWriter:
    """A chat model (the ``ChatModel`` protocol) answering each request in its own shape (module docstring)."""

    def __init__(self, *, malformed: float = 0.0, shapes: Sequence[WriterShape] | None = None, name: str | None = None) -> None:
        """``malformed``: the share of requests answered malformed; ``shapes``: the shapes consulted
        (default: every registered one, :data:`SHAPES`, read at each call)."""
        self.malformed = malformed
        self._shapes = shapes
        self._name = name or ("fake-malformed" if malformed >= 1.0 else "fake")
        #: requests answered, by how (``schema``, ``tool``, ``json``, ``text``, ``shape``, ``malformed``)
        self.answered: dict[str, int] = {}

    @property
    def name(self) -> str:
        """``fake`` or ``fake-malformed``."""
        return self._name

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer every request, in order."""
        return [ChatResult(text=self.reply(request)) for request in requests]

    def _count(self, how: str) -> None:
        self.answered[how] = self.answered.get(how, 0) + 1

    def reply(self, request: ChatRequest) -> str:
        """The reply text: a gateway's request gets an assistant message (``base.wire_reply``), a plain one text."""
        ask = WriterAsk.of(request)
        content, call = self._answer(ask)
        if request.wire is None:
            return content if content is not None else canonical_json(call or {})
        if call is not None and ask.tool is not None:
            number = hashlib.sha256((request.wire or "").encode("utf-8")).hexdigest()[:12]
            calls = ask.calls or [(ask.tool, call)]
            return wire_reply(None, [
                {"id": f"call_{number}" + (f"_{i}" if i else ""), "type": "function", "function": {"name": name, "arguments": arguments}}
                for i, (name, arguments) in enumerate(calls)
            ])
        return wire_reply(content)

    def _answer(self, ask: WriterAsk) -> tuple[str | None, str | None]:
        """The reply's text, or the tool call's arguments (as JSON text)."""
        broken = self.malformed > 0 and _draw(ask.request, "malformed") < self.malformed
        shape = next((s for s in (self._shapes if self._shapes is not None else SHAPES) if s.matches(ask)), None)
        if shape is not None:
            value = shape.answer(ask)
            how = "shape"
        elif ask.tool is not None:
            value, how = schema_instance(ask.tools[ask.tool], ask), "tool"
        elif ask.schema is not None:
            value, how = schema_instance(ask.schema, ask), "schema"
        elif ask.json_object:
            value, how = {"text": " ".join(ask.sentences[:2])}, "json"
        else:
            value, how = " ".join(ask.sentences[:2]) or "nothing", "text"
        if isinstance(value, ToolCalls) and ask.tool is not None and value:
            # several calls: the first is what the malformed mode breaks (and the rest is lost with it)
            if not broken:
                ask.calls = [(name, canonical_json(args)) for name, args in value]
            ask.tool, value = value[0][0], value[0][1]
        if broken:
            self._count("malformed")
            text = canonical_json(value) if not isinstance(value, str) else value
            # half cut off mid-way (not JSON at all), half JSON of another shape
            wrong = canonical_json(["unexpected", text[:40]]) if _draw(ask.request, "how") < 0.5 else text[: max(1, len(text) // 2)]
            return (None, wrong) if ask.tool is not None else (wrong, None)
        self._count(how)
        text = value if isinstance(value, str) else canonical_json(value)
        return (None, text) if ask.tool is not None else (text, None)
