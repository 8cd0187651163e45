"""Throughput: the managed model layer against the bare ``openai`` client, on a server that answers at once.

A fast local vLLM must never wait on us. The bench starts a loopback
OpenAI-compatible server (``tests/openai_server.py``) in a child process, so
its HTTP handling does not compete with the client for the interpreter lock,
answering every request at once. In one run it drives the server

1. with the bare official ``openai`` client: ``--threads`` threads (16), each
   calling ``chat.completions.create`` in a loop;
2. with the managed layer (``OpenAIChatModel``, what the grid's models are)
   at the same concurrency (``max_concurrency`` = threads), with a fresh
   response cache as a grid has (a lock, a lookup and an entry per request);
3. with the managed layer without a cache, for the layer's own cost.

and prints each rate in requests per second, and the managed layer's share of
the bare client's rate (the aim: at least 80%). A script, not a test: run it
with

    python benches/bench_throughput.py [--requests 3000] [--threads 16]

The figures depend on the machine's other load; the bench prints the load
average beside them. No assertion: the figures are the result.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from openai_server import OpenAIServer

from pytest_restore.models.base import ChatRequest
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.openai_chat import OpenAIChatModel

MODEL = "gpt-4o-mini"


def _serve(pipe: Connection) -> None:
    """Child process: serve at once until the parent says stop; report what was served."""
    with OpenAIServer(latency=0.0) as server:
        pipe.send(server.base_url)
        while pipe.recv() == "count":
            pipe.send(server.total_requests)


def bare_client(base_url: str, count: int, threads: int, tag: str) -> float:
    """Requests per second of the official client, ``threads`` threads sending ``count`` requests."""
    import openai

    client = openai.OpenAI(api_key="not-needed", base_url=base_url, max_retries=0, timeout=30)
    numbers = iter(range(count))
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                number = next(numbers, None)
            if number is None:
                return
            try:
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"{tag} {number}"}], max_tokens=16
                )
            except openai.OpenAIError as exc:  # counted, not hidden
                failures.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    client.close()
    if failures:
        raise SystemExit(f"bare client: {len(failures)} of {count} requests failed: {failures[0]}")
    return count / elapsed


def managed(base_url: str, count: int, threads: int, tag: str, cache_dir: Path | None) -> tuple[float, int]:
    """Requests per second of the managed layer at ``threads`` in flight, and the concurrency it reached."""
    model = OpenAIChatModel(
        model=MODEL,
        base_url=base_url,
        max_concurrency=threads,
        timeout=30,
        cache=ResponseCache(cache_dir) if cache_dir is not None else None,
    )
    # warm-up with other prompts: the threads, the first connections, the adaptive limit's climb
    model.run([ChatRequest((("user", f"{tag} warm-up {i}"),), max_tokens=16) for i in range(threads * 8)])
    requests = [ChatRequest((("user", f"{tag} {i}"),), max_tokens=16) for i in range(count)]
    started = time.perf_counter()
    results = model.run(requests)
    elapsed = time.perf_counter() - started
    model.close()
    failed = [r for r in results if not r.ok]
    if failed:
        raise SystemExit(f"managed: {len(failed)} of {count} requests failed: {failed[0].error}")
    return count / elapsed, model.concurrency_peak


def main(argv: list[str] | None = None) -> int:
    """Run the bench once and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--threads", type=int, default=16)
    args = parser.parse_args(argv)
    import openai  # noqa: F401 - imported before timing

    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child,), daemon=True)
    process.start()
    base_url = parent.recv()
    n, threads = args.requests, args.threads
    try:
        bare_client(base_url, threads * 8, threads, "bare warm-up")
        bare = bare_client(base_url, n, threads, "bare")
        with tempfile.TemporaryDirectory() as cache_dir:
            cached_rate, peak = managed(base_url, n, threads, "managed", Path(cache_dir))
        plain_rate, _ = managed(base_url, n, threads, "plain", None)
        parent.send("count")
        served = parent.recv()
    finally:
        parent.send("stop")
        process.join(timeout=10)
    print(f"load average          {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"requests per client   {n:,} distinct ({served:,} served in all, warm-ups included)")
    print(f"bare openai client    {bare:8.1f} req/s ({threads} threads, chat.completions.create)")
    print(f"managed, fresh cache  {cached_rate:8.1f} req/s ({cached_rate / bare:.0%} of the bare client; aim >= 80%;"
          f" concurrency reached {peak})")
    print(f"managed, no cache     {plain_rate:8.1f} req/s ({plain_rate / bare:.0%} of the bare client)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
