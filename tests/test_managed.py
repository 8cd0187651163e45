"""The managed model layer (``models/managed.py``, ``api.py``, ``http.py``, ``redact.py``) across providers.

What is asked of a provider is asked through its declaration (a user's
provider is priced by its own prices in the dry run, "unknown" when it has
none); every provider's key is redacted from what leaves a model client;
a model served by several base URLs (replicas) spreads its calls over them
and loses nothing when one of them dies.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from grid_helpers import GRID, small_args
from openai_server import OpenAIServer, refused_port
from proxy_server import CERT, EchoServer, LoopbackProxy

from pytest_restore.models.anthropic_messages import API_KEY_ENV as ANTHROPIC_KEY
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.http import HTTPTransport, TransportError, _bypassed
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


# -- proxies from the environment (models/http.py), through a loopback proxy that counts what it relays ---------

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable of the machine's leaks in; the test sets its own."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def _echo(transport: HTTPTransport) -> dict[str, str]:
    reply = transport.post("/chat/completions", b'{"q": 1}', {"Content-Type": "application/json"}, timeout=5)
    transport.close()
    assert reply.status == 200, reply
    answer: dict[str, str] = json.loads(reply.body)
    return answer


def test_an_http_base_url_is_forwarded_through_http_proxy_with_its_credentials(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    with LoopbackProxy(credentials="user:p@ss") as proxy, EchoServer() as server:
        no_proxy_settings.setenv("HTTP_PROXY", proxy.url("user:p%40ss"))  # percent-encoded in the URL, as users write it
        transport = HTTPTransport(server.base_url)
        assert str(transport.proxy) == f"proxy 127.0.0.1:{proxy.port}"  # said without its credentials
        answer = _echo(transport)
        assert answer == {"path": "/v1/chat/completions", "host": f"127.0.0.1:{server.port}", "body": '{"q": 1}'}
        assert proxy.forwarded == {f"127.0.0.1:{server.port}": 1} and not proxy.tunnels and not proxy.refused
        # HTTPS_PROXY is for https base URLs: this one goes direct
        no_proxy_settings.delenv("HTTP_PROXY")
        no_proxy_settings.setenv("HTTPS_PROXY", proxy.url("user:p%40ss"))
        _echo(HTTPTransport(server.base_url))
        assert sum(proxy.forwarded.values()) == 1 and server.requests == 2


def test_an_https_base_url_goes_through_a_connect_tunnel(no_proxy_settings: pytest.MonkeyPatch) -> None:
    no_proxy_settings.setenv("SSL_CERT_FILE", str(CERT))  # the loopback server's certificate, trusted for this test
    with LoopbackProxy(credentials="user:secret") as proxy, EchoServer(tls=True) as server:
        no_proxy_settings.setenv("https_proxy", proxy.url("user:secret"))
        no_proxy_settings.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # the lower-case name wins, as for httpx
        answer = _echo(HTTPTransport(server.base_url))
        assert answer["host"] == f"127.0.0.1:{server.port}" and answer["path"] == "/v1/chat/completions"
        assert proxy.tunnels == {f"127.0.0.1:{server.port}": 1} and not proxy.forwarded and not proxy.refused


@pytest.mark.parametrize(
    ("no_proxy", "direct"),
    [
        ("127.0.0.1", True),
        ("example.com, 127.0.0.0/8", True),
        ("*", True),
        ("127.0.0.1:{port}", True),
        ("127.0.0.1:1", False),  # another port of the host
        ("localhost", False),  # a name, not the loopback address
        ("127.0.0.10,0.0.1,.0.0.1", False),  # an address is matched whole, never as a suffix
    ],
)
def test_no_proxy_sends_the_loopback_server_direct_as_its_rules_say(
    no_proxy_settings: pytest.MonkeyPatch, no_proxy: str, direct: bool
) -> None:
    with LoopbackProxy() as proxy, EchoServer() as server:
        no_proxy_settings.setenv("ALL_PROXY", proxy.url())
        no_proxy_settings.setenv("NO_PROXY", no_proxy.format(port=server.port))
        _echo(HTTPTransport(server.base_url))
        assert server.requests == 1 and sum(proxy.forwarded.values()) == (0 if direct else 1)


def test_no_proxy_rules_for_names_and_networks() -> None:
    assert _bypassed("api.example.com", 443, "example.com") and _bypassed("api.example.com", 443, ".example.com")
    assert _bypassed("api.example.com", 443, "*.example.com") and _bypassed("example.com", 443, "example.com")
    assert not _bypassed("notexample.com", 443, "example.com")
    assert _bypassed("::1", 80, "[::1]") and _bypassed("::1", 8000, "::1/128") and _bypassed("::1", 80, "[::1]:80")
    assert not _bypassed("::1", 81, "[::1]:80") and not _bypassed("10.0.0.1", 80, "127.0.0.0/8")
    assert _bypassed("LOCALHOST", 80, "localhost") and not _bypassed("localhost", 80, "")


def test_a_proxy_that_is_gone_is_unreachable_and_said_without_its_credentials(
    no_proxy_settings: pytest.MonkeyPatch,
) -> None:
    with refused_port() as port:
        no_proxy_settings.setenv("HTTP_PROXY", f"http://user:hunter2-secret@127.0.0.1:{port}")  # nothing listens there
        transport = HTTPTransport("http://127.0.0.1:9/v1")
        with pytest.raises(TransportError) as failed:
            transport.post("/chat/completions", b"{}", {}, timeout=5)
    assert failed.value.kind == "unreachable"
    assert failed.value.detail.endswith(f"(through proxy 127.0.0.1:{port})") and "hunter2" not in failed.value.detail


@pytest.mark.parametrize("url", ["socks5://127.0.0.1:1080", "https://proxy.example:3128"])
def test_a_proxy_url_this_transport_cannot_use_is_refused_naming_the_variable(
    no_proxy_settings: pytest.MonkeyPatch, url: str
) -> None:
    no_proxy_settings.setenv("HTTPS_PROXY", url)
    with pytest.raises(ValueError, match=r"^\$HTTPS_PROXY: .* is not an http://HOST\[:PORT\] proxy$"):
        HTTPTransport("https://api.example.com/v1")


# -- a replica that answers badly every time (issue 44): the others carry its calls ----------------


@pytest.mark.parametrize("bad", ["hang", "500"])
def test_a_replica_that_hangs_or_errs_every_time_is_set_aside_and_the_other_answers_all(
    bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One of two replicas never answers (or answers 500 to every request): the run completes on the
    other with every answer, each paid once there; the bad one is set aside after a few attempts and
    said once. Before, each call's tries all went to the bad replica (held by its slot) and failed."""
    from openai_server import Faults

    # The timeout is what each of the sick replica's hangs costs, and it bounds the good replica's
    # answers too: one that takes longer is sent again and paid twice (at 0.2 s, under -n 3 at load 9,
    # the good one was paid 81 times for 80). A hang must still be set aside (three timeouts in a
    # row) while the good replica works through the 80: 80 x 0.05 s against 3 x 0.5 s. A 500 costs
    # no wait, so there the timeout only bounds the good answers.
    timeout, latency = (0.5, 0.05) if bad == "hang" else (5.0, 0.02)
    with OpenAIServer(latency=latency) as good, OpenAIServer() as sick:
        if bad == "hang":
            sick.mode = "hang"
        else:
            sick.faults = Faults(rate=1.0, kinds=("500",), max_per_request=None)
        model = OpenAIChatModel(
            # one call at a time each: the sick one is tried as often as it is free
            model="m", base_url=f"{sick.base_url},{good.base_url}", timeout=timeout, max_concurrency=1,
            backoff_base=0.001, backoff_cap=0.01,
        )
        started = time.monotonic()
        with caplog.at_level("INFO", logger="pytest_restore.models"):
            results = model.run(questions(80, f"aside {bad}"))
        elapsed = time.monotonic() - started
        model.close()
        assert all(r.ok for r in results), {r.error for r in results if not r.ok}
        assert model.fatal_error is None
        assert sum(good.successes.values()) == 80 and set(good.successes.values()) == {1}  # each paid once
        said = [r.getMessage() for r in caplog.records if "set aside" in r.getMessage()]
        assert len(said) == 1 and sick.base_url.split("//")[1].split("/")[0] in said[0], said
        assert sick.total_requests <= 6, sick.total_requests  # set aside after its third failure in a row
        # what the run's controller says once on the terminal (test_providers: across xdist workers)
        assert list(model.set_aside) == [sick.base_url] and "3 attempts in a row" in model.set_aside[sick.base_url]
        assert elapsed < 15, elapsed
