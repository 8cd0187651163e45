"""Anthropic's Message Batches (issue 42): ``anthropic:`` models under ``--restore-batch``.

The loopback server (``anthropic_server.MessageBatches``) keeps the real
API's rules: request ids of at most 64 characters of ``[a-zA-Z0-9_-]``,
unique in their batch; ``in_progress`` until every request succeeded,
errored, was canceled or expired, then ``ended``; results at the batch's
``results_url`` only once it has ended, in any order; no metadata on a
batch. Its requests are answered by its own Messages logic (the project's
fake models behind the wire), so a grid run by batch writes the records of
the same grid run live. The first tests drive the runner in process through
the provider's batch interface; the grid tests run the plugin on the tiny
fixture.
"""

from __future__ import annotations

import http.client
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic_server import BATCHES, MESSAGES, VERSION, AnthropicServer
from grid_helpers import GRID, TINY, small_args
from openai_server import OpenAIServer, echo_responder, fake_models_responder

from pytest_restore.__main__ import main
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import History, build_history
from pytest_restore.models.anthropic_messages import (
    API_KEY_ENV,
    BASE_URL_ENV,
    AnthropicAPI,
    AnthropicProvider,
)
from pytest_restore.models.api import ModelOptions
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.batch import (
    BatchChatModel,
    BatchError,
    BatchItem,
    BatchOptions,
    BatchRunner,
    Ledger,
)
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.prompts import JUDGE_SYSTEM
from pytest_restore.models.providers import VALIDATORS, price_of

KEY = "sk-ant-test-BATCH-0123456789abcdef"
#: The OpenAI server's key, for the grid that batches both providers.
OPENAI_KEY = "sk-test-BATCH-MIXED-0123456789"
MODEL = "claude-haiku-4-5"
SPEC = f"anthropic:{MODEL}"
#: Four cells: a policy that calls the scorer and one that does not, at two budgets.
FEW_CELLS = ["--restore-policies", "fifo,llm-importance", "--restore-budgets", "600,100", "--restore-calibration", "off"]
ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture(scope="module")
def histories() -> list[History]:
    """What the fake reader behind the server knows."""
    return [build_history(q) for q in load_dataset(TINY).questions if not q.is_abstention]


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key the servers expect; no base URL from the environment (each test names its server)."""
    monkeypatch.setenv(API_KEY_ENV, KEY)
    for name in (BASE_URL_ENV, "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def echo() -> Iterator[AnthropicServer]:
    """A server whose Messages logic echoes the last message."""
    with AnthropicServer(echo_responder, expected_key=KEY) as running:
        yield running


def runner_for(server: AnthropicServer, cache: Path, said: list[str], **kwargs: Any) -> BatchRunner:
    """A runner through Anthropic's batch interface on ``server`` that polls at once."""
    client = AnthropicProvider().batches(server.base_url)
    return BatchRunner(cache, VALIDATORS, poll=0.001, say=said.append, client=client, **kwargs)


def items(n: int, role: str = "reader", start: int = 0) -> list[BatchItem]:
    """``n`` distinct requests to the Anthropic model (named as its replies are cached)."""
    return [BatchItem(role, SPEC, ChatRequest((("user", f"question {i}"),), max_tokens=40)) for i in range(start, start + n)]


def raw(server: AnthropicServer, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    """One request as a client without this project's would send it."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    headers = {"x-api-key": KEY, "anthropic-version": VERSION, "content-type": "application/json"}
    try:
        connection.request(method, path, json.dumps(body) if body is not None else None, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def batch_requests(server: AnthropicServer) -> int:
    """Every request the server's Message Batches API received."""
    return sum(1 for entry in server.log if entry.path.startswith(BATCHES))


def live_calls(server: AnthropicServer) -> int:
    """Live Messages calls the server received (batch requests are not among them)."""
    return sum(1 for entry in server.log if entry.path == MESSAGES)


# -- 1. the server's rules ----------------------------------------------------------------------


def test_the_server_keeps_the_message_batches_rules(echo: AnthropicServer) -> None:
    params = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    status, body = raw(echo, "POST", BATCHES, {"requests": [{"custom_id": "reader-" + "0" * 64, "params": params}]})
    assert status == 400 and "should match pattern" in json.loads(body)["error"]["message"]
    twice = [{"custom_id": "a", "params": params}, {"custom_id": "a", "params": params}]
    assert raw(echo, "POST", BATCHES, {"requests": twice})[0] == 400
    broken = {"model": MODEL, "messages": [{"role": "system", "content": "no"}]}  # checked as it runs: errored
    status, body = raw(echo, "POST", BATCHES, {"requests": [{"custom_id": "a", "params": params}, {"custom_id": "b", "params": broken}]})
    batch = json.loads(body)
    assert status == 200 and batch["processing_status"] == "in_progress" and batch["results_url"] is None
    assert raw(echo, "GET", f"{BATCHES}/{batch['id']}/results")[0] == 400  # not before it has ended
    ended = json.loads(raw(echo, "GET", f"{BATCHES}/{batch['id']}")[1])
    assert ended["processing_status"] == "ended" and ended["request_counts"]["errored"] == 1
    status, lines = raw(echo, "GET", ended["results_url"].removeprefix(echo.base_url))
    results = {line["custom_id"]: line["result"] for line in map(json.loads, lines.decode().splitlines())}
    assert status == 200 and results["a"]["type"] == "succeeded" and results["b"]["type"] == "errored"
    assert results["b"]["error"]["error"]["type"] == "invalid_request_error"


# -- 2. rounds through the provider's batch interface ----------------------------------------------


def test_a_round_is_one_batch_of_the_live_bodies_and_a_rerun_sends_nothing(echo: AnthropicServer, tmp_path: Path) -> None:
    echo.message_batches.behaviour.lines_per_poll = 12
    options = ModelOptions(cache_dir=tmp_path / "cache", base_url=echo.base_url, batch=BatchOptions(poll=0.001), quiet=True)
    model = AnthropicProvider().make(MODEL, "reader", options)
    assert isinstance(model, BatchChatModel)
    requests = [ChatRequest((("system", "be brief"), ("user", f"question {i}")), max_tokens=40) for i in range(30)]
    answers = model.run(requests)
    model.close()
    assert [a.text for a in answers] == [f"echo: question {i}" for i in range(30)]
    assert len(echo.message_batches.created) == 1 and live_calls(echo) == 0
    (batch,) = echo.message_batches.batches.values()
    # each request's params are exactly the live call's body; its id one the API takes
    live = AnthropicAPI(MODEL, echo.base_url)
    assert [r["params"] for r in batch.requests] == [live.chat_request(r)[1] for r in requests]
    assert all(ID.match(r["custom_id"]) for r in batch.requests)
    assert len(ResponseCache(tmp_path / "cache")) == 30
    (entry,) = Ledger(tmp_path / "cache").entries()
    assert (entry.provider, entry.state, entry.counts["completed"], entry.counts["total"]) == ("anthropic", "done", 30, 30)

    # the same requests again, through a new model on the same cache: not one request reaches the server
    sent = echo.total_requests
    again = AnthropicProvider().make(MODEL, "reader", options)
    assert [a.text for a in again.run(requests)] == [a.text for a in answers]
    again.close()
    assert echo.total_requests == sent


def test_errored_and_expired_requests_fail_by_cause_and_are_never_cached(tmp_path: Path) -> None:
    def judge(messages: list[dict[str, Any]]) -> str:
        text = messages[-1]["content"]
        if "boom" in text:
            raise ValueError("boom")  # the server's api_error
        return "CORRECT" if "good" in text else "I am not sure what you mean"

    asked = [
        BatchItem("judge", SPEC, ChatRequest((("system", JUDGE_SYSTEM), ("user", text)), max_tokens=8))
        for text in ("good 1", "good 2", "boom", "vague")
    ]
    with AnthropicServer(judge, expected_key=KEY) as server:
        outcome = runner_for(server, tmp_path / "cache", []).run_round("judge", asked)
        results = [outcome.results[i.custom_id] for i in asked]
        assert [r.text for r in results[:2]] == ["CORRECT", "CORRECT"]
        assert results[2].error == "batch api_error: responder: boom"
        assert (results[3].error or "").startswith("reply rejected by validator")
        assert len(ResponseCache(tmp_path / "cache")) == 2

        # a batch that expires with half its requests run: the half is kept, the rest fail by cause,
        # and --restore-batch-resubmit sends the rest once more, as a new batch
        server.message_batches.behaviour.expire_after = 5
        expiring = items(10, start=100)
        outcome = runner_for(server, tmp_path / "expired", []).run_round("reader", expiring)
        assert dict(outcome.failures()) == {"batch expired: the batch expired before this request ran (24h window)": 5}
        assert len(ResponseCache(tmp_path / "expired")) == 5
        outcome = runner_for(server, tmp_path / "resubmitted", [], resubmit=1).run_round("reader", expiring)
        assert len(outcome.created) == 2 and not outcome.failures()
        assert len(ResponseCache(tmp_path / "resubmitted")) == 10


def test_a_crash_between_create_and_record_is_found_and_not_submitted_again(echo: AnthropicServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    # a batch of the same size, already this cache's: never taken for the one the crash made
    runner_for(echo, cache, []).run_round("reader", items(5, start=50))
    asked = items(5)
    runner = runner_for(echo, cache, [])
    create = runner.client.create

    def made_then_killed(*args: Any) -> str:
        create(*args)  # the provider makes the batch ...
        raise KeyboardInterrupt  # ... and the session dies before the ledger names it

    runner.client.create = made_then_killed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        runner.run_round("reader", asked)
    assert len(echo.message_batches.created) == 2
    cut = [e for e in Ledger(cache).entries() if e.state == "submitting"]
    assert len(cut) == 1 and cut[0].batch_id == "" and cut[0].provider == "anthropic"

    said: list[str] = []
    outcome = runner_for(echo, cache, said).run_round("reader", asked)
    made = echo.message_batches.created[1]
    assert outcome.attached == [made] and outcome.created == [] and not outcome.failures()
    assert len(echo.message_batches.created) == 2  # submitted once
    assert f"found {made}, created by an interrupted session (not created again)" in " ".join(said)
    assert [outcome.results[i.custom_id].text for i in asked] == [f"echo: question {i}" for i in range(5)]


def test_two_batches_that_could_be_the_cut_create_stop_the_round_unsubmitted(echo: AnthropicServer, tmp_path: Path) -> None:
    cache, asked = tmp_path / "cache", items(3)
    runner = runner_for(echo, cache, [])

    def killed(*args: Any) -> str:
        raise KeyboardInterrupt  # the create never left; meanwhile two batches of 3 appear, not this cache's

    runner.client.create = killed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        runner.run_round("reader", asked)
    params = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    for n in range(2):
        requests = [{"custom_id": f"other-{n}-{i}", "params": params} for i in range(3)]
        assert raw(echo, "POST", BATCHES, {"requests": requests})[0] == 200
    with pytest.raises(BatchError) as info:
        runner_for(echo, cache, []).run_round("reader", asked)
    assert "cannot be told" in str(info.value) and "\n" not in str(info.value)
    assert len(echo.message_batches.created) == 2  # nothing submitted
    assert [e.state for e in Ledger(cache).entries()] == ["submitting"]


def test_a_create_that_made_the_batch_but_answered_500_is_found_not_paid_again(echo: AnthropicServer, tmp_path: Path) -> None:
    echo.message_batches.behaviour.create_failures = 1
    said: list[str] = []
    outcome = runner_for(echo, tmp_path / "cache", said).run_round("reader", items(4))
    assert len(echo.message_batches.created) == 1 and outcome.created == echo.message_batches.created
    assert not outcome.failures() and any("the provider made it" in line for line in said), said


def test_status_and_cancel_from_the_command_line(
    echo: AnthropicServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    echo.message_batches.behaviour.lines_per_poll = 4
    cache, asked = tmp_path / "cache", items(12)

    def stop_after_a_poll(seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner_for(echo, cache, [], sleep=stop_after_a_poll).run_round("reader", asked)
    capsys.readouterr()
    assert main(["batch", "status", "--cache", str(cache)]) == 0
    status = capsys.readouterr().out
    assert "pending (in_progress): 8/12 completed, 0 failed" in status, status
    assert main(["batch", "cancel", "--cache", str(cache)]) == 0
    assert "canceling" in capsys.readouterr().out

    # the next run harvests what the canceled batch answered, and fails the rest by cause
    outcome = runner_for(echo, cache, []).run_round("reader", asked)
    assert outcome.created == [] and len(ResponseCache(cache)) == 8
    assert dict(outcome.failures()) == {"batch canceled: the batch was canceled before this request ran": 4}
    assert not any(KEY.encode() in path.read_bytes() for path in cache.rglob("*") if path.is_file())


def test_an_exported_round_submitted_by_hand_is_imported_checked(
    echo: AnthropicServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_restore.models.providers import default_providers
    from pytest_restore.run.calls import export_round

    cache, source = tmp_path / "cache", tmp_path / "reader.in.jsonl"
    planned = [(SPEC, "reader", ChatRequest((("user", f"note {i}"),), max_tokens=40)) for i in range(4)]
    said, _ = export_round("reader", planned, source, cache, default_providers())
    assert said == [f"batch export: 4 {SPEC} requests of the reader round -> {source} (0 already cached, left out)"]
    requests = [json.loads(line) for line in source.read_text().splitlines()]
    assert all(set(r) == {"custom_id", "params"} and ID.match(r["custom_id"]) for r in requests)
    requests[0]["params"]["messages"][0]["content"] += " (edited)"  # changed after the export
    source.write_text("".join(json.dumps(r) + "\n" for r in requests))

    # the user submits the file's requests themselves and downloads the results
    created = json.loads(raw(echo, "POST", BATCHES, {"requests": requests})[1])
    ended = json.loads(raw(echo, "GET", f"{BATCHES}/{created['id']}")[1])
    results = raw(echo, "GET", ended["results_url"].removeprefix(echo.base_url))[1]
    (tmp_path / "reader.out.jsonl").write_bytes(results)
    capsys.readouterr()
    assert main(["batch", "import", str(tmp_path / "reader.out.jsonl"), "--cache", str(cache)]) == 1
    out = capsys.readouterr().out
    assert "import: 3 answers checked and cached" in out and "import: 1 lines refused: request differs from the exported one" in out
    cached = ResponseCache(cache)
    assert len(cached) == 3 and [cached.contains(SPEC, request) for _, _, request in planned] == [False, True, True, True]


# -- 3. the grid with --restore-batch ---------------------------------------------------------------


def _tokens(output: str) -> tuple[int, int]:
    """The dry run's input and output tokens to send, summed over its table's rows."""
    rows = [line.split() for line in output.splitlines() if line.startswith(("scorer ", "reader ", "judge "))]
    return sum(int(r[5].replace(",", "")) for r in rows), sum(int(r[6].replace(",", "")) for r in rows)


def _estimate(output: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith("estimated cost"))
    return float(line.split("$")[1].split()[0].replace(",", ""))


def test_an_anthropic_grid_by_batch_at_half_price_submitted_once_and_a_rerun_sends_nothing(
    histories: list[History], pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_grid=GRID)
    models = [f"--restore-{role}={SPEC}" for role in ("reader", "judge", "scorer")]
    args = ["-p", "no:xdist", *small_args(), *FEW_CELLS, *models]
    batch = ["--restore-batch", "--restore-batch-poll=0.01", f"--restore-cache={pytester.path / 'cache'}"]
    assert price_of(SPEC, batch=True) == (0.5, 2.5)
    with AnthropicServer(fake_models_responder(histories), expected_key=KEY) as server:
        monkeypatch.setenv(BASE_URL_ENV, server.base_url)
        # the dry run: the batch at half the live price, and its rounds
        dry = {}
        for name, extra in (("live", []), ("batch", batch)):
            result = pytester.runpytest_inprocess(*args, *extra, "--restore-dry-run")
            assert result.ret == 0, result.outlines
            dry[name] = result.stdout.str()
        # the same tokens, priced at the list price live and at half of it by batch
        tokens = _tokens(dry["live"])
        assert tokens == _tokens(dry["batch"]) and tokens[0] > 0
        usd = (tokens[0] * 1.00 + tokens[1] * 5.00) / 1e6  # claude-haiku-4-5's list price per million tokens
        assert (_estimate(dry["live"]), _estimate(dry["batch"])) == (round(usd, 2), round(usd / 2, 2))
        assert "at batch prices" in dry["batch"] and "batch rounds: 3 (scorer, reader, judge)" in dry["batch"]
        assert server.total_requests == 0

        # the grid by batch: three rounds, one batch each, every request in exactly one, nothing live
        first = pytester.runpytest_inprocess(*args, *batch, "--restore-report-dir=batch")
        first.assert_outcomes(passed=4)
        assert len(server.message_batches.created) == 3 and live_calls(server) == 0
        assert set(server.message_batches.requests_by_params.values()) == {1}
        output = first.stdout.str()
        for name in ("scorer", "reader", "judge"):
            assert f"restore: batch {name}: submitted msgbatch_" in output

        # the same grid again on the same cache: not one request reaches the server
        sent = server.total_requests
        again = pytester.runpytest_inprocess(*args, *batch, "--restore-report-dir=again")
        again.assert_outcomes(passed=4)
        assert server.total_requests == sent and "submitted msgbatch_" not in again.stdout.str()

        # the same grid live, on a cache of its own: the records the batches wrote
        live = pytester.runpytest_inprocess(*args, f"--restore-cache={pytester.path / 'live-cache'}", "--restore-report-dir=live")
        live.assert_outcomes(passed=4)
        assert live_calls(server) == sum(server.message_batches.requests_by_params.values())

    def records(report: str) -> list[dict[str, Any]]:
        out = [json.loads(line) for line in (pytester.path / report / "records.jsonl").read_text().splitlines()]
        for record in out:
            del record["run_id"]
        return out

    assert records("batch") == records("live") == records("again")
    summary = json.loads((pytester.path / "batch" / "summary.json").read_text())
    rounds = summary["run"]["checks"]["batch"]["result"]["rounds"]
    assert [r["round"] for r in rounds] == ["scorer", "reader", "judge"] and not any(r["failed"] for r in rounds)
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_a_grid_of_an_openai_reader_and_an_anthropic_judge_batches_each_provider_once_and_a_rerun_sends_nothing(
    histories: list[History], pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one grid, two providers: the reader's round goes to OpenAI's Batch API, the judge's to Anthropic's
    # Message Batches, each provider at its own server (the run's base URL is OpenAI's; Anthropic's its own)
    pytester.makepyfile(test_grid=GRID)
    cells = ["--restore-policies", "fifo", "--restore-budgets", "600,100", "--restore-calibration", "off"]
    models = ["--restore-reader=openai:fake-reader", f"--restore-judge={SPEC}"]
    with (
        OpenAIServer(fake_models_responder(histories), expected_key=OPENAI_KEY) as openai,
        AnthropicServer(fake_models_responder(histories), expected_key=KEY) as anthropic,
    ):
        monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
        monkeypatch.setenv(BASE_URL_ENV, anthropic.base_url)
        args = ["-p", "no:xdist", *small_args(), *cells, *models, f"--restore-base-url={openai.base_url}"]
        batch = ["--restore-batch", "--restore-batch-poll=0.01", f"--restore-cache={pytester.path / 'cache'}"]
        first = pytester.runpytest_inprocess(*args, *batch, "--restore-report-dir=batch")
        first.assert_outcomes(passed=2)
        # each provider's round submitted once, every request in exactly one batch, nothing sent live
        assert len(openai.batches.created) == 1 and set(openai.batches.lines_by_body.values()) == {1}
        assert len(anthropic.message_batches.created) == 1
        assert set(anthropic.message_batches.requests_by_params.values()) == {1}
        assert not any(entry.path == "/v1/chat/completions" for entry in openai.log) and live_calls(anthropic) == 0
        output = first.stdout.str()
        assert "restore: batch reader: submitted batch_" in output and "restore: batch judge: submitted msgbatch_" in output

        # the same grid again on the same cache: not one request reaches either server
        sent = (openai.total_requests, anthropic.total_requests)
        again = pytester.runpytest_inprocess(*args, *batch, "--restore-report-dir=again")
        again.assert_outcomes(passed=2)
        assert (openai.total_requests, anthropic.total_requests) == sent and "submitted" not in again.stdout.str()
    batch_records = (pytester.path / "batch" / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["reader"] for line in batch_records][:1] == ["openai:fake-reader"]
    for path in pytester.path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes() and OPENAI_KEY.encode() not in path.read_bytes(), path
