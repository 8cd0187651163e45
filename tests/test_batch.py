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
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from grid_helpers import FAST_RETRIES, GRID, TINY, child_env, run_child, shared_run, small_args
from openai_server import OpenAIServer, canonical_body, echo_responder, fake_models_responder

from pytest_restore.__main__ import main
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import History, build_history
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.batch import BatchItem, BatchRunner, Ledger
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.openai_chat import OpenAIChatModel
from pytest_restore.models.prompts import JUDGE_SYSTEM
from pytest_restore.models.providers import VALIDATORS

DUMMY_KEY = "sk-test-BATCH-KEY-0123456789"
MODELS = {"reader": "openai:fake-reader", "judge": "openai:fake-judge", "scorer": "openai:fake-scorer"}
#: Four cells: a policy that needs the importance scorer (so three rounds) and one that does not.
GRID_ARGS = [
    *small_args(),
    "--restore-calibration=off",
    "--restore-policies=fifo,llm-importance",
    "--restore-budgets=600,100",
    *(f"--restore-{role}={spec}" for role, spec in MODELS.items()),
]
CELLS = 4
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


@pytest.fixture(scope="module")
def histories() -> list[History]:
    """What the fake reader behind the server knows."""
    return [build_history(q) for q in load_dataset(TINY).questions if not q.is_abstention]


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


@pytest.fixture(scope="module")
def batch_runs(histories: list[History], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The grid live, then by batch from an empty cache, then by batch again; what the server saw.

    Also the dry runs of the same grid under real model names with built-in
    prices, live and by batch (``dry-live``, ``dry-batch``).
    """

    def build(project: Path) -> None:
        (project / "test_grid.py").write_text(GRID)
        (project / "conftest.py").write_text(FAST_RETRIES)
        env = {"OPENAI_API_KEY": DUMMY_KEY}
        seen: dict[str, Any] = {}
        with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
            live = run_child(grid_command(server, project / "live-cache"), project, project / "live", env)
            live.assert_passed(CELLS)
            seen["live_chat"] = chat_requests(server)
            batch = run_child(grid_command(server, project / "cache", *BATCH), project, project / "batch", env)
            batch.assert_passed(CELLS)
            seen["batch_chat"] = chat_requests(server) - seen["live_chat"]
            seen["created"] = server.batches.created
            seen["lines_by_body"] = list(server.batches.lines_by_body.values())
            seen["live_bodies"] = sorted(server.successes)
            seen["batch_bodies"] = sorted(server.batches.lines_by_body)
            again = run_child(grid_command(server, project / "cache", *BATCH), project, project / "again", env)
            again.assert_passed(CELLS)
            seen["again_created"] = server.batches.created
            seen["again_chat"] = chat_requests(server) - seen["live_chat"]
            priced = [a for a in GRID_ARGS if not a.startswith(("--restore-reader", "--restore-judge", "--restore-scorer"))]
            priced += [f"--restore-{role}=openai:gpt-4o-mini" for role in MODELS]
            for name, extra in (("dry-live", []), ("dry-batch", ["--restore-batch"])):
                run = run_child(
                    ["-p", "no:xdist", *priced, f"--restore-cache={project / 'empty'}", "--restore-dry-run", *extra],
                    project, project / name, env,
                )
                assert run.ret == 0, run.output[-3000:]
        (project / "seen.json").write_text(json.dumps(seen))

    return shared_run(tmp_path_factory, "batch-runs", build)


def seen_of(project: Path) -> dict[str, Any]:
    seen: dict[str, Any] = json.loads((project / "seen.json").read_text())
    return seen


def test_a_batch_grid_writes_the_records_of_the_live_grid(batch_runs: Path) -> None:
    live = records_of(batch_runs / "live")
    assert live and records_of(batch_runs / "batch") == live
    assert records_of(batch_runs / "again") == live


def test_a_batch_grid_sends_no_live_call_and_each_request_in_one_batch(batch_runs: Path) -> None:
    seen = seen_of(batch_runs)
    output = (batch_runs / "batch-output.txt").read_text()
    assert seen["live_chat"] > 0 and seen["batch_chat"] == 0
    # three rounds (scorer, reader, judge), one batch each, each request in exactly one of them
    assert len(seen["created"]) == 3 and set(seen["lines_by_body"]) == {1}
    # exactly the requests the live grid sent
    assert seen["batch_bodies"] == seen["live_bodies"]
    for name in ("scorer", "reader", "judge"):
        assert f"restore: batch {name} round: " in output and f"batch {name} round: " in output
    assert "completed, " in output and " elapsed" in output


def test_a_rerun_submits_nothing(batch_runs: Path) -> None:
    seen = seen_of(batch_runs)
    assert seen["again_created"] == seen["created"] and seen["again_chat"] == 0
    output = (batch_runs / "again-output.txt").read_text()
    assert "nothing to submit" in output and "submitted" not in output


def _estimate(output: str) -> float:
    line = next(line for line in output.splitlines() if line.startswith("estimated cost"))
    return float(line.split("$")[1].split()[0].replace(",", ""))


def test_the_dry_run_prices_a_batch_at_half_and_counts_its_rounds(batch_runs: Path) -> None:
    live = (batch_runs / "dry-live-output.txt").read_text()
    batch = (batch_runs / "dry-batch-output.txt").read_text()
    assert _estimate(live) > 0 and _estimate(batch) == pytest.approx(_estimate(live) / 2, abs=0.011)
    assert "at batch prices" in batch and "batch rounds: 3 (scorer, reader, judge)" in batch
    assert "batch rounds" not in live


def test_a_session_killed_mid_batch_attaches_to_it_when_started_again(
    histories: list[History], tmp_path: Path, batch_runs: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_grid.py").write_text(GRID)
    cache = tmp_path / "cache"
    env = {**child_env(), "OPENAI_API_KEY": DUMMY_KEY}
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        server.batches.behaviour.hold = True  # the first batch stays in progress
        command = [sys.executable, "-m", "pytest", *grid_command(server, cache, *BATCH), "--restore-report-dir=killed"]
        with open(tmp_path / "killed.out", "w") as out:
            child = subprocess.Popen(command, cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT)
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
        assert len(server.batches.created) == 1, (tmp_path / "killed.out").read_text()[-3000:]
        first = server.batches.created[0]

        server.batches.behaviour.hold = False
        restarted = run_child(grid_command(server, cache, *BATCH), project, project / "restarted", {"OPENAI_API_KEY": DUMMY_KEY})
        restarted.assert_passed(CELLS)
        assert f"attaching to {first}" in restarted.output
        # the killed session's batch was not submitted again: one batch per round in all
        assert server.batches.created[0] == first and len(server.batches.created) == 3
        assert set(server.batches.lines_by_body.values()) == {1} and chat_requests(server) == 0
    assert records_of(project / "restarted") == records_of(batch_runs / "live")


def test_an_expired_batch_stops_the_run_in_one_line_or_resubmits_the_rest(
    histories: list[History], tmp_path: Path, batch_runs: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_grid.py").write_text(GRID)
    env = {"OPENAI_API_KEY": DUMMY_KEY}
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        server.batches.behaviour.expire_after = 21  # half of the scorer round's 42 requests
        run = run_child(grid_command(server, tmp_path / "cache", *BATCH), project, project / "expired", env)
        assert run.ret == 1, run.output[-3000:]
        stop = [line for line in run.output.splitlines() if "requests failed" in line]
        assert len(stop) == 1 and "batch scorer round: 21 of 42 requests failed (21 x batch batch_expired" in stop[0]
        assert "Traceback" not in run.output and len(ResponseCache(tmp_path / "cache")) == 21
        assert not (project / "expired").exists()

        # the option: what a batch did not answer goes out again as a new batch, and the run completes
        resubmitted = run_child(
            grid_command(server, tmp_path / "other", *BATCH, "--restore-batch-resubmit=1"), project, project / "resubmitted", env
        )
        resubmitted.assert_passed(CELLS)
        assert chat_requests(server) == 0
    assert records_of(project / "resubmitted") == records_of(batch_runs / "live")


# -- 4. offline batch files -----------------------------------------------------------------------


def answer_by_chat(source: Path, target: Path, base_url: str) -> None:
    """Another program: answers each line of a batch input file through a chat endpoint and writes
    the OpenAI batch output format (as vLLM's ``run_batch`` does), in its own order."""
    out = []
    for n, text in enumerate(source.read_text().splitlines()):
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
    target.write_text("".join(json.dumps(line) + "\n" for line in out))


def test_export_then_import_fills_the_cache_so_the_grid_sends_nothing(
    histories: list[History], tmp_path: Path, batch_runs: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_grid.py").write_text(GRID)
    cache = tmp_path / "cache"
    with OpenAIServer(fake_models_responder(histories), expected_key=DUMMY_KEY) as server:
        grid = [*GRID_ARGS, f"--restore-cache={cache}"]

        def export(name: str) -> Path:
            target = tmp_path / f"{name}.in.jsonl"
            result = subprocess.run(
                [sys.executable, "-m", "pytest_restore", "batch", "export", "--round", name, "--out", str(target),
                 "--", "-p", "no:xdist", *grid],
                cwd=project, env={**child_env(), "OPENAI_API_KEY": DUMMY_KEY}, capture_output=True, text=True,
                check=False,
            )
            assert result.returncode == 0 and f"batch export: " in result.stdout, result.stdout[-3000:] + result.stderr
            return target

        for name in ("scorer", "reader"):
            source = export(name)
            answer_by_chat(source, tmp_path / f"{name}.out.jsonl", server.base_url)
            assert main(["batch", "import", str(tmp_path / f"{name}.out.jsonl"), "--cache", str(cache)]) == 0

        # the judge round: one request tampered with before the other program ran it, one line never exported
        source = export("judge")
        lines = source.read_text().splitlines()
        tampered = json.loads(lines[0])
        tampered["body"]["messages"][-1]["content"] += " (edited)"
        source.write_text("\n".join([json.dumps(tampered), *lines[1:]]) + "\n")
        answer_by_chat(source, tmp_path / "judge.out.jsonl", server.base_url)
        stray = json.loads((tmp_path / "judge.out.jsonl").read_text().splitlines()[0])
        stray["custom_id"] = "judge-" + "0" * 64
        with open(tmp_path / "judge.out.jsonl", "a") as handle:
            handle.write(json.dumps(stray) + "\n")
        capsys.readouterr()
        assert main(["batch", "import", str(tmp_path / "judge.out.jsonl"), "--cache", str(cache)]) == 1
        said = capsys.readouterr().out
        assert "1 lines refused: request differs from the exported one" in said
        assert "1 lines refused: custom_id never exported or submitted" in said
        assert f"{len(lines) - 1:,} answers checked and cached" in said

        # what was refused is exported again, answered and imported
        again = export("judge")
        assert len(again.read_text().splitlines()) == 1
        answer_by_chat(again, tmp_path / "judge2.out.jsonl", server.base_url)
        assert main(["batch", "import", str(tmp_path / "judge2.out.jsonl"), "--cache", str(cache)]) == 0

        before = chat_requests(server)
        run = run_child(
            ["-p", "no:xdist", *grid, f"--restore-base-url={server.base_url}"], project, project / "report",
            {"OPENAI_API_KEY": DUMMY_KEY},
        )
        run.assert_passed(CELLS)
        assert chat_requests(server) == before  # the grid sent nothing
    assert records_of(project / "report") == records_of(batch_runs / "live")
    assert os.environ["OPENAI_API_KEY"] not in "".join(p.read_text() for p in (cache / "batches").glob("*"))
