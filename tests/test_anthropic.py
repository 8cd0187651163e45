"""The Anthropic provider (``anthropic:MODEL``) against a loopback Messages API that keeps the API's rules.

``anthropic_server.AnthropicServer`` refuses what the real API refuses (no
``x-api-key``, no ``anthropic-version``, no ``max_tokens``, a ``system`` role
among the messages) and answers with its error shape, 429 and 529 with
``retry-after``. The provider lives in one module
(``pytest_restore/models/anthropic_messages.py``) plus its registration; the
grid runs here show the README's real-model recipe working with
``anthropic:`` models, live and from the cache, through faults, and an
``anthropic:`` audit judge beside ``openai:`` models.
"""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import ANTHROPIC_FAULTS, MESSAGES, VERSION, AnthropicServer
from grid_helpers import FAST_RETRIES, GRID, TINY, small_args
from openai_server import Faults, OpenAIServer, fake_models_responder

from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import History, build_history
from pytest_restore.models.anthropic_messages import API_KEY_ENV, BASE_URL_ENV, AnthropicProvider
from pytest_restore.models.api import ModelOptions
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.managed_chat import ManagedChatModel
from pytest_restore.models.providers import missing_key_problem, price_of, resolve
from pytest_restore.run.options import parse_args
from pytest_restore.run.parts import RunParts
from pytest_restore.run.plan import build_plan, check_before_work, default_registries
from pytest_restore.run.settings import SettingsError

KEY = "sk-ant-test-0123456789abcdefXYZ"
MODEL = "claude-haiku-4-5"
#: Four cells: a policy that calls the scorer and one that does not, at two budgets.
FEW_CELLS = ("--restore-policies", "fifo,llm-importance", "--restore-budgets", "600,100", "--restore-calibration", "off")


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture(scope="module")
def histories() -> list[History]:
    return [build_history(q) for q in load_dataset(TINY).questions if not q.is_abstention]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[AnthropicServer]:
    with AnthropicServer(latency=0.002, expected_key=KEY) as running:
        monkeypatch.setenv(API_KEY_ENV, KEY)
        monkeypatch.setenv(BASE_URL_ENV, running.base_url)
        yield running


def make(tmp_path: Path, role: str = "reader", **options: Any) -> ManagedChatModel:
    model = AnthropicProvider().make(MODEL, role, ModelOptions(cache_dir=tmp_path / "cache", quiet=True, **options))
    assert isinstance(model, ManagedChatModel)
    model.backoff_base, model.backoff_cap = 0.001, 0.01
    return model


def raw_post(server: AnthropicServer, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        connection.request("POST", MESSAGES, json.dumps(body), {"content-type": "application/json", **headers})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_the_server_keeps_the_messages_api_rules(server: AnthropicServer) -> None:
    good = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    auth = {"x-api-key": KEY, "anthropic-version": VERSION}
    assert raw_post(server, good, auth)[0] == 200
    status, body = raw_post(server, good, {"anthropic-version": VERSION})
    assert (status, body["type"], body["error"]["type"]) == (401, "error", "authentication_error")
    assert raw_post(server, good, {"x-api-key": KEY})[0] == 400  # no anthropic-version
    no_budget = {k: v for k, v in good.items() if k != "max_tokens"}
    assert raw_post(server, no_budget, auth) == (400, {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: Field required"}})
    system_role = dict(good, messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    status, body = raw_post(server, system_role, auth)
    assert status == 400 and 'Unexpected role "system"' in body["error"]["message"]


def test_the_provider_sends_the_system_prompt_as_a_field_and_reads_the_answer(
    server: AnthropicServer, tmp_path: Path
) -> None:
    model = make(tmp_path)
    request = ChatRequest((("system", "You answer briefly."), ("user", "question 1")), max_tokens=32)
    result = model.run([request])[0]
    model.close()
    assert model.name == f"anthropic:{MODEL}"
    assert result.text == "echo: question 1" and result.input_tokens > 0 and result.output_tokens == 3
    assert result.extra == {"model": MODEL, "finish_reason": "end_turn"}
    body = server.log[0].body
    assert body is not None and body["system"] == "You answer briefly."
    assert [m["role"] for m in body["messages"]] == ["user"] and body["max_tokens"] == 32


def test_429_529_and_dropped_connections_are_retried_and_nothing_is_answered_twice(
    server: AnthropicServer, tmp_path: Path
) -> None:
    server.faults = Faults(rate=0.6, kinds=ANTHROPIC_FAULTS, seed=3, retry_after="0")
    requests = [ChatRequest((("user", f"question {i}"),), max_tokens=16) for i in range(40)]
    model = make(tmp_path)
    results = model.run(requests)
    model.close()
    assert [r.text for r in results] == [f"echo: question {i}" for i in range(40)]
    injected = Counter(entry.fault for entry in server.log if entry.fault)
    assert set(injected) == set(ANTHROPIC_FAULTS), injected
    assert set(server.successes.values()) == {1}  # each answered once: nothing paid twice
    again = make(tmp_path)
    sent = server.total_requests
    assert [r.text for r in again.run(requests)] == [r.text for r in results]
    again.close()
    assert server.total_requests == sent  # the second run came from the cache


def test_a_wrong_key_stops_the_model_in_one_line_without_the_key(server: AnthropicServer, tmp_path: Path) -> None:
    server.expected_key = "sk-ant-another-key-entirely-000"
    model = make(tmp_path)
    results = model.run([ChatRequest((("user", f"q {i}"),), max_tokens=8) for i in range(5)])
    model.close()
    assert model.fatal_error == (
        f"HTTP 401 authentication failed: ${API_KEY_ENV} was rejected by {server.base_url} (the key is not shown)"
    )
    assert all(not r.ok for r in results) and server.total_requests == 1
    assert KEY not in json.dumps([r.error for r in results])


def test_the_provider_declares_its_key_price_and_capabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    monkeypatch.delenv(BASE_URL_ENV, raising=False)
    resolved = resolve(f"anthropic:{MODEL}-20251001")
    assert resolved is not None and resolved[0].capabilities == frozenset({"chat", "batch"})
    assert price_of(f"anthropic:{MODEL}-20251001") == (1.00, 5.00)
    assert price_of(f"anthropic:{MODEL}-20251001", batch=True) == (0.50, 2.50)  # Message Batches: half
    assert price_of("anthropic:claude-unknown") is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    problem = missing_key_problem([f"anthropic:{MODEL}", "openai:gpt-4o-mini"], None)
    assert problem == (
        f"anthropic:{MODEL} would call api.anthropic.com but ${API_KEY_ENV} is not set "
        f"(set it, or point ${BASE_URL_ENV} or --restore-base-url at a server that needs no key)"
    )
    # the run's base URL serves anthropic: models too (no Anthropic key is asked for it)
    assert missing_key_problem([f"anthropic:{MODEL}"], "http://127.0.0.1:9") is None


def test_the_base_url_is_anthropic_base_url_else_the_runs_option(
    server: AnthropicServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = ChatRequest((("user", "where am I sent?"),), max_tokens=8)
    with AnthropicServer(latency=0.002, expected_key=KEY) as other:
        # both given: $ANTHROPIC_BASE_URL (the provider's own) wins over --restore-base-url
        model = make(tmp_path, base_url=other.base_url)
        assert model.run([request])[0].text == "echo: where am I sent?"
        model.close()
        assert (server.total_requests, other.total_requests) == (1, 0)
        # the option alone: the run's base URL, replicas included
        monkeypatch.delenv(BASE_URL_ENV)
        model = make(tmp_path / "alone", base_url=f"{other.base_url}, {other.base_url}/")
        assert model.run([request])[0].text == "echo: where am I sent?"
        model.close()
        assert (server.total_requests, other.total_requests) == (1, 1)


def _records(report: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (report / "records.jsonl").read_text().splitlines()]


def _excluded(value: Any) -> bool:
    """Whether a record (any nesting) carries a truthy ``excluded`` field."""
    if isinstance(value, dict):
        return bool(value.get("excluded")) or any(_excluded(v) for v in value.values())
    return isinstance(value, list) and any(_excluded(v) for v in value)


def test_the_real_model_recipe_with_anthropic_models_live_faulted_and_cached(
    pytester: pytest.Pytester, histories: list[History], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(FAST_RETRIES)
    faults = Faults(rate=0.25, kinds=ANTHROPIC_FAULTS, seed=11, retry_after="0")
    spec = f"anthropic:{MODEL}"
    args = [*small_args(), *FEW_CELLS, "--restore-reader", spec, "--restore-judge", spec, "--restore-scorer", spec,
            "--restore-cache", str(pytester.path / "cache"), "-p", "no:xdist"]
    with AnthropicServer(fake_models_responder(histories), latency=0.002, faults=faults, expected_key=KEY) as server:
        monkeypatch.setenv(API_KEY_ENV, KEY)
        monkeypatch.setenv(BASE_URL_ENV, server.base_url)
        live = pytester.runpytest_inprocess(*args, "--restore-report-dir", "live")
        live.assert_outcomes(passed=4)
        sent = server.total_requests
        cached = pytester.runpytest_inprocess(*args, "--restore-report-dir", "cached")
        cached.assert_outcomes(passed=4)
        assert server.total_requests == sent  # the rerun sent nothing
        injected = Counter(entry.fault for entry in server.log if entry.fault)
        assert set(injected) == set(ANTHROPIC_FAULTS), injected
        assert set(server.successes.values()) == {1}  # every request answered once
    live_records = (pytester.path / "live" / "records.jsonl").read_bytes()
    assert live_records == (pytester.path / "cached" / "records.jsonl").read_bytes()
    assert live_records.count(spec.encode()) > 0
    assert not any(_excluded(record) for record in _records(pytester.path / "live"))  # no call failed for good
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_an_anthropic_audit_judge_beside_openai_models(
    pytester: pytest.Pytester, histories: list[History], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(FAST_RETRIES)
    with (
        OpenAIServer(fake_models_responder(histories), latency=0.002) as openai_server,
        AnthropicServer(fake_models_responder(histories), latency=0.002, expected_key=KEY) as anthropic_server,
    ):
        monkeypatch.setenv(API_KEY_ENV, KEY)
        monkeypatch.setenv(BASE_URL_ENV, anthropic_server.base_url)
        result = pytester.runpytest_inprocess(
            *small_args(), *FEW_CELLS, "-p", "no:xdist",
            "--restore-reader", "openai:fake-reader", "--restore-judge", "openai:fake-judge",
            "--restore-scorer", "openai:fake-scorer", "--restore-base-url", openai_server.base_url,
            "--restore-audit-judge", f"anthropic:{MODEL}", "--restore-report-dir", "report",
        )
        result.assert_outcomes(passed=4)
        judged = [entry for entry in anthropic_server.log if entry.status == 200]
        assert judged and all(e.body is not None and e.body["model"] == MODEL for e in judged)
        assert openai_server.total_requests > 0
    report = (pytester.path / "report" / "report.md").read_text()
    assert f"anthropic:{MODEL}" in report


def test_openai_s_base_url_never_sends_an_anthropic_model_there(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # only OpenAI's variables set: the anthropic: reader is Anthropic's to reach, and its missing key is said
    for name in (API_KEY_ENV, BASE_URL_ENV, "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    raw, _ = parse_args([f"--restore-reader=anthropic:{MODEL}", "--restore-judge=fake", "--restore-scorer=fake"])
    plan = build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None)
    with pytest.raises(SettingsError, match=rf"anthropic:{MODEL} would call api.anthropic.com but \${API_KEY_ENV}"):
        check_before_work(plan)
    monkeypatch.setenv(API_KEY_ENV, KEY)
    check_before_work(plan)
    parts = RunParts(plan, lambda _line: None)
    model = parts.model(f"anthropic:{MODEL}", "reader")
    assert isinstance(model, ManagedChatModel)
    assert [api.base_url for api in model.apis] == ["https://api.anthropic.com"]
    parts.close()
    # an openai: model still reads its own variable
    raw, _ = parse_args(["--restore-reader=openai:gpt-4o-mini", "--restore-judge=fake", "--restore-scorer=fake"])
    parts = RunParts(build_plan(raw, default_registries(), "session", tmp_path, lambda _line: None), lambda _line: None)
    model = parts.model("openai:gpt-4o-mini", "reader")
    assert isinstance(model, ManagedChatModel) and [api.base_url for api in model.apis] == ["http://127.0.0.1:9/v1"]
    parts.close()
