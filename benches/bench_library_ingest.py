"""A memory library's ingest, one history at a time against several at once: ``python benches/bench_library_ingest.py``.

Feeding a history to a library is sequential (each turn after the last),
but histories are independent: the audit feeds a library that allows it
(``MemorySystem.parallel_stores``) up to the run's concurrency
(``--restore-max-concurrency``) histories at once, each by its own copy on a
thread of its own (``audit.stores.Stores.held_each``), so the library's
model calls keep a model server busy. This bench feeds the same synthetic
histories (the embedded default's generator) to each library as the audit
does, through the run's gateway on 127.0.0.1, with concurrency 1 and with
``--concurrency``, over two upstreams:

- **fake writer**: the gateway answers from the fake writer and the fake
  embedder in its own process (``--restore-writer-model fake``);
- **loopback server**: the gateway's managed model and embedder call an
  OpenAI-compatible server on 127.0.0.1 (``tests/openai_server.py``) that
  answers at once with the fake writer's answers: the HTTP hop, the managed
  layer's pacing and the upstream's own work are in the figures.

It prints, per library and upstream: turns ingested per second at each
concurrency and their ratio, and where the process's CPU went: the
library's own (everything but the model side), the model side in the
gateway (its calls: the fake writer answering, or the managed client
calling upstream), and the loopback server's thread. The machine's load is
printed with the figures: on a shared machine compare the ratios of one
run, not seconds across runs. The memories held are checked to be the same
at both concurrencies.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the loopback server the tests use

from openai_server import OpenAIServer

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.loaders import load_data
from pytest_restore.libraries.guest import close_gateway, configure_gateway
from pytest_restore.memory.systems import MemorySystem
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.fake_writer import FakeWriter
from pytest_restore.models.gateway import Gateway, chat_request_of, completion_of
from pytest_restore.models.openai_chat import OpenAIChatModel, OpenAIEmbedder
from pytest_restore.synthetic.generator import generate, write_dataset

if TYPE_CHECKING:
    from typing_extensions import Self

#: the embeddings' dimension (the fake embedder's, at both upstreams)
DIMS = 256
#: a budget no history reaches: the figures are ingest, not eviction
NO_BUDGET = 10**9


class FakeWriterUpstream:
    """The loopback server's responder: the fake writer's answer to the whole request, at once."""

    def __init__(self) -> None:
        self.writer = FakeWriter()

    def answer_body(self, body: dict[str, Any]) -> dict[str, Any]:
        result = self.writer.run([chat_request_of(body)])[0]
        message: dict[str, Any] = completion_of(result, str(body.get("model") or "fake"), 0)["choices"][0]["message"]
        return message

    def __call__(self, messages: list[dict[str, Any]]) -> str:  # the server's plain form (unused: answer_body)
        raise NotImplementedError


#: Python thread names of the model side: the gateway's server, its request handlers and its pool of calls,
#: the managed model's and embedder's calls (``"NAME calls"``); the loopback server's own thread apart
GATEWAY_THREADS = ("restore-gateway", "process_request_thread", " calls_")
UPSTREAM_THREAD = "openai-server"


def _cpu(thread: threading.Thread) -> float | None:
    """CPU seconds of a live thread so far (``None``: it has ended)."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident or 0))
    except (OSError, ProcessLookupError):
        return None


class ThreadCPU:
    """CPU seconds by side, from each thread's CPU clock: read every ``every`` seconds while it lives, and once
    more as it ends (every thread's ``run`` is wrapped: :func:`_metered_run`).

    A thread is the model side's by its Python name (:data:`GATEWAY_THREADS`,
    :data:`UPSTREAM_THREAD`), the library's otherwise (the main thread, the
    stores' threads, the library's own pools and loops).
    """

    #: the meter reading now (one at a time)
    current: ThreadCPU | None = None

    def __init__(self, every: float = 0.05) -> None:
        self.seconds = {"library": 0.0, "gateway": 0.0, "upstream": 0.0}
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._every = every
        self._sampler = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    @staticmethod
    def side(name: str) -> str:
        """Whose a thread is, by its name."""
        if name == UPSTREAM_THREAD:
            return "upstream"
        return "gateway" if any(part in name for part in GATEWAY_THREADS) else "library"

    def _add(self, thread: threading.Thread, now: float) -> None:
        ident = thread.ident or 0
        # a thread first seen now started in this run: all it spent is the run's
        self.seconds[self.side(thread.name)] += now - self._last.get(ident, 0.0)
        self._last[ident] = now

    def read(self) -> None:
        """Add what every live thread (but the sampler) spent since the last reading."""
        with self._lock:
            for thread in threading.enumerate():
                if thread is not self._sampler and thread.ident is not None and (now := _cpu(thread)) is not None:
                    self._add(thread, now)

    def ended(self, thread: threading.Thread, total: float) -> None:
        """A thread ends, having spent ``total`` CPU seconds in all."""
        with self._lock:
            self._add(thread, total)
            self._last.pop(thread.ident or 0, None)  # an ident may be reused by a later thread

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.read()

    def __enter__(self) -> Self:
        for thread in threading.enumerate():  # threads alive before the run: only what they spend from now
            if thread.ident is not None and (now := _cpu(thread)) is not None:
                self._last[thread.ident] = now
        ThreadCPU.current = self
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sampler.join()
        self.read()
        ThreadCPU.current = None


_RUN = threading.Thread.run


def _metered_run(self: threading.Thread) -> None:
    """``Thread.run``, then the thread's whole CPU told to the meter reading now (a thread may live less than
    one reading: mem0 makes a pool per ``add``, the gateway a thread per request)."""
    try:
        _RUN(self)
    finally:
        meter = ThreadCPU.current
        if meter is not None:
            meter.ended(self, time.thread_time())


threading.Thread.run = _metered_run  # type: ignore[method-assign]


@dataclass
class Figures:
    """One ingest: turns fed, wall and CPU seconds, the model side's and the upstream's CPU, what was held."""

    turns: int
    wall: float
    cpu: float
    #: CPU seconds by side (:class:`ThreadCPU`): ``library``, ``gateway``, ``upstream``
    sides: dict[str, float]
    held: list[tuple[str, ...]]


@contextmanager
def upstream_gateway(kind: str) -> Iterator[Callable[[], Gateway]]:
    """How the run's gateway is made for ``kind`` (``fake`` or ``loopback``)."""
    if kind == "fake":
        yield lambda: Gateway(FakeWriter(), FakeEmbedder(DIMS), chat_name="fake", embedding_name="fake")
        return
    with OpenAIServer(FakeWriterUpstream()) as server:

        def loopback() -> Gateway:
            chat = OpenAIChatModel(model="small-model", base_url=server.base_url, max_tries=1)
            vectors = OpenAIEmbedder(model="text-embedding-3-small", base_url=server.base_url, max_tries=1)
            return Gateway(chat, vectors, dimensions=1536)

        yield loopback


def ingest(audit: Audit, make: Callable[[], MemorySystem], kind: str, concurrency: int, histories: int | None = None) -> Figures:
    """Feed every history of ``audit`` (the first ``histories``) to a new system at ``concurrency``, through a new
    gateway of ``kind``."""
    questions = audit.questions[:histories]
    with upstream_gateway(kind) as factory:
        configure_gateway(factory)
        try:
            system = make()
            audit.config = replace(audit.config, concurrency=concurrency)
            audit._views.clear()
            with ThreadCPU() as sides:
                cpu, wall = time.process_time(), time.perf_counter()
                views = list(audit.held_each(system, questions, NO_BUDGET, 0, {}))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            close_gateway()
            configure_gateway(None)
    held = [tuple(sorted(u.content for u, m in zip(p.history.units, mask) if m)) for p, mask in views]
    turns = sum(len(q.history.units) for q in questions)
    return Figures(turns, wall, cpu, sides.seconds, held)


def libraries(names: list[str]) -> dict[str, Callable[[], MemorySystem]]:
    """Each named library's system (imported here, before any timing)."""
    out: dict[str, Callable[[], MemorySystem]] = {}
    for name in names:
        if name == "mem0":
            from pytest_restore.libraries import mem0

            mem0._import_mem0()
            out[name] = mem0.Mem0System
        elif name == "graphiti":
            from pytest_restore.libraries import graphiti

            graphiti._graphiti()
            out[name] = graphiti.GraphitiSystem
        else:
            raise SystemExit(f"bench_library_ingest: no library {name!r} here (mem0, graphiti)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--libraries", default="mem0,graphiti", help="comma-separated: mem0, graphiti [mem0,graphiti]")
    parser.add_argument("--histories", type=int, default=8, help="synthetic histories (questions) [8]")
    parser.add_argument("--tokens", type=int, default=1500, help="tokens per history [1500]")
    parser.add_argument("--concurrency", type=int, default=4, help="histories fed at once, at most [4]")
    parser.add_argument("--upstreams", default="fake,loopback", help="comma-separated: fake, loopback [both]")
    args = parser.parse_args()
    systems = libraries(args.libraries.split(","))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "synthetic.json"
        write_dataset(generate(args.histories, 0, tokens_per_history=args.tokens), path)
        audit = Audit(load_data(path), AuditConfig(budgets=(NO_BUDGET,), seeds=(0,)),
                      reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
        turns = sum(len(q.history.units) for q in audit.questions)
        print(f"{len(audit.questions)} histories, {turns} turns; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        print("| library | upstream | turns/s at 1 | turns/s at N | N / 1 | CPU s at 1 / at N | library | gateway and client | loopback server | unattributed | same memories |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for name, make in systems.items():
            for kind in args.upstreams.split(","):
                ingest(audit, make, kind, 1, histories=1)  # warm: a process's first store pays once for its setup
                one = ingest(audit, make, kind, 1)
                many = ingest(audit, make, kind, args.concurrency)

                def share(side: str, runs: tuple[Figures, Figures] = (one, many)) -> str:
                    return " / ".join(f"{100 * f.sides[side] / f.cpu:.0f}%" for f in runs)

                lost = " / ".join(f"{100 * (1 - sum(f.sides.values()) / f.cpu):.0f}%" for f in (one, many))  # ~0
                rate1, rate_n = one.turns / one.wall, many.turns / many.wall
                print(
                    f"| {name} | {kind} | {rate1:.1f} | {rate_n:.1f} (N={args.concurrency}) | {rate_n / rate1:.2f}x "
                    f"| {one.cpu:.1f} / {many.cpu:.1f} | {share('library')} | {share('gateway')} "
                    f"| {share('upstream') if kind == 'loopback' else '-'} | {lost} | {one.held == many.held} |",
                    flush=True,
                )
        print(f"load at the end {os.getloadavg()[0]:.1f}. CPU shares of the process's CPU at 1 / at N, by thread: the "
              "library's (its own threads and the stores'), the gateway's and the managed client's, the loopback server's; "
              "unattributed: the process's CPU no Python thread accounts for (a library's native threads: Kuzu's)")


if __name__ == "__main__":
    main()
