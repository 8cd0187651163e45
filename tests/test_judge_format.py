"""A structured verdict (``--restore-judge-format``): the request, the servers' rules, the cache, the refusals, the gate."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from grid_helpers import SMALLEST_GRID
from openai_server import OpenAIServer, fake_models_responder, response_format_error

from pytest_restore.audit.calibration import calibrate
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import load_dataset
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.batch import BatchItem
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.openai_chat import OpenAIChatModel
from pytest_restore.models.prompts import (
    JUDGE_JSON_SYSTEM,
    JUDGE_SYSTEM,
    VERDICT_SCHEMA,
    PromptSet,
    parse_verdict,
)
from pytest_restore.run.options import parse_args
from pytest_restore.run.plan import build_plan, default_registries
from pytest_restore.run.settings import SettingsError

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
#: The judge's question of every request below: the candidate is the reference, so the verdict is CORRECT.
ASKED = {"question": "Where did I park?", "answer": "Level 3", "prediction": "level 3"}


@pytest.fixture(autouse=True)
def _no_ambient_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(fake_models_responder([])) as running:
        yield running


def ask(server: OpenAIServer, model: str, request: ChatRequest, cache: ResponseCache | None = None) -> tuple[str | None, str | None]:
    """One request through the managed OpenAI model (one try): its text and its error."""
    client = OpenAIChatModel(model=model, base_url=server.base_url, max_tries=1, timeout=5.0, cache=cache)
    try:
        (result,) = client.run([request])
    finally:
        client.close()
    return result.text, result.error


def test_a_structured_verdict_is_read_from_its_json_object() -> None:
    assert parse_verdict('{"verdict": "CORRECT"}') is True
    assert parse_verdict(' {"verdict":"incorrect."}\n') is False
    # anything but an object holding the verdict alone is no verdict
    for reply in ('{"verdict": "CORRECT", "why": "same"}', '{"verdict": 1}', '{"answer": "CORRECT"}', '{"verdict": "CORRECT"', "[]"):
        assert parse_verdict(reply) is None, reply
    assert parse_verdict("CORRECT") is True  # the one-word reply as before


def test_the_judge_request_asks_for_the_verdict_schema_in_each_style() -> None:
    text = PromptSet().judge(**ASKED)
    assert text.reply_format is None and text.messages[0] == ("system", JUDGE_SYSTEM) and text.openai_extras() == {}
    schema = json.loads(VERDICT_SCHEMA)
    assert schema["properties"]["verdict"]["enum"] == ["CORRECT", "INCORRECT"] and schema["additionalProperties"] is False
    strict = PromptSet(judge_format="json-schema").judge(**ASKED)
    assert strict.messages == (("system", JUDGE_JSON_SYSTEM), text.messages[1]) and strict.max_tokens == 32
    assert strict.openai_extras() == {
        "response_format": {"type": "json_schema", "json_schema": {"name": "verdict", "strict": True, "schema": schema}}
    }
    loose = PromptSet(judge_format="json-object").judge(**ASKED)
    assert loose.openai_extras() == {"response_format": {"type": "json_object", "schema": schema}}
    # the fake judge answers a structured request in its shape, the same verdict
    assert FakeJudge().run([text, strict]) and [r.text for r in FakeJudge().run([text, strict])] == [
        "CORRECT", '{"verdict": "CORRECT"}'
    ]
    # a batch line sends the same body, and its ledger entry rebuilds the request with its format
    item = BatchItem("judge", "gpt-4o-mini", strict)
    assert item.body()["response_format"] == strict.openai_extras()["response_format"]
    assert BatchItem.from_json(item.to_json()) == item


def test_each_style_is_taken_by_the_servers_that_take_it(server: OpenAIServer) -> None:
    strict, loose = (PromptSet(judge_format=f).judge(**ASKED) for f in ("json-schema", "json-object"))
    # OpenAI's API: structured outputs for gpt-4o-mini; JSON mode refuses a schema beside it
    assert ask(server, "gpt-4o-mini", strict) == ('{"verdict": "CORRECT"}', None)
    text, error = ask(server, "gpt-4o-mini", loose)
    assert text is None and error is not None and "Unknown parameter: 'response_format.schema'" in error
    text, error = ask(server, "gpt-4-turbo", strict)
    assert error is not None and "'response_format' of type 'json_schema' is not supported with this model" in error
    # llama-cpp-python's server: json_object with the schema, and a 422 for the json_schema type
    server.structured = "llama-cpp-python"
    assert ask(server, "gemma-3-270m", loose) == ('{"verdict": "CORRECT"}', None)
    text, error = ask(server, "gemma-3-270m", strict)
    assert text is None and error is not None and "HTTP 500" in error and "Input should be 'text' or 'json_object'" in error
    bodies = [entry.body for entry in server.log if entry.body is not None]
    assert [b["response_format"]["type"] for b in bodies] == ["json_schema", "json_object", "json_schema", "json_object", "json_schema"]


def test_the_loopback_server_keeps_the_real_servers_rules() -> None:
    def said(response_format: object, model: str = "gpt-4o-mini", content: str = "Reply in JSON.", server: str = "openai") -> str | None:
        body = {"model": model, "messages": [{"role": "user", "content": content}], "response_format": response_format}
        refused = response_format_error(body, server)
        if refused is None:
            return None
        status, error = refused
        return f"{status} {error['error']['message']}"

    schema = json.loads(VERDICT_SCHEMA)
    named = {"name": "verdict", "strict": True, "schema": schema}
    assert said({"type": "json_schema", "json_schema": named}) is None
    assert said({"type": "json_object"}) is None and said({"type": "text"}, "gpt-4") is None
    assert said({"type": "json_object"}, content="Say yes.") == (
        "400 'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
    )
    assert said({"type": "json_object"}, "gpt-4-0613") == "400 Invalid parameter: 'response_format' of type 'json_object' is not supported with this model."
    assert str(said({"type": "json_schema", "json_schema": named}, "gpt-3.5-turbo-0125")).startswith(
        "400 Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
    )
    assert said({"type": "json_schema", "json_schema": named}, "gpt-4o") is None  # gpt-4o-2024-08-06 and later
    assert said({"type": "json_schema", "json_schema": {"schema": schema}}) == (
        "400 Missing required parameter: 'response_format.json_schema.name'."
    )
    open_schema = {**named, "schema": {"type": "object", "properties": {"verdict": {"type": "string"}}}}
    assert said({"type": "json_schema", "json_schema": open_schema}) == (
        "400 Invalid schema for response_format 'verdict': In context=(), 'additionalProperties' is required to be "
        "supplied and to be false."
    )
    assert said({"type": "yaml"}) == "400 Invalid value: 'yaml'. Supported values are: 'text', 'json_object', and 'json_schema'."
    # llama-cpp-python: no word rule, no strict mode, a schema beside json_object; json_schema is no type of its
    assert said({"type": "json_object", "schema": schema}, "gemma", "Say yes.", "llama-cpp-python") is None
    assert str(said({"type": "json_schema", "json_schema": named}, server="llama-cpp-python")).startswith(
        "500 1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'"
    )


def test_a_structured_request_is_cached_apart_from_the_free_text_one(server: OpenAIServer, tmp_path: Path) -> None:
    text, strict = PromptSet().judge(**ASKED), PromptSet(judge_format="json-schema").judge(**ASKED)
    same_messages = ChatRequest(text.messages, strict.max_tokens)  # only the format differs from ``strict``
    cache = ResponseCache(tmp_path)
    assert ask(server, "gpt-4o-mini", same_messages, cache)[0] == "CORRECT"
    assert ask(server, "gpt-4o-mini", strict, cache)[0] == '{"verdict": "CORRECT"}'
    assert request_key("gpt-4o-mini", same_messages) != request_key("gpt-4o-mini", strict)
    assert len(list(tmp_path.glob("??/*.json"))) == 2 and server.total_requests == 2
    assert ask(server, "gpt-4o-mini", strict, cache)[0] == '{"verdict": "CORRECT"}' and server.total_requests == 2
    # a free-text request keeps the key it had before reply formats existed (computed by the code before them)
    assert request_key("gpt-4o-mini", text) == "73f81450a6e30394de70b8466039d9fd56b33b3b024b500fa296cbf2dcca8999"


@pytest.mark.parametrize(
    ("judge", "said"),
    [
        (
            "anthropic:claude-haiku-4-5",
            ("--restore-judge-format json-schema: anthropic:claude-haiku-4-5 cannot be asked for a structured reply "
            "(anthropic: declares no json-schema replies; providers that do: openai:); use --restore-judge-format text"),
        ),
        ("f1:0.5", "--restore-judge-format json-schema: f1:0.5 cannot be asked for a structured reply (f1: declares"),
    ],
)
def test_a_judge_that_cannot_take_a_reply_format_is_refused_before_any_call(tmp_path: Path, judge: str, said: str) -> None:
    raw, _ = parse_args([f"--restore-judge={judge}", "--restore-judge-format=json-schema"])
    with pytest.raises(SettingsError) as err:
        build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None)
    assert str(err.value).startswith(said) and "\n" not in str(err.value)
    raw, _ = parse_args(["--restore-judge-format=yaml"])
    with pytest.raises(SettingsError, match="--restore-judge-format: 'yaml' is not text, json-schema, json-object"):
        build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None)
    # the audit judge re-grades with the same prompts: refused the same way
    raw, _ = parse_args(["--restore-audit-judge=anthropic:claude-haiku-4-5", "--restore-judge-format=json-object"])
    with pytest.raises(SettingsError, match="anthropic:claude-haiku-4-5 cannot be asked for a structured reply"):
        build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None)


def test_the_run_id_covers_the_judge_format(tmp_path: Path) -> None:
    def settings(*args: str):  # type: ignore[no-untyped-def]
        raw, _ = parse_args(list(args))
        return build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None).settings

    text, strict = settings(), settings("--restore-judge-format=json-object")
    assert strict.judge_format == "json-object" and strict.prompt_set().judge_format == "json-object"
    assert text.fingerprint(["fifo"], "x") != strict.fingerprint(["fifo"], "x")
    assert text.fingerprint(["fifo"], "x") == settings("--restore-judge-format=text").fingerprint(["fifo"], "x")


@pytest.mark.parametrize(("structured", "style", "passes"), [("llama-cpp-python", "json-object", True), ("llama-cpp-python", "json-schema", False)])
def test_the_gate_grades_with_a_structured_judge_through_the_server(structured: str, style: str, passes: bool) -> None:
    tiny = load_dataset(TINY)
    reader = FakeReader(name="fake-reader")
    with OpenAIServer(fake_models_responder([])) as server:
        server.structured = structured
        judge, fresh = (OpenAIChatModel(model="gemma-3-270m", base_url=server.base_url, max_tries=1, timeout=5.0) for _ in "ab")
        audit = Audit(
            tiny, AuditConfig(budgets=(600, 300)), reader=reader, judge=judge, scorer=FakeScorer(),
            prompts=PromptSet(judge_format=style),
        )
        reader.learn(p.history for p in audit.questions)
        try:
            result = calibrate(audit, fresh_judge=fresh)
        finally:
            judge.close()
            fresh.close()
        sent = [entry.body for entry in server.log if entry.body is not None]
    assert sent and all(b["response_format"] == PromptSet(judge_format=style).judge(**ASKED).openai_extras()["response_format"] for b in sent)
    if passes:  # every grade a verdict, every probe asked and graded
        assert result.passed, result.reasons
        assert result.judge_not_a_verdict == result.judge_failed_calls == 0 and result.oracle_failed == 0
        assert all(asked > 0 for asked in result.probe_asked.values())
    else:  # the server refused every request: failed calls, never verdicts, and the gate says so
        assert not result.passed and result.oracle_failed == result.questions
        assert any("oracle calls failed" in reason for reason in result.reasons), result.reasons


@pytest.mark.parametrize(
    ("structured", "judge", "calibration", "status", "sent"),
    [
        # llama-cpp-python 0.3.36 takes no json_schema type: a 500 naming the validation error (measured);
        # the gate's judge and its fresh copy (the repeats) each send their first call, then nothing more
        ("llama-cpp-python", "gemma-3-270m", "on", 500, 2),
        # OpenAI's models before structured outputs: a 400 invalid_request_error naming response_format
        ("openai", "gpt-4-turbo", "off", 400, 1),
    ],
)
def test_a_refused_reply_format_stops_the_run_at_the_first_call_in_one_line(
    project: pytest.Pytester, tmp_path: Path, structured: str, judge: str, calibration: str, status: int, sent: int
) -> None:
    with OpenAIServer(fake_models_responder([])) as server:
        server.structured = structured
        result = project.runpytest_inprocess(
            "-p", "no:xdist", *SMALLEST_GRID, f"--restore-judge=openai:{judge}", "--restore-judge-format=json-schema",
            f"--restore-base-url={server.base_url}", f"--restore-cache={tmp_path / 'cache'}",
            f"--restore-calibration={calibration}",
        )
        where, requests = server.base_url, server.total_requests
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.outlines
    text = "\n".join(result.outlines + result.errlines)
    said = (
        f"judge openai:{judge}: HTTP {status} (not retried): {where} does not take the structured reply "
        "--restore-judge-format json-schema asks for (response_format of type 'json_schema'); "
        "try --restore-judge-format json-object (llama-cpp-python's server) or text; the server said: "
    )
    stop = "restore: run stopped before the grid: " if calibration == "on" else "! Interrupted: "  # the gate's, or the grid's
    assert any(line.startswith(stop + said) for line in result.outlines), text[-3000:]
    # the first refusal stops the model: one call per judge model, not one per question (the gate alone asks dozens)
    assert requests == sent
    assert "Traceback" not in text and "failed after" not in text and "x HTTP" not in text


def test_only_a_refusal_naming_the_reply_format_is_fatal() -> None:
    api = OpenAIChatModel(model="gemma-3-270m", base_url="http://127.0.0.1:9/v1").api
    structured = PromptSet(judge_format="json-object").judge(**ASKED)
    body, plain = api.chat_request(structured)[1], api.chat_request(PromptSet().judge(**ASKED))[1]
    named = "Unknown parameter: 'response_format.schema'."
    said = api.refused_shape(400, named, body)
    assert said is not None and "try --restore-judge-format json-schema (OpenAI, vLLM, llama-server) or text" in said
    # a 400 on anything else (a prompt over the context), a 500 that is not a validation error naming
    # the format, and any refusal of a request asking no format fail their own call only
    assert api.refused_shape(400, "This model's maximum context length is 8192 tokens.", body) is None
    assert api.refused_shape(500, "response_format: upstream timed out", body) is None
    assert api.refused_shape(400, named, plain) is None


def test_the_dry_run_says_what_a_schema_adds_to_a_structured_judge(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-DUMMY-KEY-0123456789")
    judge = {}
    for style in ("text", "json-schema", "json-object"):
        result = project.runpytest_inprocess(
            "-p", "no:xdist", *SMALLEST_GRID, "--restore-judge=openai:gpt-4o-mini", f"--restore-judge-format={style}",
            "--restore-calibration=off", "--restore-dry-run",
        )
        assert result.ret == 0, result.outlines
        judge[style] = next(line for line in result.outlines if line.startswith("judge"))
    # OpenAI's structured outputs put its rendering of the schema in the prompt: not counted, said; a grammar
    # (llama-cpp-python's json_object, measured) adds no prompt token
    assert judge["json-schema"].endswith("its schema in each prompt not counted (36 tokens as JSON): estimate")
    assert "schema" not in judge["text"] + judge["json-object"]
