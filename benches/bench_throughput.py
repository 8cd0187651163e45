"""Throughput of ``OpenAIChatModel`` against a fixed-latency local server.

The server answers every request after a fixed latency, so with
``max_concurrency`` calls in flight its capacity is ``concurrency / latency``
requests per second (32 / 0.1 s = 320 req/s). The bench sends distinct
requests without a cache and prints the achieved rate as a share of that
capacity; the target is at least 90%. A script, not a test: run it with

    python benches/bench_throughput.py [--requests 3200] [--concurrency 32] [--latency 0.1]

The server runs in a child process by default, as a remote provider would:
in the same process its HTTP handling would compete with the client for the
GIL and the bench would measure both. ``--in-process`` measures that too.
The figure is sensitive to other load on the machine, so the bench prints the
load average and, as the machine's ceiling, the rate a minimal raw-socket
client (no HTTP library, one request per kept-alive connection) reaches
against the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from openai_server import OpenAIServer

from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.openai_chat import OpenAIChatModel


def _serve(latency: float, pipe: Connection) -> None:
    """Child process: serve until the parent closes the pipe; report the gauges."""
    with OpenAIServer(latency=latency) as server:
        pipe.send(server.base_url)
        while pipe.recv() == "reset":
            server.reset_counters()
            pipe.send("ok")
        pipe.send((server.total_requests, server.max_in_flight))


async def _raw_client_seconds(base_url: str, count: int, concurrency: int) -> float:
    """Seconds a minimal HTTP/1.1 client takes for ``count`` requests: the ceiling."""
    host, port = base_url.removeprefix("http://").split("/")[0].split(":")
    connections = asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]]()
    for _ in range(concurrency):
        connections.put_nowait(await asyncio.open_connection(host, int(port)))

    async def one(index: int) -> None:
        reader, writer = await connections.get()
        body = json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": f"raw {index}"}]}
        ).encode()
        head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\n"
        writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        headers = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
        length = int(headers.split("content-length:")[1].split("\r\n")[0])
        await reader.readexactly(length)
        connections.put_nowait((reader, writer))

    started = time.perf_counter()
    await asyncio.gather(*(one(index) for index in range(count)))
    elapsed = time.perf_counter() - started
    while not connections.empty():
        connections.get_nowait()[1].close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    """Run the bench once and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3200)  # ~10 s: steady state, start-up amortised
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--in-process", action="store_true", help="serve from this process")
    args = parser.parse_args(argv)

    requests = [
        ChatRequest(messages=(("user", f"bench request {i}"),), max_tokens=16)
        for i in range(args.requests)
    ]
    if args.in_process:
        with OpenAIServer(latency=args.latency) as server:
            elapsed, results = _measure(
                server.base_url, requests, args.concurrency, server.reset_counters
            )
            ceiling = asyncio.run(
                _raw_client_seconds(server.base_url, len(requests), args.concurrency)
            )
            sent, max_in_flight = server.total_requests, server.max_in_flight
    else:
        parent, child = multiprocessing.get_context("spawn").Pipe()
        process = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(args.latency, child), daemon=True
        )
        process.start()
        base_url = parent.recv()

        def reset() -> None:
            parent.send("reset")
            parent.recv()

        elapsed, results = _measure(base_url, requests, args.concurrency, reset)
        ceiling = asyncio.run(_raw_client_seconds(base_url, len(requests), args.concurrency))
        parent.send("stop")
        sent, max_in_flight = parent.recv()
        process.join(timeout=10)

    ok = sum(result.ok for result in results)
    achieved = len(requests) / elapsed
    capacity = args.concurrency / args.latency
    share = achieved / capacity
    print(f"server         {'in process' if args.in_process else 'child process'}")
    print(f"load average   {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    print(f"requests       {len(requests)} ({ok} ok, {sent} sent)")
    print(f"elapsed        {elapsed:.3f} s")
    print(f"max in flight  {max_in_flight} (limit {args.concurrency})")
    print(f"achieved       {achieved:.1f} req/s")
    print(f"capacity       {capacity:.1f} req/s ({args.concurrency} / {args.latency:g} s)")
    print(f"efficiency     {share:.1%} (target >= 90%)")
    raw_share = len(requests) / ceiling / capacity
    print(f"raw client     {raw_share:.1%} of capacity (this machine's ceiling, now)")
    return 0


def _measure(
    base_url: str,
    requests: list[ChatRequest],
    concurrency: int,
    reset: Callable[[], None],
) -> tuple[float, list[ChatResult]]:
    """Seconds to answer ``requests`` (after a warm-up), and the results."""
    model = OpenAIChatModel(
        model="gpt-4o-mini", base_url=base_url, max_concurrency=concurrency, timeout=30
    )
    # Warm-up with other prompts: imports, the first connections.
    model.run(
        [
            ChatRequest(messages=(("user", f"warm-up {i}"),), max_tokens=16)
            for i in range(concurrency)
        ]
    )
    reset()
    started = time.perf_counter()
    results = model.run(requests)
    elapsed = time.perf_counter() - started
    model.close()
    return elapsed, results


if __name__ == "__main__":
    raise SystemExit(main())
