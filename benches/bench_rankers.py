"""What dense and hybrid ranking cost: ``python benches/bench_rankers.py``.

On the full synthetic LongMemEval-S (500 questions, the same file as
``bench_grid.py``: distinct text about as common as in the official file) it
runs the whole default grid with the fake models under ``-n 2``, each on an
empty cache, and prints one table:

- **grids**: the ``bm25-lite`` grid, then the grid that compares the three
  rankers in one run (``--restore-rankers bm25-lite,dense:fake,hybrid:fake``:
  eviction and stores once per cell, shared by the rankers), and the
  single-ranker ``dense:fake`` and ``hybrid:fake`` grids: wall time and its
  ratio to the ``bm25-lite`` grid (target for the three-ranker grid: 2x),
  the peak RSS of the largest single process (``getrusage`` of a wrapper
  process; target: 1.5x the ``bm25-lite`` grid's) and of the whole process
  tree;
- **storage**: the dense grid's embedding store (rows, bytes on disk, bytes
  per row; ``dense:fake`` has 256 dimensions) and what the same rows would
  take at OpenAI's 1,536 dimensions as int8 with a scale, float16 and
  float32;
- **quantisation**: the fake embedder's float32 vectors of every distinct
  text against the int8 rows read back: the largest cosine error, and how
  many of the dense ranker's top-60 lists (every question, whole history)
  change.

No assertions: the figures are the result. Everything goes into
``--work-dir`` (a temporary directory by default).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_grid import GRID_TEST, Table, make_dataset, run_timed

#: Runs one command and prints the largest RSS any of its descendants reached (bytes) on its last line.
PEAK_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
    "sys.exit(code)\n"
)


def grid(work: Path, data: Path, label: str, args: Sequence[str]) -> dict[str, Any]:
    """One ``-n 2`` grid on an empty cache: seconds, largest process, process tree, report directory."""
    test = work / "grid" / "test_grid.py"
    test.parent.mkdir(parents=True, exist_ok=True)
    test.write_text(GRID_TEST, encoding="utf-8")
    report = work / f"report-{label}"
    cache = work / f"cache-{label}"
    cmd = [
        sys.executable, "-c", PEAK_WRAPPER, sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:randomly",
        "-n", "2", "--rootdir", str(test.parent), "-o", f"cache_dir={cache}", "--restore-data", str(data),
        "--restore-report-dir", str(report), "--restore-family-checks", "report", *args,
    ]
    timed = run_timed(cmd, cwd=test.parent)
    if timed.returncode != 0:
        raise RuntimeError(f"grid {label} failed ({timed.returncode}):\n{timed.output[-3000:]}")
    largest = int(timed.output.strip().splitlines()[-1])
    return {"seconds": timed.seconds, "largest": largest, "tree": timed.peak_tree_bytes, "report": report, "cache": cache}


def store_of(cache: Path) -> Path:
    """The one embedding store under a run's cache."""
    stores = sorted(cache.rglob("embeddings/*/vectors.bin"))
    if len(stores) != 1:
        raise RuntimeError(f"expected one embedding store under {cache}, found {stores}")
    return stores[0].parent


def quantisation(data: Path, store_dir: Path) -> dict[str, Any]:
    """Cosine error of the int8 rows against the fake's float32 vectors, and the top-60 lists that change."""
    from pytest_restore.audit.run import AuditConfig, audited_questions
    from pytest_restore.data.dataset import load_dataset
    from pytest_restore.data.units import unit_contents
    from pytest_restore.memory.retrieval import TOP_K
    from pytest_restore.models.embeddings import EmbeddingStore, FakeEmbedder

    questions = audited_questions(load_dataset(data), AuditConfig())
    store = EmbeddingStore(store_dir)
    store.refresh()
    fake = FakeEmbedder()
    worst = 0.0
    changed = 0
    overlap = 0.0
    for q in questions:
        texts = [q.question, *unit_contents(q)]
        exact = fake.embed(texts).astype(np.float64)
        stored = store.vectors(texts).astype(np.float64)
        norms = np.linalg.norm(stored, axis=1)
        norms[norms == 0] = 1.0
        stored /= norms[:, None]
        worst = max(worst, float(np.max(np.abs(np.sum(exact * stored, axis=1) - np.sum(exact * exact, axis=1)))))
        positions = np.arange(len(texts) - 1)
        lists = []
        for matrix in (exact, stored):
            sims = matrix[1:] @ matrix[0]
            lists.append(positions[np.lexsort((-positions, -sims))][:TOP_K].tolist())
        changed += lists[0] != lists[1]
        overlap += len(set(lists[0]) & set(lists[1])) / max(1, len(lists[0]))
    return {"questions": len(questions), "worst_cosine": worst, "changed": changed, "overlap": overlap / len(questions)}


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f} MB"


def run(args: argparse.Namespace) -> int:
    """Every figure into one table, printed."""
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-rankers-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "synthetic-500.json"
    if not data.exists():
        make_dataset(data, args.questions, 0, 102_000, None, "real")
    table = Table()
    runs: dict[str, dict[str, Any]] = {}
    plans = [("bm25-lite", ["--restore-ranker", "bm25-lite"])]
    if args.three:
        plans.append(("three rankers", ["--restore-rankers", "bm25-lite,dense:fake,hybrid:fake"]))
    plans += [("dense:fake", ["--restore-ranker", "dense:fake"]), ("hybrid:fake", ["--restore-ranker", "hybrid:fake"])]
    for label, extra in plans:
        started = time.perf_counter()
        runs[label] = grid(work, data, label.replace(" ", "-").replace(":", "-"), extra)
        print(f"{label}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    base = runs["bm25-lite"]
    for label, figures in runs.items():
        table.add(
            f"grid {label}",
            f"{figures['seconds']:.1f} s = {figures['seconds'] / base['seconds']:.2f}x bm25-lite",
            f"largest process {_mb(figures['largest'])} = {figures['largest'] / base['largest']:.2f}x; "
            f"process tree {_mb(figures['tree'])}; -n 2, empty cache",
        )
    store_dir = store_of(runs["dense:fake"]["cache"])
    meta = json.loads((store_dir / "meta.json").read_text())
    rows = (store_dir / "keys.bin").stat().st_size // 16
    on_disk = sum(p.stat().st_size for p in (store_dir / "vectors.bin", store_dir / "keys.bin"))
    dims = int(meta["dimensions"])
    table.add("embedding store (dense:fake)", f"{rows:,} rows, {_mb(on_disk)}",
              f"{on_disk / rows:,.0f} bytes a row: {dims} int8 + 4-byte scale + 16-byte key")
    for name, per_row in (("int8 + scale", 1536 + 4), ("float16", 1536 * 2), ("float32", 1536 * 4)):
        table.add(f"  at 1,536 dimensions, {name}", _mb(rows * (per_row + 16)), "the same rows with their keys")
    q = quantisation(data, store_dir)
    table.add("int8 against float32 (dense:fake)", f"largest cosine error {q['worst_cosine']:.4f}",
              f"top-60 lists changed: {q['changed']} of {q['questions']} questions; mean overlap {q['overlap']:.3f}")
    print(table.render())
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the arguments and run the bench."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--questions", type=int, default=500, help="questions in the synthetic file")
    parser.add_argument("--work-dir", default=None, help="where the data, caches and reports go")
    parser.add_argument("--no-three", dest="three", action="store_false", help="skip the three-ranker grid")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
