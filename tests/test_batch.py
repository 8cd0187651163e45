"""Batch execution (issue 24): the grid's calls through the Batch API, and batch files for other programs.

The loopback server (``openai_server.BatchAPI``) plays the Batch API as the
real one behaves: uploads, the statuses a batch goes through, request
counts, an output file in another order than the input, an error file, an
expiry that returns part of the output. Its batch lines are answered by its
own chat logic (the project's fake models behind the wire), so a grid run
by batch must write exactly the records of the same grid run live. The
first tests drive ``models/batch.py`` in process; the grid tests run the
plugin in a pytest subprocess on the tiny fixture.
"""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import GRID, TINY, child_env, small_args
from openai_server import OpenAIServer, echo_responder, fake_models_responder, refused_port
from test_providers import CleanRun, clean_run  # noqa: F401 - the live run the batch runs must match

from pytest_restore.__main__ import main
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import History, build_history
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.batch import BatchItem, BatchRunner, Ledger
from pytest_restore.models.cache import ResponseCache, request_key
from pytest_restore.models.openai_chat import OpenAIChatModel
from pytest_restore.models.prompts import JUDGE_SYSTEM
from pytest_restore.models.providers import VALIDATORS

DUMMY_KEY = "sk-test-BATCH-KEY-0123456789"
MODELS = {"reader": "openai:fake-reader", "judge": "openai:fake-judge", "scorer": "openai:fake-scorer"}
#: The grid of ``test_providers``'s clean live run (whose records and requests the batch runs must match).
GRID_ARGS = [*small_args(), "--restore-calibration=off", *(f"--restore-{role}={spec}" for role, spec in MODELS.items())]
CELLS = 18
CHAT = "/v1/chat/completions"


def chat_requests(server: OpenAIServer) -> int:
    """Live chat requests the server received (batch lines are not among them)."""
    return sum(1 for entry in server.log if entry.path == CHAT)


def records_of(report: Path) -> list[dict[str, Any]]:
    """A report's records without their run id."""
    records = [json.loads(line) for line in (report / "records.jsonl").read_text().splitlines()]
    for r in records:
        del r["run_id"]
    return records


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture(scope="module")
def histories() -> list[History]:
    """What the fake reader behind the server knows."""
    return [build_history(q) for q in load_dataset(TINY).questions if not q.is_abstention]


@pytest.fixture(scope="module")
def live(request: pytest.FixtureRequest) -> CleanRun:
    """``test_providers``'s clean run of the same grid, live: the records and requests a batch run must match."""
    run: CleanRun = request.getfixturevalue("clean_run")
    return run


@pytest.fixture
def echo() -> Iterator[OpenAIServer]:
    """A server whose chat logic echoes the last message (for the in-process tests)."""
    with OpenAIServer(echo_responder, expected_key=DUMMY_KEY) as running:
        yield running


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key the servers expect, in the environment the clients read."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def runner_for(server: OpenAIServer, cache: Path, said: list[str], **kwargs: Any) -> BatchRunner:
    """A runner on ``server`` that polls at once and keeps its progress lines in ``said``."""
    return BatchRunner(cache, VALIDATORS, base_url=server.base_url, poll=0.001, say=said.append, **kwargs)


def items(n: int, role: str = "reader", model: str = "gpt-4o-mini") -> list[BatchItem]:
    """``n`` distinct requests."""
    return [BatchItem(role, model, ChatRequest((("user", f"question {i}"),), max_tokens=40)) for i in range(n)]


# -- 1. formats ------------------------------------------------------------------------------


def test_an_input_line_carries_exactly_the_live_body() -> None:
    for model in ("gpt-4o-mini", "gpt-5.4-mini"):  # a chat family and a reasoning family
        request = ChatRequest((("system", "be brief"), ("user", "hi")), max_tokens=64)
        item = BatchItem("reader", model, request)
        line = json.loads(item.input_line())
        assert set(line) == {"custom_id", "method", "url", "body"}
        assert line["method"] == "POST" and line["url"] == CHAT
        assert line["body"] == OpenAIChatModel(model=model).body(request)
        assert line["custom_id"].startswith("reader-") and BatchItem.from_json(item.to_json()) == item


# -- 2. rounds against the loopback Batch API --------------------------------------------------


def test_a_round_reads_a_shuffled_output_file_and_a_rerun_submits_nothing(echo: OpenAIServer, tmp_path: Path) -> None:
    said: list[str] = []
    runner = runner_for(echo, tmp_path / "cache", said)
    asked = items(30)
    outcome = runner.run_round("reader", asked)

    assert len(echo.batches.created) == 1 and outcome.created == echo.batches.created
    assert [outcome.results[i.custom_id].text for i in asked] == [f"echo: question {i}" for i in range(30)]
    assert set(echo.batches.lines_by_body.values()) == {1}  # each request in exactly one batch
    batch = echo.batches.batches[outcome.created[0]]
    output = echo.batches.files[str(batch.output_file_id)][1].decode().splitlines()
    order = [json.loads(line)["custom_id"] for line in output]
    assert sorted(order) == sorted(i.custom_id for i in asked) and order != [i.custom_id for i in asked]
    # the statuses a real batch goes through, with its counts, on the progress line
    statuses = [line.split(": ")[1].split(",")[0] for line in said if "elapsed" in line]
    assert statuses == ["validating", "in_progress", "finalizing", "completed"], said
    assert "30/30 completed, 0 failed" in said[-1]
    assert chat_requests(echo) == 0

    assert len(ResponseCache(tmp_path / "cache")) == 30
    assert runner.uncached(asked) == []
    again = runner_for(echo, tmp_path / "cache", said)
    assert again.uncached(asked) == [] and len(echo.batches.created) == 1


def test_an_expired_batch_keeps_its_half_and_fails_the_rest_by_cause(echo: OpenAIServer, tmp_path: Path) -> None:
    echo.batches.behaviour.expire_after = 10
    asked = items(20)
    outcome = runner_for(echo, tmp_path / "cache", []).run_round("reader", asked)

    assert echo.batches.batches[outcome.created[0]].status == "expired"
    ok = [i for i in asked if outcome.results[i.custom_id].ok]
    assert len(ok) == 10 and len(ResponseCache(tmp_path / "cache")) == 10
    assert dict(outcome.failures()) == {"batch batch_expired: This request could not be executed before the completion window expired.": 10}

    # resubmitting: the rest goes out once more as a new batch, and every answer is in
    resubmitting = runner_for(echo, tmp_path / "other", [], resubmit=1)
    outcome = resubmitting.run_round("reader", asked)
    assert len(outcome.created) == 2 and not outcome.failures()
    assert len(ResponseCache(tmp_path / "other")) == 20


def test_error_lines_and_rejected_replies_are_failures_never_cached(tmp_path: Path) -> None:
    def judge(messages: list[dict[str, Any]]) -> str:
        text = messages[-1]["content"]
        if "boom" in text:
            raise ValueError("boom")  # the server's 500
        return "CORRECT" if "good" in text else "I am not sure what you mean"

    asked = [
        BatchItem("judge", "gpt-4o-mini", ChatRequest((("system", JUDGE_SYSTEM), ("user", text)), max_tokens=8))
        for text in ("good 1", "good 2", "boom", "vague")
    ]
    with OpenAIServer(judge, expected_key=DUMMY_KEY) as server:
        outcome = runner_for(server, tmp_path / "cache", []).run_round("judge", asked)
        batch = server.batches.batches[outcome.created[0]]
        assert batch.status == "completed" and batch.error_file_id is not None
    results = [outcome.results[i.custom_id] for i in asked]
    assert [r.text for r in results[:2]] == ["CORRECT", "CORRECT"]
    assert results[2].error is not None and results[2].error.startswith("HTTP 500 (in a batch): responder: boom")
    assert results[3].error is not None and results[3].error.startswith("reply rejected by validator")
    assert len(ResponseCache(tmp_path / "cache")) == 2


def test_ctrl_c_leaves_the_batch_running_and_the_next_runner_attaches(echo: OpenAIServer, tmp_path: Path) -> None:
    echo.batches.behaviour.hold = True
    polls = 0

    def interrupted_sleep(seconds: float) -> None:
        nonlocal polls
        polls += 1
        if polls == 3:
            raise KeyboardInterrupt

    said: list[str] = []
    asked = items(12)
    with pytest.raises(KeyboardInterrupt):
        runner_for(echo, tmp_path / "cache", said, sleep=interrupted_sleep).run_round("reader", asked)
    assert "still running at the provider and was not cancelled" in said[-1] and "batch cancel" in said[-1]
    (entry,) = Ledger(tmp_path / "cache").entries()
    assert entry.state == "pending" and entry.batch_id == echo.batches.created[0]

    echo.batches.behaviour.hold = False
    outcome = runner_for(echo, tmp_path / "cache", said).run_round("reader", asked)
    assert outcome.attached == [entry.batch_id] and outcome.created == []
    assert len(echo.batches.created) == 1 and not outcome.failures()
    assert Ledger(tmp_path / "cache").entries()[0].state == "done"


def test_status_and_cancel_from_the_command_line(
    echo: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    echo.batches.behaviour.lines_per_poll = 4

    def stop_after_a_poll(seconds: float) -> None:
        if echo.batches.batches[echo.batches.created[0]].answered:
            raise KeyboardInterrupt

    asked = items(12)
    cache = tmp_path / "cache"
    with pytest.raises(KeyboardInterrupt):
        runner_for(echo, cache, [], sleep=stop_after_a_poll).run_round("reader", asked)
    capsys.readouterr()
    assert main(["batch", "status", "--cache", str(cache)]) == 0
    status = capsys.readouterr().out
    assert "pending (in_progress)" in status and "8/12 completed" in status, status
    assert main(["batch", "cancel", "--cache", str(cache)]) == 0
    assert "cancelling" in capsys.readouterr().out

    # the next run harvests what the cancelled batch answered, and fails the rest by cause
    outcome = runner_for(echo, cache, []).run_round("reader", asked)
    assert outcome.created == [] and len(ResponseCache(cache)) == 8
    assert dict(outcome.failures()) == {
        "batch batch_cancelled: This request was not executed because the batch was cancelled.": 4
    }
    assert main(["batch", "cancel", "--cache", str(cache)]) == 0
    assert "nothing running" in capsys.readouterr().out


# -- 3. the grid with --restore-batch ------------------------------------------------------------


def grid_command(server: OpenAIServer, cache: Path, *extra: str) -> list[str]:
    """A child grid on ``server`` through ``cache``."""
    return ["-p", "no:xdist", *GRID_ARGS, f"--restore-base-url={server.base_url}", f"--restore-cache={cache}", *extra]


BATCH = ["--restore-batch", "--restore-batch-poll=0.01"]


#: Four of the grid's cells, for a test whose point needs no more: a policy that calls the scorer and one that
#: does not, at two budgets (the batch still has its three rounds, the scorer's as large as the whole grid's).
FEW_CELLS = ["--restore-policies=fifo,llm-importance", "--restore-budgets=600,100"]


def in_few_cells(record: dict[str, Any]) -> bool:
    """Whether the record (as ``records_of`` reads it) belongs to one of the ``FEW_CELLS``."""
    return record["policy"] in ("fifo", "llm-importance") and record["budget"] in (600, 100)


def batch_grid(
    pytester: pytest.Pytester, server: OpenAIServer, report: str, *extra: str, cells: int = CELLS
) -> pytest.RunResult:
    """The grid by batch through ``server``, in process, into the project's cache; every cell (``cells``) passes."""
    result = pytester.runpytest_inprocess(
        *grid_command(server, pytester.path / "cache", *BATCH, *extra), f"--restore-report-dir={report}"
    )
    result.assert_outcomes(passed=cells)
    return result


def test_a_batch_grid_writes_the_live_records_sends_no_live_call_and_a_rerun_submits_nothing(
    histories: list[History], pytester: pytest.Pytester, live: CleanRun
) -> None:
    pytester.makepyfile(test_grid=GRID)
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        output = batch_grid(pytester, server, "batch").stdout.str()
        assert chat_requests(server) == 0
        # three rounds (scorer, reader, judge), one batch each, each request in exactly one of them
        assert len(server.batches.created) == 3 and set(server.batches.lines_by_body.values()) == {1}
        # and they are exactly the requests the live grid sent
        assert set(server.batches.lines_by_body) == live.bodies
        # the same grid again, through the cache the batches filled: nothing to submit, nothing sent
        created = list(server.batches.created)
        again = batch_grid(pytester, server, "again").stdout.str()
        assert server.batches.created == created and chat_requests(server) == 0
    assert "nothing to submit" in again and "submitted" not in again
    assert records_of(pytester.path / "batch") == records_of(live.report)
    assert records_of(pytester.path / "again") == records_of(live.report)
    # the report says what the rounds did, for a person and for a program
    summary = json.loads((pytester.path / "batch" / "summary.json").read_text())
    rounds = summary["run"]["checks"]["batch"]["result"]["rounds"]
    assert [r["round"] for r in rounds] == ["scorer", "reader", "judge"]
    assert sum(r["answered"] for r in rounds) == len(live.bodies) and not any(r["failed"] for r in rounds)
    assert all(r["input_tokens"] > 0 and len(r["created"]) == 1 for r in rounds)
    assert "## Batch rounds" in (pytester.path / "batch" / "report.md").read_text()
    for name in ("scorer", "reader", "judge"):
        assert f"restore: batch {name} round: " in output and f"restore: batch {name}: submitted batch_" in output
    assert re.search(r"restore: batch judge batch_\w+: completed, \d+/\d+ completed, 0 failed, \dm\d\ds elapsed", output)


def _estimate(output: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith("estimated cost"))
    return float(line.split("$")[1].split()[0].replace(",", ""))


def test_the_dry_run_prices_a_batch_at_half_and_counts_its_rounds(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    # the grid under a model name with a built-in list price
    priced = [a for a in GRID_ARGS if not a.startswith(("--restore-reader", "--restore-judge", "--restore-scorer"))]
    priced += [f"--restore-{role}=openai:gpt-4o-mini" for role in MODELS]
    outputs = {}
    for name, extra in (("live", []), ("batch", ["--restore-batch"])):
        result = pytester.runpytest_inprocess("-p", "no:xdist", *priced, "--restore-dry-run", *extra)
        assert result.ret == 0, result.outlines
        outputs[name] = result.stdout.str()
    live, batch = outputs["live"], outputs["batch"]
    assert _estimate(live) > 0 and _estimate(batch) == pytest.approx(_estimate(live) / 2, abs=0.011)
    assert "at batch prices" in batch and "batch rounds: 3 (scorer, reader, judge)" in batch
    assert "batch rounds" not in live


def test_the_dry_run_counts_as_rounds_only_the_real_models_steps(pytester: pytest.Pytester) -> None:
    # a fake judge answers at once: the gate's judge steps are no batch round (the run makes 3, not 8)
    pytester.makepyfile(test_grid=GRID)
    args = [*small_args(), "--restore-reader=openai:gpt-4o-mini", "--restore-calibration=on", "--restore-batch"]
    result = pytester.runpytest_inprocess("-p", "no:xdist", *args, "--restore-dry-run")
    assert result.ret == 0, result.outlines
    assert "batch rounds: 3 (calibration oracle reader, calibration cell reader, reader)" in result.stdout.str()


def test_a_session_killed_mid_batch_attaches_to_it_when_started_again(
    histories: list[History], pytester: pytest.Pytester, live: CleanRun
) -> None:
    pytester.makepyfile(test_grid=GRID)
    cache = pytester.path / "cache"
    env = {**child_env(), "OPENAI_API_KEY": DUMMY_KEY}
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        server.batches.behaviour.hold = True  # the first batch stays in progress
        command = [sys.executable, "-m", "pytest", *grid_command(server, cache, *BATCH, *FEW_CELLS), "--restore-report-dir=killed"]
        with open(pytester.path / "killed.out", "w") as out:
            child = subprocess.Popen(command, cwd=pytester.path, env=env, stdout=out, stderr=subprocess.STDOUT)
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and child.poll() is None:
                    entries = Ledger(cache).entries()
                    if entries and entries[0].batch_id in server.batches.created:
                        break
                    time.sleep(0.05)
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait(timeout=10)
        assert len(server.batches.created) == 1, (pytester.path / "killed.out").read_text()[-3000:]
        first = server.batches.created[0]

        # the dry run knows what is already paid for
        dry = pytester.runpytest_inprocess(*grid_command(server, cache, *BATCH, *FEW_CELLS), "--restore-dry-run")
        assert "batch: 1 batches of this cache are still running (42 requests, not paid again" in dry.stdout.str()

        server.batches.behaviour.hold = False
        restarted = batch_grid(pytester, server, "restarted", *FEW_CELLS, cells=4).stdout.str()
        assert f"attaching to {first}" in restarted
        # the killed session's batch was not submitted again: one batch per round in all
        assert server.batches.created[0] == first and len(server.batches.created) == 3
        assert set(server.batches.lines_by_body.values()) == {1} and chat_requests(server) == 0
    assert records_of(pytester.path / "restarted") == [r for r in records_of(live.report) if in_few_cells(r)]


def test_an_expired_batch_stops_the_run_in_one_line(histories: list[History], pytester: pytest.Pytester) -> None:
    # (--restore-batch-resubmit sends the rest again instead: test_an_expired_batch_keeps_its_half_...)
    pytester.makepyfile(test_grid=GRID)
    cache = pytester.path / "cache"
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        server.batches.behaviour.expire_after = 21  # half of the scorer round's 42 requests
        result = pytester.runpytest_inprocess(*grid_command(server, cache, *BATCH, "--restore-report-dir=expired"))
        assert chat_requests(server) == 0
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    stop = [line for line in result.outlines if "requests failed" in line]  # pytest's exit line
    assert len(stop) == 1 and "batch scorer round: 21 of 42 requests failed (21 x batch batch_expired" in stop[0]
    assert "21 answers that came back are kept in the cache" in stop[0] and "--restore-batch-resubmit" in stop[0]
    assert "Traceback" not in output and len(ResponseCache(cache)) == 21
    assert not (pytester.path / "expired").exists()


# -- 4. offline batch files -----------------------------------------------------------------------


def answer_by_chat(source: Path, target: Path, base_url: str) -> None:
    """Another program: answers each line of a batch input file through a chat endpoint and writes
    the OpenAI batch output format (as vLLM's ``run_batch`` does), in its own order."""
    out = []
    for n, text in enumerate(source.read_text(encoding="utf-8").strip().split("\n")):  # as run_batch splits
        line = json.loads(text)
        request = urllib.request.Request(
            base_url.removesuffix("/v1") + line["url"],
            data=json.dumps(line["body"]).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {DUMMY_KEY}"},
        )
        with urllib.request.urlopen(request) as reply:
            body = json.loads(reply.read())
        out.append({
            "id": f"vllm-{n}",
            "custom_id": line["custom_id"],
            "response": {"status_code": 200, "request_id": f"vllm-batch-{n}", "body": body},
            "error": None,
        })
    random.Random(0).shuffle(out)
    target.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in out), encoding="utf-8")


def test_export_then_import_fills_the_cache_so_the_grid_sends_nothing(
    histories: list[History], pytester: pytest.Pytester, live: CleanRun, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_grid=GRID)
    here = pytester.path
    cache = here / "cache"
    # four of the grid's cells: each of the three rounds (scorer, reader, judge) goes out and back all the same
    grid = [*GRID_ARGS, *FEW_CELLS, f"--restore-cache={cache}"]

    def export(name: str) -> Path:
        target = here / f"{name}.in.jsonl"
        if name == "scorer":  # the command a user types (it runs the dry run's phases itself: no pytest run)
            capsys.readouterr()
            code = main(["batch", "export", "--round", name, "--out", str(target), "--", "-p", "no:xdist", *grid])
            said = capsys.readouterr()
            output = said.out + said.err
            assert code == 0, output[-3000:]
        else:  # what that command runs, in process (quicker)
            run = pytester.runpytest_inprocess(
                *grid, "--restore-dry-run", f"--restore-batch-export={target}", f"--restore-batch-round={name}"
            )
            output = run.stdout.str()
            assert run.ret == 0, output[-3000:]
        assert "batch export: " in output and f"of the {name} round -> {target}" in output, output[-3000:]
        return target

    # a round before the one it depends on: nothing is written, and the command says so and fails
    # (the command runs the dry run's phases itself: no pytest run; pytest's own arguments are said and ignored)
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", DUMMY_KEY)
        assert main(["batch", "export", "--round", "judge", "--out", str(here / "early.jsonl"), "--", "-p", "no:xdist", *grid]) == 1
    said = capsys.readouterr()
    assert "batch export: nothing written: the reader round needs every importance score" in said.out
    assert "error: batch export: nothing written to" in said.err and not (here / "early.jsonl").exists()
    assert "batch export: not the audit's options, ignored: -p no:xdist" in said.err

    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        for name in ("scorer", "reader"):
            source = export(name)
            answer_by_chat(source, here / f"{name}.out.jsonl", server.base_url)
            assert main(["batch", "import", str(here / f"{name}.out.jsonl"), "--cache", str(cache)]) == 0

        # the judge round: one request edited before the other program ran it, one line never exported
        source = export("judge")
        lines = source.read_text().splitlines()
        tampered = json.loads(lines[0])
        tampered["body"]["messages"][-1]["content"] += " (edited)"
        source.write_text("\n".join([json.dumps(tampered), *lines[1:]]) + "\n")
        answer_by_chat(source, here / "judge.out.jsonl", server.base_url)
        stray = json.loads((here / "judge.out.jsonl").read_text().splitlines()[0])
        stray["custom_id"] = "judge-" + "0" * 64
        with open(here / "judge.out.jsonl", "a") as handle:
            handle.write(json.dumps(stray) + "\n")
        capsys.readouterr()
        assert main(["batch", "import", str(here / "judge.out.jsonl"), "--cache", str(cache)]) == 1
        said = capsys.readouterr().out
        assert "import: 1 lines refused: request differs from the exported one" in said, said
        assert "import: 1 lines refused: custom_id never exported or submitted" in said, said
        assert f"import: {len(lines) - 1:,} answers checked and cached" in said, said

        # what was refused is exported again, answered and imported
        again = export("judge")
        assert len(again.read_text().splitlines()) == 1
        answer_by_chat(again, here / "judge2.out.jsonl", server.base_url)
        assert main(["batch", "import", str(here / "judge2.out.jsonl"), "--cache", str(cache)]) == 0

        before = chat_requests(server)
        run = pytester.runpytest_inprocess(*grid, f"--restore-base-url={server.base_url}", "--restore-report-dir=report")
        run.assert_outcomes(passed=4)
        assert chat_requests(server) == before  # the grid sent nothing
    assert records_of(here / "report") == [r for r in records_of(live.report) if in_few_cells(r)]
    assert DUMMY_KEY not in "".join(p.read_text() for p in (cache / "batches").glob("*.json*"))


def test_an_unreachable_batch_api_stops_the_run_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    with refused_port() as port:  # nothing listens there
        result = pytester.runpytest_inprocess(
            "-p", "no:xdist", *GRID_ARGS, f"--restore-base-url=http://127.0.0.1:{port}/v1",
            f"--restore-cache={pytester.path / 'cache'}", *BATCH,
        )
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    stop = [line for line in result.outlines if "--restore-batch: uploading the batch input file" in line]
    assert len(stop) == 1 and "APIConnectionError" in stop[0], output
    assert "Traceback" not in output and DUMMY_KEY not in output


def test_the_calibration_gate_and_the_judge_audit_run_as_rounds_of_their_own(
    histories: list[History], pytester: pytest.Pytester, live: CleanRun
) -> None:
    pytester.makepyfile(test_grid=GRID)
    args = [a for a in GRID_ARGS if a != "--restore-calibration=off"]
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        # four of the grid's cells: the gate and the judge audit are rounds of their own whatever the grid's size
        result = pytester.runpytest_inprocess(
            "-p", "no:xdist", *args, "--restore-calibration=on", "--restore-audit-judge=openai:fake-audit-judge",
            f"--restore-base-url={server.base_url}", f"--restore-cache={pytester.path / 'cache'}", *BATCH,
            *FEW_CELLS, "--restore-report-dir=report",
        )
        result.assert_outcomes(passed=4)
        # a graded answer of the gate is asked three times: its first grade and the two repeats, which
        # are real calls by design (a judge without the cache); every other request once
        assert chat_requests(server) == 0 and set(server.batches.lines_by_body.values()) == {1, 3}
        models = {json.loads(body)["model"] for body in server.batches.lines_by_body}
    output = result.stdout.str()
    assert "calibration gate passed" in output
    # the gate's judge rounds, each its own batch: its oracle's and its cell's grades, two repeats by a
    # judge without the cache (a repeat is a real second call), its probes; then the judge audit's
    said = result.stderr.str()  # a model's own rounds speak on stderr, as its live progress does
    assert said.count("restore: batch judge calls: submitted") == 6 and "fake-audit-judge" in models
    assert records_of(pytester.path / "report") == [r for r in records_of(live.report) if in_few_cells(r)]
    report = (pytester.path / "report" / "report.md").read_text()
    assert "Second judge `openai:fake-audit-judge` re-graded" in report and "; 0 excluded (0 failed calls" in report


def test_a_second_session_with_the_same_calls_attaches_instead_of_paying_again(
    echo: OpenAIServer, tmp_path: Path
) -> None:
    import threading

    echo.batches.behaviour.hold = True
    asked = items(10)
    outcomes = []
    first = threading.Thread(
        target=lambda: outcomes.append(runner_for(echo, tmp_path / "cache", []).run_round("reader", asked))
    )
    first.start()
    deadline = time.monotonic() + 30
    while not Ledger(tmp_path / "cache").entries() and time.monotonic() < deadline:
        time.sleep(0.01)
    second = threading.Thread(
        target=lambda: outcomes.append(runner_for(echo, tmp_path / "cache", []).run_round("reader", asked))
    )
    second.start()
    time.sleep(0.2)
    echo.batches.behaviour.hold = False
    first.join(30)
    second.join(30)
    assert len(outcomes) == 2 and len(echo.batches.created) == 1
    assert sorted(len(o.created) for o in outcomes) == [0, 1] and sorted(len(o.attached) for o in outcomes) == [0, 1]
    assert all(not o.failures() and len(o.results) == 10 for o in outcomes)


# -- 5. hostile cases (issue 32) --------------------------------------------------------------------

#: Characters ``str.splitlines()`` ends a line at that a JSON string holds unescaped.
SEPARATORS = "\u2028\u2029\x85"


def test_batch_answers_holding_a_line_separator_are_accepted_and_not_paid_again(
    echo: OpenAIServer, tmp_path: Path
) -> None:
    asked = [BatchItem("reader", "gpt-4o-mini", ChatRequest((("user", f"q{i}{SEPARATORS}end"),), max_tokens=40))
             for i in range(3)]
    outcome = runner_for(echo, tmp_path / "cache", []).run_round("reader", asked)
    batch = echo.batches.batches[outcome.created[0]]
    assert "\u2028" in echo.batches.files[str(batch.output_file_id)][1].decode()  # written unescaped
    assert [outcome.results[i.custom_id].text for i in asked] == [f"echo: q{i}{SEPARATORS}end" for i in range(3)]
    assert not outcome.failures()
    assert runner_for(echo, tmp_path / "cache", []).uncached(asked) == []  # kept: a rerun sends nothing


def test_an_export_holding_a_line_separator_imports_back(
    echo: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_restore.models.providers import default_providers
    from pytest_restore.run.calls import export_round

    cache, source = tmp_path / "cache", tmp_path / "reader.in.jsonl"
    planned = [("openai:gpt-4o-mini", "reader", ChatRequest((("user", f"note {i}{SEPARATORS}"),), max_tokens=40))
               for i in range(2)]
    export_round("reader", planned, source, cache, default_providers())
    assert "\u2028" in source.read_text(encoding="utf-8")
    answer_by_chat(source, tmp_path / "reader.out.jsonl", echo.base_url)
    capsys.readouterr()
    assert main(["batch", "import", str(tmp_path / "reader.out.jsonl"), "--cache", str(cache)]) == 0, capsys.readouterr()
    assert "import: 2 answers checked and cached" in capsys.readouterr().out
    hits = [ResponseCache(cache).peek(request_key("gpt-4o-mini", request)) for _, _, request in planned]
    assert [h.text if h else None for h in hits] == [f"echo: note {i}{SEPARATORS}" for i in range(2)]


@pytest.mark.parametrize("damage", ["gzip", "latin-1"])
def test_batch_import_of_a_gzip_or_non_utf8_file_is_one_line(
    echo: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    import gzip

    from pytest_restore.models.providers import default_providers
    from pytest_restore.run.calls import export_round

    cache, source, output = tmp_path / "cache", tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    planned = [("openai:gpt-4o-mini", "reader", ChatRequest((("user", "caf\u00e9 note"),), max_tokens=40))]
    export_round("reader", planned, source, cache, default_providers())
    answer_by_chat(source, output, echo.base_url)
    data = output.read_bytes()
    output.write_bytes(gzip.compress(data) if damage == "gzip" else data.decode().encode("latin-1"))
    capsys.readouterr()
    assert main(["batch", "import", str(output), "--cache", str(cache)]) == 2
    said = capsys.readouterr()
    assert said.out == "" and len(said.err.splitlines()) == 1, said
    assert said.err.startswith(f"error: {output}: ") and ("gzip" if damage == "gzip" else "not UTF-8") in said.err
    assert len(ResponseCache(cache)) == 0


def no_key_in(*texts: str) -> bool:
    """Whether the key is in none of ``texts``, in any form the redaction covers (a 10-character run of it)."""
    runs = {DUMMY_KEY[i : i + 10].lower() for i in range(len(DUMMY_KEY) - 9)}
    return not any(run in text.lower() for text in texts for run in runs)


def ledger_text(cache: Path) -> str:
    """Every ledger file of ``cache``, entries and requests."""
    return "".join(p.read_text(encoding="utf-8") for p in sorted((cache / "batches").glob("*.json*")))


def test_an_error_file_echoing_the_key_leaves_it_in_no_result_line_or_ledger(echo: OpenAIServer, tmp_path: Path) -> None:
    echo.batches.behaviour.line_error = "Incorrect API key provided: {key}. You can find your key at ..."
    said: list[str] = []
    outcome = runner_for(echo, tmp_path / "cache", said).run_round("reader", items(3))
    assert echo.batches.batches[outcome.created[0]].key == DUMMY_KEY  # the server did echo it
    (cause,) = outcome.failures()
    assert cause.startswith("HTTP 400 (in a batch): Incorrect API key provided: [redacted]"), cause
    assert no_key_in(cause, *said, ledger_text(tmp_path / "cache"))


def test_a_validation_error_echoing_the_key_stops_the_run_without_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    earlier = pytester.path / "report"
    earlier.mkdir()
    (earlier / "report.md").write_text("an earlier complete report\n")
    with OpenAIServer(echo_responder, expected_key=DUMMY_KEY) as server:
        server.batches.behaviour.validation_error = "Line 1: the request sent with key {key} is malformed."
        result = pytester.runpytest_inprocess(
            *grid_command(server, pytester.path / "cache", *BATCH), f"--restore-report-dir={earlier}"
        )
        assert len(server.batches.created) == 1 and chat_requests(server) == 0
    output = "\n".join(result.outlines + result.errlines)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    stop = [line for line in result.outlines if "requests failed" in line]
    assert len(stop) == 1 and "batch failed validation: Line 1: the request sent with key [redacted]" in stop[0], output
    assert "Traceback" not in output and no_key_in(output, ledger_text(pytester.path / "cache"))
    assert [p.name for p in earlier.iterdir()] == ["report.md"]  # the earlier report stays as it was
    assert (earlier / "report.md").read_text() == "an earlier complete report\n"


def test_batch_import_never_prints_a_key_an_error_line_echoes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_restore.models.providers import default_providers
    from pytest_restore.run.calls import export_round

    cache, source, output = tmp_path / "cache", tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    planned = [("openai:gpt-4o-mini", "reader", ChatRequest((("user", "a note"),), max_tokens=40))]
    export_round("reader", planned, source, cache, default_providers())
    custom_id = json.loads(source.read_text())["custom_id"]
    echoed = {"message": f"401: key {DUMMY_KEY} revoked", "code": f"bad_key_{DUMMY_KEY}"}
    output.write_text(json.dumps({"id": "x", "custom_id": custom_id, "response": None, "error": echoed}) + "\n")
    capsys.readouterr()
    assert main(["batch", "import", str(output), "--cache", str(cache)]) == 1
    said = capsys.readouterr()
    assert "import: 1 failed: batch bad_key_[redacted]: 401: key [redacted] revoked" in said.out, said
    assert no_key_in(said.out, said.err, ledger_text(cache))


def test_a_create_that_made_the_batch_but_answered_500_is_found_not_paid_again(echo: OpenAIServer, tmp_path: Path) -> None:
    echo.batches.behaviour.create_failures = 1
    said: list[str] = []
    asked = items(6)
    outcome = runner_for(echo, tmp_path / "cache", said).run_round("reader", asked)
    assert len(echo.batches.created) == 1 and outcome.created == echo.batches.created  # one batch, paid once
    assert not outcome.failures() and len(outcome.results) == 6
    assert any("creating the batch answered an error, but the provider made it" in line for line in said), said
    (entry,) = Ledger(tmp_path / "cache").entries()
    assert entry.batch_id == echo.batches.created[0] and entry.state == "done"


def test_a_create_that_failed_for_real_says_so_and_leaves_no_batch_pending(
    echo: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_restore.models.batch import BatchError

    asked = items(2)
    runner = runner_for(echo, tmp_path / "cache", [])
    runner.client.upload = lambda group: "file-nonesuch"  # type: ignore[method-assign] # a create the server refuses (404)
    with pytest.raises(BatchError) as info:
        runner.run_round("reader", asked)
    assert "creating the batch: NotFoundError" in str(info.value) and "no batch carrying" in str(info.value)
    assert echo.batches.created == [] and [e.state for e in Ledger(tmp_path / "cache").entries()] == ["not created"]
    capsys.readouterr()
    assert main(["batch", "status", "--cache", str(tmp_path / "cache")]) == 0
    assert capsys.readouterr().out.startswith("batch-")  # named by its entry: it has no batch id


def test_ctrl_c_during_a_slow_create_leaves_an_entry_the_next_run_finds(echo: OpenAIServer, tmp_path: Path) -> None:
    import _thread
    import threading

    echo.batches.behaviour.create_delay = 1.0
    asked = items(5)
    said: list[str] = []

    def interrupt_once_the_create_is_sent() -> None:
        deadline = time.monotonic() + 30
        while not any(e.path == "/v1/files" for e in echo.log) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the create is on its way, its reply a second off
        _thread.interrupt_main()

    threading.Thread(target=interrupt_once_the_create_is_sent, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        runner_for(echo, tmp_path / "cache", said).run_round("reader", asked)
    assert "interrupted while creating a batch of 5 gpt-4o-mini requests: one may exist" in said[-1], said
    (entry,) = Ledger(tmp_path / "cache").entries()
    assert entry.state == "submitting" and entry.intent
    deadline = time.monotonic() + 30
    while not echo.batches.created and time.monotonic() < deadline:  # the server makes it all the same
        time.sleep(0.05)

    echo.batches.behaviour.create_delay = 0
    outcome = runner_for(echo, tmp_path / "cache", said).run_round("reader", asked)
    assert len(echo.batches.created) == 1 and outcome.attached == echo.batches.created and outcome.created == []
    assert not outcome.failures() and "created by an interrupted session (not created again)" in " ".join(said)


def interrupted_round(server: OpenAIServer, cache: Path, asked: list[BatchItem]) -> None:
    """A round whose batch stays in progress, stopped by Ctrl-C while it is polled."""
    server.batches.behaviour.hold = True

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner_for(server, cache, [], sleep=interrupt).run_round("reader", asked)
    server.batches.behaviour.hold = False


def refused_rerun(server: OpenAIServer, cache: Path, asked: list[BatchItem]) -> str:
    """The one-line error a rerun of the round stops with; nothing submitted again."""
    from pytest_restore.models.batch import BatchError

    with pytest.raises(BatchError) as info:
        runner_for(server, cache, []).run_round("reader", asked)
    assert "\n" not in str(info.value) and len(server.batches.created) == 1
    return str(info.value)


def test_a_truncated_ledger_entry_is_one_line_and_nothing_is_submitted_again(
    echo: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, asked = tmp_path / "cache", items(4)
    interrupted_round(echo, cache, asked)
    (path,) = (cache / "batches").glob("*.json")
    path.write_text(path.read_text()[:40])  # a disk that filled, a copy cut short
    message = refused_rerun(echo, cache, asked)
    assert message.startswith(f"{path}: damaged ledger entry (") and "nothing is submitted" in message
    capsys.readouterr()
    assert main(["batch", "status", "--cache", str(cache)]) == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.count("\n") == 1 and "damaged ledger entry" in said.err


def test_a_ledger_whose_requests_file_is_gone_is_one_line(
    echo: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, asked = tmp_path / "cache", items(4)
    interrupted_round(echo, cache, asked)
    (requests,) = (cache / "batches").glob("*.requests.jsonl")
    requests.unlink()
    assert refused_rerun(echo, cache, asked).startswith(f"{requests}: missing: the requests of batch_")

    # an export's requests gone: batch import says so in one line
    from pytest_restore.models.providers import default_providers
    from pytest_restore.run.calls import export_round

    planned = [("openai:gpt-4o-mini", "reader", ChatRequest((("user", "x"),), max_tokens=40))]
    export_round("reader", planned, tmp_path / "in.jsonl", tmp_path / "other", default_providers())
    for path in (tmp_path / "other" / "batches").glob("*.requests.jsonl"):
        path.unlink()
    (tmp_path / "out.jsonl").write_text("{}\n")
    capsys.readouterr()
    assert main(["batch", "import", str(tmp_path / "out.jsonl"), "--cache", str(tmp_path / "other")]) == 2
    said = capsys.readouterr()
    assert said.err.startswith("error: ") and said.err.count("\n") == 1 and ": missing: the requests of export-" in said.err


def test_two_output_lines_for_one_request_with_different_answers_keep_neither(echo: OpenAIServer, tmp_path: Path) -> None:
    echo.batches.behaviour.duplicate_lines = True
    asked = items(3)
    outcome = runner_for(echo, tmp_path / "cache", []).run_round("reader", asked)
    errors = [outcome.results[i.custom_id].error or "" for i in asked]
    assert all(re.search(r"twice, differently \(output_file_id file-\w+ line \d+; output_file_id file-\w+ line \d+\)", e)
               for e in errors), errors
    assert len(ResponseCache(tmp_path / "cache")) == 0  # no answer chosen silently


def test_a_batch_past_its_own_expiry_is_no_longer_polled(echo: OpenAIServer, tmp_path: Path) -> None:
    echo.batches.behaviour.hold = True
    echo.batches.behaviour.expires_in = -3600  # an hour past its expires_at, still in progress
    echo.batches.behaviour.validating_polls = 0
    polls = 0

    def sleep(seconds: float) -> None:  # the test's deadline: a round that keeps polling fails here
        nonlocal polls
        polls += 1
        assert polls < 20, "still polling a batch past its expiry"

    said: list[str] = []
    outcome = runner_for(echo, tmp_path / "cache", said, sleep=sleep).run_round("reader", items(3))
    assert dict(outcome.failures()) == {f"batch {outcome.created[0]} in_progress past its expires_at: no longer polled": 3}
    assert "still in_progress 1h00m after its own expires_at: no longer polled" in said[-1], said
    assert Ledger(tmp_path / "cache").entries()[0].state == "pending"  # batch status and cancel still see it


@pytest.mark.parametrize("where", ["under-a-file", "a-directory"])
def test_batch_export_out_that_cannot_be_a_file_is_one_line_exit_74(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    (tmp_path / "taken").write_text("a file")
    out = tmp_path / "taken" / "scorer.jsonl" if where == "under-a-file" else tmp_path
    monkeypatch.setattr("pytest_restore.run.phases.dry_run_phase", lambda parts: pytest.fail("the dry run ran"))
    assert main(["batch", "export", "--round", "scorer", "--out", str(out), "--", *GRID_ARGS]) == 74
    said = capsys.readouterr()
    assert said.out == "" and said.err.count("\n") == 1 and said.err.startswith("error: batch export --out"), said.err
    assert ("is a file, not a directory" if where == "under-a-file" else "is a directory") in said.err


#: The grid cut to one policy and one budget (a dry run that plans little).
ONE_CELL = ["--restore-policies=fifo", "--restore-budgets=300"]


def test_the_dry_run_names_a_create_cut_short_and_a_damaged_ledger_in_one_line(pytester: pytest.Pytester) -> None:
    from pytest_restore.models.batch import LedgerEntry

    pytester.makepyfile(test_grid=GRID)
    cache = pytester.path / "cache"
    cut = LedgerEntry(name="batch-0123456789abcdef", kind="batch", round="reader", model="fake-reader",
                      state="submitting", created=time.time(), requests=3, intent="0123456789abcdef")
    Ledger(cache).save(cut, items(3))
    with OpenAIServer(echo_responder, expected_key=DUMMY_KEY) as server:
        dry = pytester.runpytest_inprocess(*grid_command(server, cache, *BATCH, *ONE_CELL), "--restore-dry-run")
        assert dry.ret == 0 and "batch: 1 creates of this cache were cut short and may have made batches (3 requests)" in dry.stdout.str()
        (path,) = (cache / "batches").glob("*.json")
        path.write_text("{")
        dry = pytester.runpytest_inprocess(*grid_command(server, cache, *BATCH, *ONE_CELL), "--restore-dry-run")
        assert server.batches.created == [] and chat_requests(server) == 0
    said = [line for line in dry.outlines if line.startswith("batch: ")]
    assert len(said) == 1 and said[0].startswith(f"batch: {path}: damaged ledger entry ("), dry.outlines
    assert "Traceback" not in "\n".join(dry.outlines + dry.errlines)


def test_the_writer_round_of_a_model_writing_system_is_exported_and_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every round a grid needs can go through a batch file (issue 44): with a memory system that writes
    with a model, ``batch export --round writer`` writes the summaries' requests (the command refused
    the round while the dry run said it was missing), another program answers them, and ``batch
    import`` puts them in the cache, so the writer round is cached and no request of it is left to send."""
    monkeypatch.setenv("OPENAI_API_KEY", DUMMY_KEY)
    cache = tmp_path / "cache"
    grid = [
        f"--restore-data={TINY}", "--restore-budgets", "300", "--restore-policies", "session-summary-model",
        "--restore-writer-model", "openai:gpt-4o-mini", "--restore-calibration=off", f"--restore-cache={cache}",
    ]
    exported = tmp_path / "writer.in.jsonl"
    assert main(["batch", "export", "--round", "writer", "--out", str(exported), "--", *grid]) == 0
    requests = len(exported.read_text(encoding="utf-8").splitlines())
    assert requests and f"batch export: {requests} gpt-4o-mini requests of the writer round" in capsys.readouterr().out
    with OpenAIServer(echo_responder, expected_key=DUMMY_KEY) as server:
        answer_by_chat(exported, tmp_path / "writer.out.jsonl", server.base_url)
        assert main(["batch", "import", str(tmp_path / "writer.out.jsonl"), "--cache", str(cache)]) == 0
        assert f"import: {requests:,} answers checked and cached" in capsys.readouterr().out
        assert main(["batch", "export", "--round", "writer", "--out", str(tmp_path / "again.jsonl"), "--", *grid]) == 0
        said = capsys.readouterr().out
        assert re.search(rf"^writer +openai:gpt-4o-mini +{requests} +{requests} +0 ", said, re.MULTILINE), said
        assert "batch export: 0 gpt-4o-mini requests of the writer round" in said and f"({requests} already cached" in said
        assert chat_requests(server) == requests  # the other program's, once each: the export and import send none


def test_batch_export_takes_every_round_the_run_knows() -> None:
    from pytest_restore.cli.batch import EXPORT_ROUNDS
    from pytest_restore.run.settings import BATCH_ROUNDS

    assert EXPORT_ROUNDS == BATCH_ROUNDS


def test_output_lines_of_requests_the_batch_never_held_are_said_not_only_counted(
    echo: OpenAIServer, tmp_path: Path
) -> None:
    """A batch's output file holding lines whose custom_id the batch never held: the batch's own answers are
    kept, the stray lines stored nowhere, and the run says so in one line (only the ledger counted them)."""
    echo.batches.behaviour.stray_lines = 2
    asked, said = items(3), []
    outcome = runner_for(echo, tmp_path / "cache", said).run_round("reader", asked)
    assert all(outcome.results[i.custom_id].ok for i in asked)
    assert len(ResponseCache(tmp_path / "cache")) == 3
    refused = [line for line in said if "output lines refused" in line]
    assert len(refused) == 1 and refused[0].endswith(
        ": 2 output lines refused (custom_id never exported or submitted): none of them stored"
    ), said
