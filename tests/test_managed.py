"""The managed model layer (``models/managed.py``, ``api.py``, ``http.py``, ``redact.py``) across providers.

What is asked of a provider is asked through its declaration (a user's
provider is priced by its own prices in the dry run, "unknown" when it has
none); every provider's key is redacted from what leaves a model client;
a model served by several base URLs (replicas) spreads its calls over them
and loses nothing when one of them dies.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from grid_helpers import GRID, small_args
from openai_server import OpenAIServer

from pytest_restore.models.anthropic_messages import API_KEY_ENV as ANTHROPIC_KEY
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.openai_chat import API_KEY_ENV as OPENAI_KEY
from pytest_restore.models.openai_chat import OpenAIChatModel
from pytest_restore.models.redact import REDACTED, redact_keys

# A user's provider that declares a price, and one that declares none: both real (priced by the dry run).
PRICED_PROVIDERS = """
from pytest_restore.models.base import ChatResult
from pytest_restore.models.providers import ModelProvider


class Remote:
    def __init__(self, name):
        self.name = name

    def run(self, requests):
        return [ChatResult("I don't know.") for _ in requests]


class Priced(ModelProvider):
    name = "priced"

    def make(self, model, role, options, *, use_cache=True):
        return Remote(f"priced:{model}")

    def cache_name(self, model):
        return f"priced:{model}"

    def price(self, model):
        return (2.0, 8.0) if model.startswith("big") else None


class Unpriced(Priced):
    name = "unpriced"

    def price(self, model):
        return None


def pytest_restore_register_providers(registry, config):
    registry.register(Priced())
    registry.register(Unpriced())
"""


def dry_run_cost(pytester: pytest.Pytester, *models: str) -> str:
    pytester.makepyfile(test_grid=GRID)
    pytester.makeconftest(PRICED_PROVIDERS)
    reader, judge, scorer = models
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", *small_args(), "--restore-dry-run", "--restore-policies", "fifo",
        "--restore-reader", reader, "--restore-judge", judge, "--restore-scorer", scorer,
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    return next(line for line in result.stdout.lines if line.startswith("estimated cost"))


def test_a_users_provider_is_priced_by_its_own_declaration_in_the_dry_run(pytester: pytest.Pytester) -> None:
    line = dry_run_cost(pytester, "priced:big-1", "priced:big-1", "fake")
    assert line.startswith("estimated cost of what is still to send: at most $")
    assert line != "estimated cost of what is still to send: at most $0.00 (output tokens counted at their cap)"


def test_a_users_provider_without_a_price_is_unknown_not_free(pytester: pytest.Pytester) -> None:
    line = dry_run_cost(pytester, "unpriced:m", "fake", "fake")
    assert line.startswith("estimated cost of what is still to send: unknown, no price is known for unpriced:m")


def test_every_providers_key_is_redacted_whatever_the_path(monkeypatch: pytest.MonkeyPatch) -> None:
    openai_key, anthropic_key = "sk-openai-ABCDEFGHIJ0123456789", "sk-ant-api03-zyxwvutsrq9876543210"
    monkeypatch.setenv(OPENAI_KEY, openai_key)
    monkeypatch.setenv(ANTHROPIC_KEY, anthropic_key)
    echoed = f"batch error: key {anthropic_key} rejected; also {openai_key[:14]}... and {anthropic_key.upper()}"
    clean = redact_keys(echoed)
    assert anthropic_key not in clean and openai_key[:14] not in clean and anthropic_key.upper() not in clean
    assert clean.count(REDACTED) == 3 and clean.startswith("batch error: key ")
    monkeypatch.delenv(ANTHROPIC_KEY)
    assert anthropic_key in redact_keys(echoed)  # a variable that is not set hides nothing


def questions(n: int, tag: str = "q") -> list[ChatRequest]:
    return [ChatRequest((("user", f"{tag} {i}"),), max_tokens=16) for i in range(n)]


def test_replicas_share_the_calls_by_calls_in_flight() -> None:
    with OpenAIServer(latency=0.01) as one, OpenAIServer(latency=0.01) as two:
        model = OpenAIChatModel(model="m", base_url=f"{one.base_url},{two.base_url}", timeout=5)
        results = model.run(questions(200))
        model.close()
        assert all(r.ok for r in results)
        assert one.total_requests + two.total_requests == 200
        assert min(one.total_requests, two.total_requests) >= 60, (one.total_requests, two.total_requests)
        print(f"replica split: {one.total_requests} / {two.total_requests}")


def test_a_replica_killed_mid_run_costs_no_answer() -> None:
    with OpenAIServer(latency=0.02) as survivor:
        doomed = OpenAIServer(latency=0.02).start()
        model = OpenAIChatModel(
            model="m", base_url=f"{doomed.base_url},{survivor.base_url}", timeout=5, backoff_base=0.001, backoff_cap=0.01
        )
        def kill() -> None:  # once it has answered some: mid-run, whatever the machine's load
            while doomed.total_requests < 40 and time.monotonic() - started < 20:
                time.sleep(0.005)
            doomed.stop()

        killer = threading.Thread(target=kill)
        started = time.monotonic()
        killer.start()
        results = model.run(questions(300, "kill"))
        killer.join()
        model.close()
        assert all(r.ok for r in results), {r.error for r in results if not r.ok}
        assert model.fatal_error is None
        assert doomed.total_requests > 0 and survivor.total_requests > 0
        answered = {**survivor.successes, **doomed.successes}
        assert set(survivor.successes.values()) | set(doomed.successes.values()) <= {1}, answered
        assert time.monotonic() - started < 30
        print(f"before the kill: {doomed.total_requests}; the survivor: {survivor.total_requests}")


def test_no_replica_left_stops_the_model_in_one_line(tmp_path: Path) -> None:
    model = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1,http://127.0.0.1:10/v1", timeout=2)
    results = model.run(questions(3))
    model.close()
    assert all(not r.ok for r in results)
    assert model.fatal_error is not None and model.fatal_error.startswith("no replica of openai:m can be reached")
