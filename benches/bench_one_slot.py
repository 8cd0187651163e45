"""A local server that computes one request at a time, at default settings and at fixed concurrencies.

Run as a script: ``python benches/bench_one_slot.py``. A llama.cpp or Ollama
server on a CPU takes tens of seconds a call and computes one call at a time;
the client's timeout is 60 s. Time is scaled down here (``--latency`` per
call, ``--timeout`` per request, the same ratio as ~7 s calls against a 60 s
timeout) so the bench takes seconds. For the default model (adaptive
concurrency, ``max_concurrency`` 16) and for fixed limits, it prints the wall
time, the failed calls, the requests the server computed more than once and
the concurrency reached. No assertions: the figures are the result.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import openai  # noqa: F401 - imported before timing: the first model pays its ~1 s import otherwise
from openai_server import OpenAIServer

from pytest_restore.models.base import ChatRequest
from pytest_restore.models.openai_chat import OpenAIChatModel


def run(calls: int, latency: float, timeout: float, concurrency: int | None) -> tuple[float, int, int, int]:
    """Wall seconds, failed calls, requests computed twice or more, concurrency reached."""
    requests = [ChatRequest((("system", "Answer."), ("user", f"question {i}")), max_tokens=8) for i in range(calls)]
    with OpenAIServer(latency=latency, slots=1) as server:
        model = OpenAIChatModel(
            model="local-model",
            base_url=server.base_url,
            timeout=timeout,
            max_concurrency=concurrency or 16,
            adaptive=concurrency is None,
            max_tries=6,
            backoff_base=latency,
            backoff_cap=8 * latency,
        )
        started = time.monotonic()
        results = model.run(requests)
        wall = time.monotonic() - started
        peak = model.concurrency_peak
        model.close()
        twice = sum(1 for n in server.computed.values() if n > 1)
    return wall, sum(not r.ok for r in results), twice, peak


def main() -> None:
    """Print one line per setting."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.25, help="seconds the server computes one call")
    parser.add_argument("--timeout", type=float, default=2.0, help="the client's per-request timeout")
    args = parser.parse_args()
    print(f"{args.calls} calls, one slot, {args.latency:g} s a call, {args.timeout:g} s timeout")
    print(f"{'setting':<24}{'wall s':>8}{'failed':>8}{'computed twice':>16}{'concurrency':>13}")
    for concurrency in (None, 1, 2, 4, 16):
        wall, failed, twice, peak = run(args.calls, args.latency, args.timeout, concurrency)
        name = "default (adaptive)" if concurrency is None else f"fixed {concurrency}"
        print(f"{name:<24}{wall:>8.2f}{failed:>8}{twice:>16}{peak:>13}")


if __name__ == "__main__":
    main()
