"""The model gateway: OpenAI's protocol on 127.0.0.1 over the managed model layer, and the fake writer behind it.

A library's own client (the real ``openai`` package here) talks to the
gateway; upstream is the fake writer, or a managed model at the project's
loopback server (:class:`~openai_server.OpenAIServer`), whose request log
shows what went upstream.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from net_guard import BlockedConnection, net_guard
from openai_server import OpenAIServer

from pytest_restore.data.tokens import count_tokens, shipped_encoding
from pytest_restore.models.anthropic_messages import translated_reply, translated_request
from pytest_restore.models.base import ChatRequest, ReplyFormat, read_wire_reply
from pytest_restore.models.cache import request_key
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake_writer import (
    SHAPES,
    FakeWriter,
    WriterAsk,
    python_literal,
    register_shape,
    schema_instance,
)
from pytest_restore.models.gateway import Gateway, chat_request_of
from pytest_restore.models.openai_chat import OpenAIChatModel, OpenAIEmbedder
from pytest_restore.registry import Registry

openai = pytest.importorskip("openai")

#: A schema as pydantic emits it for nested models: ``$defs``, ``$ref``, an enum, an optional field.
FACTS_SCHEMA: dict[str, Any] = {
    "$defs": {
        "Kind": {"enum": ["event", "preference"], "type": "string"},
        "Fact": {
            "properties": {
                "text": {"type": "string"},
                "kind": {"$ref": "#/$defs/Kind"},
                "when": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
                "sources": {"items": {"type": "integer"}, "type": "array"},
            },
            "required": ["text", "kind", "when", "sources"],
            "type": "object",
        },
    },
    "properties": {"facts": {"items": {"$ref": "#/$defs/Fact"}, "type": "array"}},
    "required": ["facts"],
    "type": "object",
}
TOOLS = [
    {"type": "function", "function": {"name": "Memory", "parameters": {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}}},
    {"type": "function", "function": {"name": "RemoveDoc", "parameters": {"type": "object", "properties": {"json_doc_id": {"type": "string"}}, "required": ["json_doc_id"]}}},
]
TURN = "Caroline went to the LGBTQ support group on May 7. She found it very powerful. Melanie painted a lake."


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with Gateway(FakeWriter(), FakeEmbedder(), chat_name="fake", embedding_name="fake") as running:
        yield running


def client(gateway: Gateway, **options: Any) -> Any:
    return openai.OpenAI(base_url=gateway.base_url, api_key=gateway.token, max_retries=0, **options)


def post(url: str, body: Any, token: str | None) -> tuple[int, dict[str, Any], dict[str, str]]:
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read()), dict(reply.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


# -- the protocol ---------------------------------------------------------------------


def test_a_request_without_the_runs_token_is_refused_401_in_openais_shape(gateway: Gateway) -> None:
    url = f"{gateway.base_url}/chat/completions"
    body = {"model": "fake", "messages": [{"role": "user", "content": "hi"}]}
    for token in (None, "sk-wrong", gateway.token[:-1]):
        status, payload, _ = post(url, body, token)
        assert status == 401 and payload["error"]["code"] == "invalid_api_key"
        assert gateway.token not in json.dumps(payload)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.base_url, api_key="nope", max_retries=0).models.list()
    assert gateway.token not in repr(gateway) and gateway.base_url.startswith("http://127.0.0.1:")


def test_models_lists_the_names_it_answers_to(gateway: Gateway) -> None:
    assert [m.id for m in client(gateway).models.list().data] == ["fake"]


def test_a_json_schema_reply_is_an_instance_of_the_schema_made_of_the_requests_own_text(gateway: Gateway) -> None:
    reply = client(gateway).chat.completions.create(
        model="fake", messages=[{"role": "system", "content": "Extract facts."}, {"role": "user", "content": TURN}],
        response_format={"type": "json_schema", "json_schema": {"name": "Facts", "schema": FACTS_SCHEMA, "strict": True}},
        temperature=0, max_completion_tokens=500,
    )
    facts = json.loads(reply.choices[0].message.content)["facts"]
    assert len(facts) == 2
    for fact in facts:
        assert fact["kind"] == "event" and fact["when"].startswith("2023-") and fact["sources"] == [0, 0]
        assert fact["text"] in TURN  # a sentence of the user's own message: label-free
    pydantic = pytest.importorskip("pydantic")

    class Fact(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        text: str
        kind: str
        when: str | None
        sources: list[int]

    class Facts(pydantic.BaseModel):  # type: ignore[misc,name-defined]
        facts: list[Fact]

    Facts.model_validate_json(reply.choices[0].message.content)


def test_tools_are_answered_with_a_call_of_the_chosen_tool_and_tool_messages_are_taken(gateway: Gateway) -> None:
    c = client(gateway)
    messages: list[dict[str, Any]] = [{"role": "user", "content": TURN}]
    reply = c.chat.completions.create(
        model="fake", messages=messages, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "RemoveDoc"}},
    )
    call = reply.choices[0].message.tool_calls[0]
    assert reply.choices[0].finish_reason == "tool_calls" and call.function.name == "RemoveDoc"
    assert set(json.loads(call.function.arguments)) == {"json_doc_id"}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "removed"},
    ]
    again = c.chat.completions.create(model="fake", messages=messages, tools=TOOLS, tool_choice="required")
    assert again.choices[0].message.tool_calls[0].function.name == "Memory"  # none named: the first tool
    plain = c.chat.completions.create(model="fake", messages=messages)
    assert plain.choices[0].message.content == "Caroline went to the LGBTQ support group on May 7. She found it very powerful."
    assert plain.choices[0].message.tool_calls is None


def test_embeddings_as_floats_and_as_base64_are_the_fake_embedders(gateway: Gateway) -> None:
    c = client(gateway)
    expected = FakeEmbedder().embed(["a lake at dawn", "the support group"])
    by_default = c.embeddings.create(model="fake", input=["a lake at dawn", "the support group"])  # base64 on the wire
    floats = c.embeddings.create(model="fake", input="a lake at dawn", encoding_format="float")
    assert np.allclose([d.embedding for d in by_default.data], expected, atol=1e-6)
    assert np.allclose(floats.data[0].embedding, expected[0], atol=1e-6)
    status, payload, _ = post(f"{gateway.base_url}/embeddings", {"model": "fake", "input": "x", "encoding_format": "base64"}, gateway.token)
    assert status == 200 and len(base64.b64decode(payload["data"][0]["embedding"])) == 4 * len(expected[0])


def test_embeddings_of_token_ids_are_those_of_the_text_they_encode(gateway: Gateway) -> None:
    """Token ids, one list or a list of lists, as OpenAI takes them (and langchain sends them with its token
    check on): decoded with the encoding tiktoken names for the request's model (cl100k_base for a name it
    does not know), each embedded as its text, through the real ``openai`` client."""
    c = client(gateway)
    texts = ["a lake at dawn", "the support group"]
    expected = FakeEmbedder().embed(texts)
    cl100k, o200k = shipped_encoding("cl100k_base"), shipped_encoding("o200k_base")
    ids = [cl100k.encode(t) for t in texts]
    many = c.embeddings.create(model="fake", input=ids, encoding_format="float")
    one = c.embeddings.create(model="fake", input=ids[0])  # one list of ints: one input
    gpt4o = c.embeddings.create(model="gpt-4o", input=[o200k.encode(texts[1])], encoding_format="float")
    assert np.allclose([d.embedding for d in many.data], expected, atol=1e-6) and len(one.data) == 1
    assert np.allclose(one.data[0].embedding, expected[0], atol=1e-6)
    assert np.allclose(gpt4o.data[0].embedding, expected[1], atol=1e-6)
    assert many.usage.prompt_tokens == sum(len(i) for i in ids)
    with pytest.raises(openai.BadRequestError, match="token id 10000000 is not one of cl100k_base's"):
        c.embeddings.create(model="fake", input=[[10**7]])


def test_a_server_refusing_a_librarys_response_format_says_what_a_library_user_can_do() -> None:
    """The first refusal of a structured reply stops the model in one line: for the judge's verdict it names
    --restore-judge-format; for a memory library's own format (through the gateway) it names the writer model
    and the policies, since the judge's option changes nothing there."""
    from pytest_restore.models.openai_chat import OpenAIChatModel
    from pytest_restore.models.prompts import PromptSet

    api = OpenAIChatModel(model="gemma-3-270m", base_url="http://127.0.0.1:9/v1").api
    said = "response_format of type json_schema is not supported"
    library = {"type": "json_schema", "json_schema": {"name": "ExtractedEntities", "strict": True, "schema": {"type": "object"}}}
    line = api.refused_shape(400, said, {"response_format": library})
    assert line is not None and "a memory library asked for through the run's gateway" in line
    assert "--restore-writer-model" in line and "--restore-policies" in line and "--restore-judge-format" not in line
    judge = PromptSet(judge_format="json-schema").judge(question="q", answer="a", prediction="p")
    verdict = api.refused_shape(400, said, api.chat_request(judge)[1])
    assert verdict is not None and "--restore-judge-format json-schema asks for" in verdict


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/chat/completions", b"{not json", 400),
        ("/chat/completions", {"model": "fake", "messages": []}, 400),
        ("/chat/completions", {"model": "fake", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}}, 400),
        ("/embeddings", {"model": "fake", "input": [1, "two", 3]}, 400),
        ("/embeddings", {"model": "fake", "input": [[1, 2], []]}, 400),
        ("/embeddings", {"model": "fake", "input": [True, False]}, 400),
        ("/embeddings", {"model": "fake", "input": [-1]}, 400),
        ("/embeddings", {"model": "fake", "input": "x", "dimensions": 3}, 400),
        ("/completions", {"model": "fake", "prompt": "x"}, 404),
    ],
)
def test_a_bad_request_is_an_openai_shaped_error(gateway: Gateway, path: str, body: Any, status: int) -> None:
    got, payload, _ = post(gateway.base_url + path, body, gateway.token)
    assert got == status and isinstance(payload["error"]["message"], str) and payload["error"]["message"]


# -- the fake writer ------------------------------------------------------------------


def test_a_registered_shape_answers_its_schema_and_the_malformed_mode_breaks_answers() -> None:
    shape = register_shape("Facts", lambda ask: {"facts": [{"text": ask.last_user, "kind": "preference", "when": None, "sources": [0]}]}, owner="test")
    try:
        fmt = {"type": "json_schema", "json_schema": {"name": "Facts", "schema": FACTS_SCHEMA}}
        request = chat_request_of({"messages": [{"role": "user", "content": TURN}], "response_format": fmt})
        content, _ = read_wire_reply(FakeWriter().reply(request))
        assert json.loads(content or "")["facts"][0]["kind"] == "preference"
    finally:
        SHAPES.remove(shape)
    broken = FakeWriter(malformed=1.0)
    answers = []
    for i in range(8):
        request = chat_request_of({"messages": [{"role": "user", "content": f"{TURN} {i}"}], "response_format": fmt})
        content, _ = read_wire_reply(broken.reply(request))
        try:
            answers.append("wrong shape" if "facts" not in json.loads(content or "") else "ok")
        except ValueError:
            answers.append("not JSON")
    assert set(answers) == {"wrong shape", "not JSON"} and broken.answered == {"malformed": 8}


def test_schema_instances_follow_required_enums_arrays_and_refs() -> None:
    ask = WriterAsk.of(ChatRequest((("user", "One. Two. Three."),), 100))
    value = schema_instance({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}, "minItems": 3}, "b": {"type": "integer", "minimum": 2}}, "required": ["a"]}, ask)
    assert value == {"a": ["One.", "Two.", "Three."]}


# -- the cache key ----------------------------------------------------------------------


def test_the_cache_key_of_an_audit_request_is_unchanged_and_a_gateways_covers_its_tools() -> None:
    request = ChatRequest((("system", "s"), ("user", "u")), 64, 0.0, ReplyFormat("v", '{"type":"object"}'))
    canonical = json.dumps(
        {"schema": 1, "model": "m", "messages": [["system", "s"], ["user", "u"]], "max_tokens": 64, "temperature": 0.0,
         "reply_format": {"name": "v", "schema": '{"type":"object"}', "style": "json-schema"}},
        sort_keys=True, separators=(",", ":"), ensure_ascii=False,
    )
    assert request_key("m", request) == hashlib.sha256(canonical.encode()).hexdigest()
    base = {"messages": [{"role": "user", "content": "u"}], "max_tokens": 64}
    keys = {
        request_key("m", chat_request_of({**base, **extra}))
        for extra in ({}, {"tools": TOOLS}, {"tools": TOOLS, "tool_choice": "required"}, {"tools": TOOLS[:1]},
                      {"response_format": {"type": "json_object"}})
    }
    assert len(keys) == 5


# -- upstream: the managed layer --------------------------------------------------------


def test_a_rerun_on_the_same_cache_sends_nothing_upstream(tmp_path: Path) -> None:
    texts = ["a lake", "a group"]

    def run_once(server: OpenAIServer) -> Gateway:
        chat = OpenAIChatModel(model="gpt-4o-mini", base_url=server.base_url, cache=_cache(tmp_path), max_tries=1)
        embedder = OpenAIEmbedder(model="text-embedding-3-small", base_url=server.base_url, max_tries=1)
        with Gateway(chat, embedder, cache_dir=tmp_path) as gw:
            c = client(gw)
            c.chat.completions.create(model="x", messages=[{"role": "user", "content": TURN}], tools=TOOLS)
            json_ask = [{"role": "system", "content": "Reply in JSON."}, {"role": "user", "content": TURN}]
            c.chat.completions.create(model="x", messages=json_ask, response_format={"type": "json_object"})
            assert len(c.embeddings.create(model="x", input=texts).data[1].embedding) == 1536
            assert gw.usage.cached + gw.usage.sent == 2
        # what the texts cost is counted whoever paid it (a library's store); what went upstream, in its usage
        assert gw.tokens["embedding"] == sum(count_tokens(texts)) > 0
        return gw

    with OpenAIServer() as first:
        assert run_once(first).usage.embedded_tokens == sum(count_tokens(texts))
        assert len(first.log) == 3  # two chat calls, one embeddings request
    with OpenAIServer() as second:
        assert run_once(second).usage.embedded_tokens == 0
        assert second.log == []  # the rerun: everything from the response cache and the vectors on disk


def _cache(path: Path) -> Any:
    from pytest_restore.models.cache import ResponseCache

    return ResponseCache(path / "responses")


def test_a_server_that_never_answers_ends_within_the_deadline(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        server.mode = "hang"
        chat = OpenAIChatModel(model="gpt-4o-mini", base_url=server.base_url, max_tries=1, timeout=0.5)
        with Gateway(chat, deadline=3.0) as gw:
            started = time.monotonic()
            with pytest.raises(openai.APIStatusError) as caught:
                client(gw, timeout=30).chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
            assert time.monotonic() - started < 10
            assert caught.value.status_code in (502, 504)
            assert caught.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("mode", ["500-echo-key", "echo-key", "401-echo-key"])
def test_no_key_reaches_the_library_from_a_server_echoing_it(mode: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    key = "sk-proj-Abc123SecretKeyValue987xyz"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with OpenAIServer() as server:
        server.mode = mode
        chat = OpenAIChatModel(model="gpt-4o-mini", base_url=server.base_url, max_tries=1)
        embedder = OpenAIEmbedder(model="text-embedding-3-small", base_url=server.base_url, max_tries=1)
        with Gateway(chat, embedder, dimensions=1536, deadline=20) as gw:
            seen = []
            for path, body in (("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), ("/embeddings", {"input": "hi"})):
                status, payload, _ = post(gw.base_url + path, {"model": "x", **body}, gw.token)
                seen.append(json.dumps(payload))
            assert status in (200, 401, 500, 502)
    text = "\n".join(seen) + caplog.text
    assert key not in text and key[:16] not in text and gw.token not in text


def test_anthropic_gets_tools_tool_results_and_a_schema_as_its_own_tool_use() -> None:
    request = chat_request_of({
        "messages": [
            {"role": "system", "content": "Keep memories."},
            {"role": "user", "content": TURN},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "Memory", "arguments": "{\"content\": \"x\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "done"},
        ],
        "tools": TOOLS, "tool_choice": "required",
    })
    body = translated_request(request)
    assert body["system"] == "Keep memories." and body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["Memory", "RemoveDoc"] and "input_schema" in body["tools"][0]
    assert body["messages"][1]["content"][0] == {"type": "tool_use", "id": "c1", "name": "Memory", "input": {"content": "x"}}
    assert body["messages"][2]["content"][0]["type"] == "tool_result"
    content, calls = read_wire_reply(translated_reply([{"type": "tool_use", "id": "t", "name": "Memory", "input": {"content": "y"}}], request))
    assert content is None and calls[0]["function"] == {"name": "Memory", "arguments": "{\"content\":\"y\"}"}
    structured = chat_request_of({"messages": [{"role": "user", "content": "u"}], "response_format": {"type": "json_schema", "json_schema": {"name": "Facts", "schema": FACTS_SCHEMA}}})
    body = translated_request(structured)
    assert body["tool_choice"] == {"type": "tool", "name": "Facts"} and body["tools"][0]["input_schema"] == FACTS_SCHEMA
    content, calls = read_wire_reply(translated_reply([{"type": "tool_use", "id": "t", "name": "Facts", "input": {"facts": []}}], structured))
    assert json.loads(content or "") == {"facts": []} and calls == []


# -- lazy registration ------------------------------------------------------------------


def test_a_lazy_registration_is_made_only_when_looked_up_and_yields_to_a_hand_registered_one() -> None:
    class Item:
        def __init__(self, name: str) -> None:
            self.name = name

    class Items(Registry[Item]):
        kind, item_type, entry_point_group = "item", Item, "none"

    made: list[str] = []
    items = Items()
    items.register_lazy("lib", lambda: made.append("lib") or Item("lib"))  # type: ignore[func-returns-value]
    assert "lib" in items and list(items) == ["lib"] and made == []
    assert items["lib"].name == "lib" and items["lib"] is items["lib"] and made == ["lib"]
    other = Items()
    other.register_lazy("lib", lambda: pytest.fail("made"))
    mine = Item("lib")
    other.register(mine)
    assert other["lib"] is mine


# -- nothing leaves the machine ------------------------------------------------------------


def test_the_net_guard_catches_a_library_phoning_home_even_when_it_swallows_the_error(gateway: Gateway) -> None:
    """The guard every adapter's test runs under: the gateway's connections pass; a telemetry call from a
    library's thread (its error swallowed, as telemetry clients do) fails the block, naming the address."""
    import socket
    import threading

    def telemetry() -> None:  # what posthog and friends do: send from a thread, ignore the failure
        for target in (("93.184.216.34", 443), ("us.i.posthog.com", 443)):
            try:
                socket.create_connection(target, timeout=1).close()
            except OSError:
                pass

    phoned = r"attempted: connect 93\.184\.216\.34:443, connect us\.i\.posthog\.com:443$"
    with pytest.raises(AssertionError, match=phoned), net_guard(gateway.port):
        client(gateway).models.list()  # allowed: the gateway
        thread = threading.Thread(target=telemetry)
        thread.start()
        thread.join()
    with net_guard(gateway.port) as guard:
        with pytest.raises(BlockedConnection, match="connect 127.0.0.1:9 is not allowed"):
            socket.create_connection(("127.0.0.1", 9), timeout=1)  # loopback, but not the gateway
        guard.blocked.clear()
    assert socket.create_connection.__module__ == "socket"  # put back


def test_the_libraries_python_literals_are_parsed_one_thread_at_a_time() -> None:
    """``python_literal`` parses under one lock: CPython before 3.11.9 fails two threads parsing at once
    (gh-106905, seen as a 500 from the gateway answering graphiti), so a parse waits for the one before."""
    from pytest_restore.models import fake_writer

    assert python_literal("[{'idx': 0, 'fact': 'A: hi'}]") == [{"idx": 0, "fact": "A: hi"}]
    parsed: list[object] = []
    with fake_writer._PARSING:  # another thread's parse in progress
        waiting = threading.Thread(target=lambda: parsed.append(python_literal("[1, 2]")))
        waiting.start()
        waiting.join(0.2)
        assert waiting.is_alive() and parsed == []
    waiting.join(5)
    assert parsed == [[1, 2]]
