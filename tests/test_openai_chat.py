"""OpenAIChatModel, its pacing, ResponseCache and Progress against a real HTTP server.

Every test talks to ``openai_server.OpenAIServer`` on 127.0.0.1 through the
official ``openai`` client, so retries, timeouts and dropped connections are
the real thing, not mocks.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import full_disk
from openai_server import (
    FAULT_KINDS,
    SNAPSHOT_SUFFIX,
    Faults,
    OpenAIServer,
    canonical_body,
    refused_port,
)

from pytest_restore.models.base import ChatModel, ChatRequest, ChatResult
from pytest_restore.models.cache import ResponseCache, cache_problem, request_key
from pytest_restore.models.decoding import estimate_tokens
from pytest_restore.models.openai_chat import MIN_KEY_FRAGMENT, KeyRedactor, OpenAIChatModel
from pytest_restore.models.pacing import MAX_RETRY_AFTER, RateMeter, parse_retry_after
from pytest_restore.models.progress import Progress

MODEL = "gpt-4o-mini"
DUMMY_KEY = "sk-test-DUMMY-KEY-0123456789"

# A child process that answers questions ``first..last`` (``step`` -1 walks
# them backwards) through one cache; prints the texts and the cache's waits.
CHILD = """
import json, sys
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.openai_chat import MIN_KEY_FRAGMENT, KeyRedactor, OpenAIChatModel
base_url, cache_dir, first, last, step = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
model = OpenAIChatModel(model="gpt-4o-mini", base_url=base_url, cache=ResponseCache(cache_dir),
                        max_concurrency=4, timeout=5)
requests = [ChatRequest(messages=(("system", "Answer briefly."), ("user", f"question {i}")),
                        max_tokens=8) for i in range(first, last, step)]
results = model.run(requests)
print(json.dumps({"texts": [r.text for r in results], "waits": model.cache.stats().waits}))
"""


def questions(indices: Iterable[int]) -> list[ChatRequest]:
    """The requests the tests (and ``CHILD``) send: one per question number."""
    return [
        ChatRequest(
            messages=(("system", "Answer briefly."), ("user", f"question {i}")), max_tokens=8
        )
        for i in indices
    ]


def body_of(request: ChatRequest) -> str:
    """The canonical body the server logs for ``request``."""
    return canonical_body(
        {
            "model": MODEL,
            "messages": request.as_openai_messages(),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
    )


_OPEN_MODELS: list[OpenAIChatModel] = []


class VirtualTime:
    """A clock and a sleep for a model: every wait it asks for is recorded and advances the clock at once.

    What a test checks is the waits the model chose (a ``Retry-After`` slept
    through, a rate meter's pacing), never wall-clock time, which a loaded
    machine stretches.
    """

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def make_model(server: OpenAIServer, **kwargs: Any) -> OpenAIChatModel:
    """A model on ``server`` with test-speed defaults (short timeout, tiny backoff)."""
    settings: dict[str, Any] = {"timeout": 2.0, "backoff_base": 0.005, "backoff_cap": 0.05}
    settings.update(kwargs)
    model = OpenAIChatModel(model=MODEL, base_url=server.base_url, **settings)
    _OPEN_MODELS.append(model)
    return model


@pytest.fixture(autouse=True)
def _close_models() -> Iterator[None]:
    yield
    while _OPEN_MODELS:
        _OPEN_MODELS.pop().close()


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer(latency=0.005) as running:
        yield running


@pytest.fixture(autouse=True)
def _no_ambient_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)


# -- plain answers -----------------------------------------------------------


def test_answers_in_order_with_usage_and_snapshot(server: OpenAIServer) -> None:
    model = make_model(server)
    requests = questions([3, 1, 2, 1, 3])
    results = model.run(requests)

    assert isinstance(model, ChatModel)
    assert model.name == "openai:gpt-4o-mini"
    assert [r.text for r in results] == [
        "echo: question 3",
        "echo: question 1",
        "echo: question 2",
        "echo: question 1",
        "echo: question 3",
    ]
    assert all(r.ok and r.error is None and not r.cached for r in results)
    assert all(r.input_tokens > 0 and r.output_tokens == 3 for r in results)
    assert {r.extra["model"] for r in results} == {MODEL + SNAPSHOT_SUFFIX}
    # Duplicates within one run are sent once.
    assert server.total_requests == 3
    assert set(server.attempts.values()) == {1}
    body = server.log[0].body
    assert body is not None and body["temperature"] == 0 and body["max_tokens"] == 8
    assert model.run([]) == []


def test_concurrency_is_capped(server: OpenAIServer) -> None:
    server.latency = 0.03
    model = make_model(server, max_concurrency=5)
    results = model.run(questions(range(30)))
    assert all(r.ok for r in results)
    # the adaptive limit grows from 1 while the (parallel) server keeps its latency
    assert server.max_in_flight == 5 == model.concurrency_peak


def test_connections_are_kept_across_runs_until_close(server: OpenAIServer) -> None:
    model = make_model(server, max_concurrency=4)
    for start in (0, 20, 40):
        assert all(r.ok for r in model.run(questions(range(start, start + 20))))
    assert server.connections <= 4
    model.close()
    assert model.run(questions([99]))[0].text == "echo: question 99"  # restarts
    assert server.connections <= 5


def test_run_works_from_inside_an_event_loop(server: OpenAIServer) -> None:
    model = make_model(server)

    async def inside() -> list[ChatResult]:
        return model.run(questions([1]))

    assert asyncio.run(inside())[0].text == "echo: question 1"


# -- faults and retries -------------------------------------------------------


def test_faulted_run_gives_the_fault_free_results() -> None:
    requests = questions(range(60))
    with OpenAIServer(latency=0.002) as clean:
        expected = make_model(clean).run(requests)
    faults = Faults(rate=0.2, kinds=FAULT_KINDS, seed=7, hang_seconds=0.6)
    with OpenAIServer(latency=0.002, faults=faults) as faulty:
        results = make_model(faulty, timeout=0.3, max_concurrency=16).run(requests)
    # Read after stopping: a hung (timeout) request is logged when it ends.
    log, successes = faulty.log, faulty.successes

    assert [r.text for r in results] == [r.text for r in expected]
    assert all(r.ok for r in results)
    injected = {entry.fault for entry in log if entry.fault}
    assert injected == set(FAULT_KINDS), "the seed should exercise every fault kind"
    assert len(log) > len(requests)
    # Each request was answered well exactly once.
    assert len(successes) == len(requests) and set(successes.values()) == {1}


def test_retry_after_seconds_is_honoured(server: OpenAIServer) -> None:
    server.faults = Faults(rate=1.0, kinds=("429",), retry_after="1", max_per_request=1)
    virtual = VirtualTime()
    result = make_model(server, clock=virtual.clock, sleep=virtual.sleep).run(questions([1]))[0]
    first, second = server.log
    assert result.text == "echo: question 1"
    assert (first.fault, second.fault) == ("429", None)
    assert virtual.slept == [1.0]  # the server's wait, not the backoff (at most 0.05 s here)


def test_retry_after_ms_is_honoured(server: OpenAIServer) -> None:
    server.faults = Faults(
        rate=1.0, kinds=("503",), retry_after=None, retry_after_ms="300", max_per_request=1
    )
    virtual = VirtualTime()
    result = make_model(server, clock=virtual.clock, sleep=virtual.sleep).run(questions([1]))[0]
    first, second = server.log
    assert result.ok and (first.fault, second.fault) == ("503", None)
    assert virtual.slept == [pytest.approx(0.3)]


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    http_date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now + 7))
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"Retry-After": http_date}, now=now) == pytest.approx(7.0)
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "-4"}) == 0.0
    assert parse_retry_after({"Retry-After": "9999999"}) == MAX_RETRY_AFTER
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None


def test_validator_rejection_is_retried_then_recorded_as_failure() -> None:
    def judge(messages: list[dict[str, Any]]) -> str:
        return "MAYBE" if messages[-1]["content"].endswith("2") else "CORRECT"

    with OpenAIServer(judge) as server:
        model = make_model(server, max_tries=3, validator=lambda t: t in {"CORRECT", "INCORRECT"})
        ok, rejected = model.run(questions([1, 2]))
        attempts = server.attempts

    assert ok.text == "CORRECT"
    assert rejected.text is None
    assert (
        rejected.error is not None and "validator" in rejected.error and "MAYBE" in rejected.error
    )
    assert attempts[body_of(questions([2])[0])] == 3
    assert attempts[body_of(questions([1])[0])] == 1


@pytest.mark.parametrize("kind", ["500", "timeout", "drop", "malformed"])
def test_failing_every_try_gives_an_error_not_an_exception(server: OpenAIServer, kind: str) -> None:
    server.faults = Faults(rate=1.0, kinds=(kind,), max_per_request=None, hang_seconds=0.4)
    model = make_model(server, max_tries=3, timeout=0.2)
    result = model.run(questions([1]))[0]
    assert result.text is None and not result.ok
    assert result.error is not None and result.error.startswith("failed after 3 tries")
    assert server.total_requests == 3


@pytest.mark.parametrize("status", ["400", "403", "422"])
def test_client_errors_fail_at_once(server: OpenAIServer, status: str) -> None:
    server.faults = Faults(rate=1.0, kinds=(status,), max_per_request=None)
    result = make_model(server).run(questions([1]))[0]
    assert result.text is None
    assert result.error is not None and f"HTTP {status} (not retried)" in result.error
    assert server.total_requests == 1


def test_wrong_key_is_loud_and_fails_the_batch_unsent(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    server.expected_key = "sk-test-the-right-one"
    with caplog.at_level(logging.ERROR, logger="pytest_restore.openai"):
        results = make_model(server, max_concurrency=2).run(questions(range(20)))
    assert all(r.text is None for r in results)
    assert all(r.error is not None and "401 authentication failed" in r.error for r in results)
    assert "OPENAI_API_KEY was rejected" in (results[0].error or "")
    assert server.total_requests <= 2  # the rest fail unsent
    errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errors) == 1 and "401" in errors[0].getMessage()
    assert DUMMY_KEY not in caplog.text and DUMMY_KEY not in repr(results)


def test_missing_key_on_a_keyed_server_says_so(server: OpenAIServer) -> None:
    server.expected_key = "sk-test-the-right-one"
    result = make_model(server).run(questions([1]))[0]
    assert result.error is not None and "OPENAI_API_KEY is not set" in result.error


def test_rate_meter_lets_a_burst_through_then_paces() -> None:
    now = [0.0]
    meter = RateMeter(1200, clock=lambda: now[0])  # 20/s, bursts of 20
    waits = [meter.reserve(1) for _ in range(40)]
    assert waits[:20] == [0.0] * 20
    assert waits[20:] == pytest.approx([0.05 * k for k in range(1, 21)])
    now[0] = 2.0  # the bucket drains at 20/s: empty again after the 2 s reserved
    assert meter.reserve(1) == 0.0


def test_rpm_meter_paces_requests(server: OpenAIServer) -> None:
    virtual = VirtualTime()
    # one call at a time, so the virtual clock is the time the run would take
    model = make_model(server, rpm=1200, max_concurrency=1, clock=virtual.clock, sleep=virtual.sleep)
    assert all(r.ok for r in model.run(questions(range(40))))
    assert server.total_requests == 40
    # a burst of 20, then the other 20 paced at 20/s: one second in all
    assert virtual.slept == pytest.approx([0.05] * 20)
    assert virtual.now == pytest.approx(1.0)


# -- the cache ---------------------------------------------------------------


def test_second_run_with_the_cache_sends_nothing(server: OpenAIServer, tmp_path: Path) -> None:
    requests = questions(range(25))
    first = make_model(server, cache=ResponseCache(tmp_path)).run(requests)
    sent = server.total_requests
    cache = ResponseCache(tmp_path)
    second = make_model(server, cache=cache).run(requests)

    assert sent == 25 and server.total_requests == 25
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.cached for r in second) and not any(r.cached for r in first)
    assert [(r.input_tokens, r.output_tokens, r.extra) for r in second] == [
        (r.input_tokens, r.output_tokens, r.extra) for r in first
    ]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.writes) == (25, 0, 0)
    assert all(cache.contains(MODEL, request) for request in requests)
    assert not cache.contains("gpt-4o", requests[0])  # the model is part of the key


def test_cache_layout_is_fanned_out_and_atomic(server: OpenAIServer, tmp_path: Path) -> None:
    requests = questions(range(10))
    make_model(server, cache=ResponseCache(tmp_path)).run(requests)
    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 10 and all(p.suffix == ".json" for p in files)  # no temp or lock left
    for request in requests:
        key = request_key(MODEL, request)
        entry = json.loads((tmp_path / key[:2] / f"{key}.json").read_text())
        assert entry["text"] == f"echo: {request.messages[-1][1]}"
        assert entry["served_model"] == MODEL + SNAPSHOT_SUFFIX
        assert entry["input_tokens"] > 0


def test_failures_are_not_cached(server: OpenAIServer, tmp_path: Path) -> None:
    server.faults = Faults(rate=1.0, kinds=("500",), max_per_request=None)
    cache = ResponseCache(tmp_path)
    assert make_model(server, cache=cache, max_tries=2).run(questions([1]))[0].text is None
    assert len(cache) == 0
    server.faults = Faults()
    assert make_model(server, cache=cache).run(questions([1]))[0].text == "echo: question 1"
    assert server.total_requests == 3


def test_a_failure_is_shared_by_the_processes_of_one_run_only(server: OpenAIServer, tmp_path: Path) -> None:
    server.faults = Faults(rate=1.0, kinds=("500",), max_per_request=None)
    first = make_model(server, cache=ResponseCache(tmp_path, run="run-1"), max_tries=2).run(questions([1]))[0]
    assert first.error is not None and server.total_requests == 2
    # another process of the same run (a model on the same cache): the same outcome, nothing sent
    shared = make_model(server, cache=ResponseCache(tmp_path, run="run-1"), max_tries=2).run(questions([1]))[0]
    assert (shared.text, shared.error) == (None, first.error) and server.total_requests == 2
    # the next run tries again, and its success ends the failure
    server.faults = Faults()
    again = make_model(server, cache=ResponseCache(tmp_path, run="run-2")).run(questions([1]))[0]
    assert again.text == "echo: question 1" and server.total_requests == 3
    assert not list(tmp_path.rglob("*.failed"))


def test_two_processes_sharing_a_cache_send_each_request_once(tmp_path: Path) -> None:
    # Overlapping ranges walked in opposite directions, so both processes
    # reach the shared questions 30..59 at about the same time.
    with OpenAIServer(latency=0.03) as server:
        children = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, server.base_url, str(tmp_path), *args],
                stdout=subprocess.PIPE,
                text=True,
            )
            for args in (("0", "60", "1"), ("89", "29", "-1"))
        ]
        outputs = [json.loads(child.communicate(timeout=60)[0]) for child in children]
        attempts = server.attempts

    assert all(child.returncode == 0 for child in children)
    assert outputs[0]["texts"] == [f"echo: question {i}" for i in range(60)]
    assert outputs[1]["texts"] == [f"echo: question {i}" for i in range(89, 29, -1)]
    assert len(attempts) == 90 and set(attempts.values()) == {1}
    print("requests that waited for the other process:", [out["waits"] for out in outputs])


def test_damaged_entry_is_a_miss_and_is_rewritten(server: OpenAIServer, tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    request = questions([1])[0]
    path = cache.entry_path(request_key(MODEL, request))
    path.parent.mkdir(parents=True)
    path.write_text('{"text": ')
    assert not cache.contains(MODEL, request)
    assert make_model(server, cache=cache).run([request])[0].text == "echo: question 1"
    assert cache.contains(MODEL, request) and server.total_requests == 1


def test_rerun_after_a_partial_run_resends_nothing_completed(
    server: OpenAIServer, tmp_path: Path
) -> None:
    requests = questions(range(40))
    make_model(server, cache=ResponseCache(tmp_path)).run(requests[:20])
    results = make_model(server, cache=ResponseCache(tmp_path)).run(requests)
    assert all(r.ok for r in results)
    assert [r.cached for r in results] == [True] * 20 + [False] * 20
    assert len(server.attempts) == 40 and set(server.attempts.values()) == {1}


def test_rerun_after_a_killed_run_resends_only_unfinished(tmp_path: Path) -> None:
    requests = questions(range(80))
    with OpenAIServer(latency=0.05) as server:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, server.base_url, str(tmp_path), "0", "80", "1"],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while sum(server.successes.values()) < 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(child.pid, signal.SIGKILL)  # mid-run, locks held, no clean-up
        child.wait(timeout=10)
        cache = ResponseCache(tmp_path, lock_timeout=5)
        done_before = {i for i, request in enumerate(requests) if cache.contains(MODEL, request)}
        assert 0 < len(done_before) < len(requests)
        server.reset_counters()
        results = make_model(server, cache=cache, max_concurrency=16).run(requests)
        attempts = server.attempts

    assert [r.text for r in results] == [f"echo: question {i}" for i in range(80)]
    resent = {i for i, request in enumerate(requests) if attempts[body_of(request)]}
    assert resent == set(range(80)) - done_before
    assert set(attempts.values()) == {1}
    # the killed process's locks died with it: no request waited for one
    assert cache.stats().waits == 0


# -- the key never leaks -------------------------------------------------------


def test_api_key_is_never_written_or_logged(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    caplog.set_level(logging.DEBUG)
    faults = Faults(rate=0.3, kinds=("429", "500", "malformed", "drop"), seed=3)
    with OpenAIServer(faults=faults, expected_key=DUMMY_KEY) as server:
        progress = Progress(stream=sys.stderr, tty=False, log_interval=0.0)
        model = make_model(server, cache=ResponseCache(tmp_path), progress=progress)
        results = model.run(questions(range(30)))
        progress.close()
        assert all(r.ok for r in results)  # the key was sent, and accepted
        assert server.total_requests > 30  # and there were retries to log
        server.expected_key = "sk-test-another-key"
        rejected = make_model(server, max_tries=2).run(questions([99]))[0]
        assert rejected.error is not None

    captured = capfd.readouterr()
    assert "model calls" in captured.err
    for text in (
        captured.out,
        captured.err,
        caplog.text,
        repr(model),
        repr(results),
        str(rejected),
    ):
        assert DUMMY_KEY not in text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert DUMMY_KEY.encode() not in path.read_bytes(), path


# -- cost control ----------------------------------------------------------------


def test_estimate_tokens_counts_distinct_requests() -> None:
    one = ChatRequest(messages=(("system", "Be brief."), ("user", "What is 2+2?")), max_tokens=10)
    other = ChatRequest(messages=(("user", "hello"),), max_tokens=5)
    input_one, output_one = estimate_tokens([one])
    assert output_one == 10
    assert input_one > 4 + 4 + 3  # content plus per-message and reply overhead
    assert estimate_tokens([one, one]) == (input_one, output_one)
    both = estimate_tokens([one, other, one])
    assert both[1] == 15 and both[0] > input_one
    assert estimate_tokens([]) == (0, 0)


# -- progress --------------------------------------------------------------------


def test_progress_redraws_one_line_on_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress(stream=stream, tty=True, tty_interval=0.0, label="reader")
    progress.add_total(3)
    progress.record(cached=True)
    progress.retry()
    progress.record(failed=True)
    progress.record()
    progress.close()
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and "\r" in text
    assert "reader done: 3/3 | cached 1 | retries 1 | failed 1" in text


def test_progress_in_a_log_prints_steps_and_a_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    stream = io.StringIO()
    progress = Progress(stream=stream, tty=False, log_interval=3600)
    progress.add_total(100)
    for _ in range(100):
        progress.record()
    progress.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert len(lines) == 11  # one per 10% and the summary
    assert all(line.startswith("[gw1] model calls") for line in lines)
    assert lines[-1].startswith("[gw1] model calls done: 100/100")


def test_quiet_progress_prints_nothing_but_counts() -> None:
    stream = io.StringIO()
    progress = Progress(stream=stream, quiet=True, tty=True)
    progress.add_total(2)
    progress.record()
    progress.close()
    assert stream.getvalue() == "" and progress.done == 1


# -- hostile and broken servers (issue 12) -----------------------------------------


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("non-json-200", "failed after 2 tries: malformed response"),
        ("missing-choices", "failed after 2 tries: malformed response: KeyError"),
        ("null-content", "failed after 2 tries: empty reply"),
        ("huge-reply", "reply too long: 2,000,000 characters for a budget of 8 tokens"),
    ],
)
def test_broken_replies_fail_the_call_and_are_not_cached(
    server: OpenAIServer, tmp_path: Path, mode: str, error: str
) -> None:
    server.mode = mode
    model = make_model(server, max_tries=2, cache=ResponseCache(tmp_path))
    result = model.run(questions([1]))[0]
    assert result.text is None and result.error is not None and result.error.startswith(error), result.error
    assert len(ResponseCache(tmp_path)) == 0  # nothing of it stored, the huge reply above all
    assert sum(model.failure_causes.values()) == 1
    # a huge reply is not asked for again: it would cost as much the second time
    assert server.total_requests == (1 if mode == "huge-reply" else 2)


@pytest.mark.parametrize("mode", ["401-echo-key", "404-model"])
def test_wrong_key_or_model_fails_at_once_and_is_kept_as_fatal(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    server.mode = mode
    model = make_model(server)
    results = model.run(questions(range(10)))
    assert all(r.text is None for r in results)
    assert server.total_requests == 1  # the adaptive limit starts at one call: the rest go unsent
    assert model.fatal_error is not None and ("401" if mode.startswith("401") else "404") in model.fatal_error
    assert DUMMY_KEY not in caplog.text and DUMMY_KEY not in repr(results) and DUMMY_KEY not in model.fatal_error


def test_retry_after_beyond_the_cap_fails_the_call_and_says_so(server: OpenAIServer) -> None:
    server.mode = "429-huge-retry-after"
    virtual = VirtualTime()
    model = make_model(server, max_retry_after=5, clock=virtual.clock, sleep=virtual.sleep)
    result = model.run(questions([1]))[0]
    assert virtual.slept == []  # not slept through, nor backed off and sent again
    assert result.error is not None and "asked to wait 86400s, over the 5s cap" in result.error
    assert server.total_requests == 1


@pytest.mark.parametrize("mode", ["slow-drip", "hang"])
def test_timeout_bounds_the_whole_request(server: OpenAIServer, mode: str) -> None:
    server.mode = mode
    # a ~400-byte body would take ~20 s; every byte arrives within the timeout, so
    # only a bound on the whole request ends it (and an unbounded one ends in a reply)
    server.drip_interval = 0.05
    result = make_model(server, timeout=0.5, max_tries=2).run(questions([1]))[0]
    assert result.error == "failed after 2 tries: timed out after 0.5s"
    assert server.total_requests == 2


def test_a_key_echoed_in_the_answer_is_redacted_before_caching(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    server.mode = "echo-key"
    result = make_model(server, cache=ResponseCache(tmp_path)).run(questions([1]))[0]
    assert result.text == "echo: question 1 (your key is [redacted])"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert DUMMY_KEY.encode() not in path.read_bytes(), path


def key_forms(key: str) -> list[bytes]:
    """What must not be found anywhere: every run of MIN_KEY_FRAGMENT characters of the key, in both cases, and its base64."""
    runs = {key[i : i + MIN_KEY_FRAGMENT] for i in range(len(key) - MIN_KEY_FRAGMENT + 1)}
    forms = {r.encode() for r in runs} | {r.upper().encode() for r in runs} | {r.lower().encode() for r in runs}
    forms.add(base64.b64encode(key.encode()).rstrip(b"="))
    forms.add(base64.b64encode(f"user:{key}".encode())[8:-4])  # the key's part of a Basic-auth value
    return sorted(forms)


def test_a_key_echoed_in_other_forms_is_redacted_before_caching(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    server.mode = "echo-key-forms"  # cut short, upper case, base64 (Basic auth, URL-safe), %-encoded
    result = make_model(server, cache=ResponseCache(tmp_path)).run(questions([1]))[0]
    assert result.text is not None and result.text.startswith("echo: question 1 (key starts [redacted]")
    assert result.text.count("[redacted]") == 5, result.text
    stored = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
    for form in key_forms(DUMMY_KEY):
        assert form not in result.text.encode() and form not in stored, form


def test_redaction_leaves_ordinary_text_alone() -> None:
    redact = KeyRedactor(DUMMY_KEY)
    text = "The user adopted a dog in March; sk-test is a prefix, 0123 a number."
    assert redact(text) == text
    assert redact(f"a{DUMMY_KEY.lower()}b") == "a[redacted]b"
    assert redact("x" + DUMMY_KEY[3:3 + MIN_KEY_FRAGMENT - 1] + "x") == "x" + DUMMY_KEY[3:3 + MIN_KEY_FRAGMENT - 1] + "x"


def test_a_reset_connection_is_said_in_words(server: OpenAIServer) -> None:
    server.mode = "reset"
    result = make_model(server, max_tries=2).run(questions([1]))[0]
    assert result.error == (
        "failed after 2 tries: connection error: the server reset the connection before its reply was complete"
    )


def run_within(seconds: float, model: OpenAIChatModel, requests: list[ChatRequest]) -> list[ChatResult]:
    """``model.run(requests)``, failing the test if it has not returned within ``seconds``."""
    out: list[list[ChatResult]] = []
    thread = threading.Thread(target=lambda: out.append(model.run(requests)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"model.run did not return within {seconds} s"
    return out[0]


def test_a_full_disk_under_the_cache_stops_the_run_in_one_line_and_never_hangs(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache_dir = tmp_path / "cache"
    cache = ResponseCache(cache_dir)
    full_disk(monkeypatch, cache_dir)
    said = f"response cache {cache_dir}: cannot write: No space left on device"
    model = make_model(server, cache=cache)
    first = run_within(20, model, questions([1, 2]))
    assert [r.error for r in first] == [said, said] and model.fatal_error == said
    # the same requests again, as the next cell asks them: no lock of the first try is left held
    again = run_within(20, make_model(server, cache=cache), questions([1, 2]))
    assert [r.error for r in again] == [said, said]
    assert server.total_requests == 0  # nothing paid for that could not be kept
    assert not list(cache_dir.rglob("*.lock"))  # no lock file left behind


def test_a_reply_that_cannot_be_stored_is_kept_and_the_run_stops(
    server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = ResponseCache(tmp_path)
    real_write = ResponseCache._write

    def full(self: ResponseCache, path: Path, entry: dict[str, object]) -> None:
        full_disk(monkeypatch, tmp_path)  # the disk fills while the first reply is on its way
        real_write(self, path, entry)

    monkeypatch.setattr(ResponseCache, "_write", full)
    model = make_model(server, cache=cache, max_concurrency=1, adaptive=False)
    first, second = run_within(20, model, questions([1, 2]))
    assert first.text == "echo: question 1"  # paid for: used, though not kept
    assert second.error is not None and "No space left on device" in second.error
    assert model.fatal_error is not None and server.total_requests == 1


@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_a_cache_that_cannot_be_written_is_said_in_one_line(tmp_path: Path, kind: str) -> None:
    where = tmp_path / "cache"
    if kind == "file":
        where.write_text("not a directory")
        assert cache_problem(where) == f"response cache {where}: not a directory (a file is in its place)"
        return
    where.mkdir()
    where.chmod(0o500)
    try:
        if os.access(where, os.W_OK):
            pytest.skip("running as root: a read-only directory is writable")
        assert cache_problem(where) == f"response cache {where}: cannot write into it: Permission denied"
    finally:
        where.chmod(0o700)


@pytest.mark.parametrize("where", ["refused", "unresolvable"])
def test_unreachable_server_is_reported_within_seconds(where: str) -> None:
    with refused_port() as port:  # nobody listens there
        base_url = f"http://127.0.0.1:{port}/v1" if where == "refused" else "http://no-such-host.invalid/v1"
        virtual = VirtualTime()
        # default tries and backoff: a retried call would sleep seconds between tries
        model = OpenAIChatModel(model=MODEL, base_url=base_url, timeout=30, clock=virtual.clock, sleep=virtual.sleep)
        _OPEN_MODELS.append(model)
        result = model.run(questions([1]))[0]
    assert virtual.slept == []  # one try, no backoff: said at once
    assert result.error is not None and "(not retried: " in result.error, result.error
    assert "is unreachable" in result.error
    assert model.fatal_error == result.error  # the run stops on it


def test_reasoning_families_get_their_own_parameters(server: OpenAIServer) -> None:
    # the server answers max_tokens or temperature=0 to these models with the real API's 400
    for name in ("gpt-5.4-mini", "o4-mini", "o3"):
        model = OpenAIChatModel(model=name, base_url=server.base_url, timeout=2)
        _OPEN_MODELS.append(model)
        result = model.run(questions([1]))[0]
        assert result.text == "echo: question 1", result.error
    body = server.log[-1].body
    assert body is not None and "max_tokens" not in body and "temperature" not in body
    assert body["max_completion_tokens"] > 8 and body["reasoning_effort"] == "low"
    plain = make_model(server).run(questions([2]))[0]
    assert plain.ok and server.log[-1].body["temperature"] == 0  # type: ignore[index]


def test_the_server_rejects_classic_parameters_for_reasoning_models(server: OpenAIServer) -> None:
    # guards the guard: without the family rule, this is the reply a user would get
    import openai

    client = openai.OpenAI(api_key="x", base_url=server.base_url, max_retries=0)
    with pytest.raises(openai.BadRequestError, match="max_completion_tokens"):
        client.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
    client.close()


@pytest.mark.parametrize(
    "damage", ["random-bytes", "directory", "other-json", "wrong-types", "not-a-verdict"]
)
def test_damaged_cache_entries_are_misses_resent_and_replaced(
    server: OpenAIServer, tmp_path: Path, damage: str
) -> None:
    cache = ResponseCache(tmp_path)
    request = questions([1])[0]
    path = cache.entry_path(request_key(MODEL, request))
    path.parent.mkdir(parents=True)
    if damage == "random-bytes":
        path.write_bytes(os.urandom(512))
    elif damage == "directory":
        (path / "inside").mkdir(parents=True)
    elif damage == "other-json":
        path.write_text('["a", "list"]')
    elif damage == "wrong-types":
        path.write_text('{"text": "x", "input_tokens": "many"}')
    else:  # a whole, well-formed entry whose text the judge's validator rejects
        path.write_text(json.dumps({"text": "MAYBE", "input_tokens": 1, "output_tokens": 1}))
    assert cache.peek(request_key(MODEL, request)) is None or damage == "not-a-verdict"
    validator = (lambda text: text.startswith("echo")) if damage == "not-a-verdict" else None
    result = make_model(server, cache=cache, validator=validator).run([request])[0]
    assert result.text == "echo: question 1" and server.total_requests == 1
    assert path.is_file() and json.loads(path.read_text())["text"] == "echo: question 1"


def test_one_slot_server_is_not_flooded(tmp_path: Path) -> None:
    # a local server computing one request at a time; 16 at once would time out and be computed twice
    with OpenAIServer(latency=0.15, slots=1) as server:
        model = make_model(server, timeout=1.0, max_concurrency=16)
        results = model.run(questions(range(24)))
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]
        assert max(server.computed.values()) == 1 and len(server.computed) == 24
        assert model.concurrency_peak <= 3
