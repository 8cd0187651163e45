"""What graphiti costs per turn: ``python benches/bench_graphiti.py``.

Feeds graphiti (the ``graphiti`` extra) the histories of
``fixtures/locomo_tiny.json`` (short LoCoMo turns) and of a few synthetic
LongMemEval-S questions (the embedded default's generator: long assistant
turns), one store per history as the audit makes them, its model calls
through the run's gateway on 127.0.0.1 to the fake writer (graphiti's
shapes) and the fake embedder, as ``--restore-writer-model fake``. Prints, per
dataset: turns, facts held, graphiti's chat calls per turn by kind and its
embedding requests per turn, and the seconds per turn split into the time
its model calls waited and the rest (graphiti's own work and Kuzu's), the
median of ``--repeats`` runs. A store's setup (Kuzu's full-text indexes) is
printed apart, and graphiti's import once.

With a real model the model-call share grows by the model's latency times
the calls per turn; the rest stays.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import History, build_history
from pytest_restore.libraries import graphiti as adapter
from pytest_restore.libraries.guest import LibraryEndpoints
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake_writer import FakeWriter
from pytest_restore.models.gateway import Gateway
from pytest_restore.synthetic.generator import generate, write_dataset


def histories(path: Path) -> list[History]:
    """One history per conversation of the dataset at ``path``."""
    seen: dict[str, History] = {}
    for question in load_data(path).questions:
        seen.setdefault(question.history_key, build_history(question))
    return list(seen.values())


def feed(gateway: Gateway, history: History) -> dict[str, Any]:
    """One store of ``history``: its figures, its seconds, and the seconds its model calls waited."""
    endpoints = LibraryEndpoints(gateway.base_url, gateway.token, gateway.chat_name, gateway.embedding_name, gateway.probe_dimensions())
    system = adapter.GraphitiSystem(endpoints)
    waited = [0.0]
    reset = system.reset

    def timed_reset(budget: int, ctx: EvictionContext) -> None:
        started = time.perf_counter()
        reset(budget, ctx)
        setup[0] = time.perf_counter() - started
        graph = system.store.graphiti
        for owner, name in ((graph.llm_client, "_generate_response"), (graph.embedder.client.embeddings, "create")):
            call = getattr(owner, name)

            async def timed(*args: Any, _call: Any = call, **kwargs: Any) -> Any:
                began = time.perf_counter()
                try:
                    return await _call(*args, **kwargs)
                finally:
                    waited[0] += time.perf_counter() - began

            setattr(owner, name, timed)

    setup = [0.0]
    system.reset = timed_reset  # type: ignore[method-assign]
    started = time.perf_counter()
    held = system.hold(history.units, history.sizes, 10**9, EvictionContext(question_id=history.question.history_key))
    total = time.perf_counter() - started
    return {"figures": system.figures(), "held": len(held), "setup": setup[0], "ingest": total - setup[0], "waited": waited[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--synthetic", type=int, default=2, help="synthetic questions (default 2)")
    args = parser.parse_args()
    started = time.perf_counter()
    adapter._graphiti()
    print(f"importing graphiti-core {adapter.GraphitiSystem.version()}: {time.perf_counter() - started:.2f} s")
    with tempfile.TemporaryDirectory() as scratch:
        synthetic = Path(scratch) / "synthetic.json"
        write_dataset(generate(args.synthetic, 0, tokens_per_history=1000), synthetic)
        datasets = {"LoCoMo fixture": ROOT / "fixtures" / "locomo_tiny.json", "synthetic LongMemEval-S": synthetic}
        print("| data | turns | facts | chat calls / turn (by kind) | embedding requests / turn | s / turn | of which model calls | store setup s |")
        print("|---|---|---|---|---|---|---|---|")
        with Gateway(FakeWriter(), FakeEmbedder(768)) as gateway:
            for label, path in datasets.items():
                runs = [[feed(gateway, h) for h in histories(path)] for _ in range(args.repeats)]
                last = runs[-1]
                turns = sum(r["figures"].units for r in last)
                calls: Counter[str] = Counter()
                for r in last:
                    calls.update(r["figures"].calls)
                embeddings = calls.pop(adapter.EMBEDDINGS, 0)
                kinds = ", ".join(f"{k} {n / turns:.2f}" for k, n in sorted(calls.items()))
                per_turn = statistics.median(sum(r["ingest"] for r in run) / turns for run in runs)
                waited = statistics.median(sum(r["waited"] for r in run) / turns for run in runs)
                setup = statistics.median(r["setup"] for run in runs for r in run)
                print(
                    f"| {label} | {turns} | {sum(r['held'] for r in last)} | {sum(calls.values()) / turns:.2f} ({kinds}) "
                    f"| {embeddings / turns:.2f} | {per_turn:.3f} | {waited:.3f} | {setup:.2f} |"
                )


if __name__ == "__main__":
    main()
