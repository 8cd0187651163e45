"""The full-scale benchmark: ``python benches/bench_grid.py``.

It generates the full synthetic LongMemEval-S (500 questions, ~102k-token
histories) and, in one run, measures and prints in one table:

- **the data**: the main file has about as much distinct text as the official
  one (its filler pool scales with the question count so that roughly three
  quarters of the session slots hold a session no other slot holds; the
  official file draws filler with replacement from a pool of ~40k sessions).
  ``--high-reuse`` (on by default) also times the floor and the ``-n 2`` grid
  on a file built from the generator's default pool, where every question
  shares the same ~140 filler sessions: a few percent of its text is distinct,
  so its floor is small and the ratio to it is the worst case;

- **warm-up**: a 6-question grid, so that numba's one-time compile of the
  kernels (first run after an install or an upgrade) is not in the timings;
- **floor**: parsing the file and counting the o200k tokens of its distinct
  turn texts, in a fresh process (the least any audit of the file must do);
- **grid**: the whole default grid with the fake models (every policy, random
  seeds 0/1/2, budgets 80k/30k/8k, both regimes, 10,000 bootstrap resamples,
  the report) as ``python -m pytest`` subprocesses: with ``-n 2`` on a cold
  cache, again on the warm cache, and serially (``-p no:xdist``); wall time,
  ratio to the floor, and peak memory (the sum over the pytest process tree,
  sampled, and the largest single process from ``getrusage``);
- **ranker**: BM25-lite against ``rank_bm25.BM25Okapi`` (the library
  LongMemEval's retrieval uses) on the same stores and queries, with
  rank_bm25 configured to score alike (k1 = 1.2, b = 0.75, our IDF
  ``log(1 + (N - df + 0.5) / (df + 0.5))`` in place of its floored one, our
  tokens, distinct query words, the same top-k rule): agreement of the
  top-k lists and the speed ratio;
- **bootstrap**: the question-cluster bootstrap against
  ``scipy.stats.bootstrap`` for the same statistics (same resamples: both
  draw ``rng.integers(0, Q, (R, Q))``), per statistic, cold (one statistic
  alone, drawing the resamples included) and amortised over the grid's cell
  intervals (one draw shared, as the report does);
- **model calls**: reader and judge calls the grid needs (from the report's
  records) and scorer calls (distinct unit contents), against the naive count
  (every condition of every record, every unit of every llm-importance cell).

``--scale`` adds a LongMemEval-M-sized run (50 questions of ~510k tokens,
500 sessions each) to show how time and memory grow with history length.
Everything is generated into ``--work-dir`` (a temporary directory by default).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

#: The test module the grid runs (the same as the repository's ``benches/test_grid.py``).
GRID_TEST = '''"""The audit grid, parametrized by the pytest-restore plugin (written by the bench)."""

from pytest_restore.plugin import RestoreCell


def test_cell(restore_cell: RestoreCell) -> None:
    restore_cell.audit()
    restore_cell.check()
'''

FLOOR_CODE = """
import json, sys, time
start = time.perf_counter()
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.tokens import count_tokens
dataset = load_dataset(sys.argv[1])
parsed = time.perf_counter()
texts = list(dict.fromkeys(t.content for q in dataset.questions for s in q.haystack_sessions for t in s))
tokens = sum(count_tokens(texts))
done = time.perf_counter()
turns = sum(len(s) for q in dataset.questions for s in q.haystack_sessions)
history_tokens = 0
counts = dict(zip(texts, count_tokens(texts)))
for q in dataset.questions:
    history_tokens += sum(counts[t.content] for s in q.haystack_sessions for t in s)
print(json.dumps({"parse": parsed - start, "count": done - parsed, "total": done - start,
                  "distinct_texts": len(texts), "distinct_tokens": tokens, "turns": turns,
                  "questions": len(dataset.questions), "history_tokens": history_tokens}))
"""

#: The grid in one process, phase by phase (the same work as the serial grid's
#: items, without pytest): where the time goes.
BREAKDOWN_CODE = """
import json, sys, tempfile, time
start = time.perf_counter()
from pytest_restore.audit.checks import construct_checks
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import load_dataset
from pytest_restore.memory.eviction import default_registry
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.report.inputs import RunInfo
from pytest_restore.report.writer import write_report
phases = {"imports": time.perf_counter() - start}
mark = time.perf_counter()
dataset = load_dataset(sys.argv[1])
phases["parse and validate"] = time.perf_counter() - mark
mark = time.perf_counter()
reader = FakeReader()
audit = Audit(dataset, AuditConfig(), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
reader.learn(p.history for p in audit.questions)
phases["prepare: units, token counts, lexical indexes"] = time.perf_counter() - mark
records, checks = [], 0.0
for policy in default_registry().values():
    mark = time.perf_counter()
    runs = [audit.run_cell(policy, budget) for budget in audit.config.budgets]
    phases[f"cells: {policy.name} (evict, rank, inject, read, judge)"] = time.perf_counter() - mark
    for run in runs:
        mark = time.perf_counter()
        construct_checks(run, audit)
        checks += time.perf_counter() - mark
        records += run.records
phases["construct checks"] = checks
mark = time.perf_counter()
write_report(records, RunInfo(exclusions=audit.exclusion_counts()), tempfile.mkdtemp())
phases["report (statistics, tables, figure)"] = time.perf_counter() - mark
print(json.dumps({"total": time.perf_counter() - start, "phases": phases}))
"""


@dataclass
class Row:
    """One line of the bench table."""

    what: str
    value: str
    note: str = ""


@dataclass
class Table:
    """The bench's one table, printed as it grows (a long run shows progress)."""

    rows: list[Row] = field(default_factory=list)
    live: bool = True

    def add(self, what: str, value: str, note: str = "") -> None:
        self.rows.append(Row(what, value, note))
        if self.live:
            print(f"  {what}: {value}" + (f"  ({note})" if note else ""), file=sys.stderr, flush=True)

    def render(self) -> str:
        w1 = max(len(r.what) for r in self.rows)
        w2 = max(len(r.value) for r in self.rows)
        lines = [f"| {'figure'.ljust(w1)} | {'value'.ljust(w2)} | note |", f"|{'-' * (w1 + 2)}|{'-' * (w2 + 2)}|------|"]
        lines += [f"| {r.what.ljust(w1)} | {r.value.ljust(w2)} | {r.note} |" for r in self.rows]
        return "\n".join(lines)


# -- processes and memory ------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _tree_rss(root: int) -> int:
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += _rss(pid)
        todo += _children(pid)
    return total


@dataclass(frozen=True)
class Timed:
    """A subprocess's wall time, its process tree's peak summed RSS, exit code and output."""

    seconds: float
    peak_tree_bytes: int
    returncode: int
    output: str


def run_timed(cmd: Sequence[str], cwd: Path | None = None) -> Timed:
    """Run ``cmd``, sampling the summed RSS of its process tree every 50 ms (Linux /proc)."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    return Timed(seconds, peak, proc.returncode, output)


def children_maxrss_bytes() -> int:
    """The largest RSS any finished child process (or its descendants) reached."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


# -- the steps -------------------------------------------------------------------------


#: Filler pool size per question (in histories' worth of sessions) that makes about three
#: quarters of a file's session occurrences distinct, as in the official LongMemEval-S: its
#: filler is drawn with replacement from ~40k sessions (13 of its 500 histories hold one
#: filler session twice among 23,867 session slots, which puts the pool near 40k).
REAL_POOL_PER_QUESTION = 1.6


def make_dataset(path: Path, questions: int, seed: int, tokens: int, sessions: int | None, reuse: str) -> float:
    """Generate and write the synthetic dataset; seconds taken.

    ``reuse="real"``: the filler pool scales with the question count so that
    distinct text is about as common as in the official file (the floor then
    counts ~40M tokens). ``reuse="high"``: the generator's default pool of 2.5
    histories' worth of sessions, shared by every question (a few percent of
    the text is distinct: the floor is small, the ratio to it large).
    """
    from pytest_restore.synthetic.generator import generate, write_dataset

    start = time.perf_counter()
    knobs: dict[str, Any] = {} if sessions is None else {"sessions_per_history": sessions}
    if reuse == "real":
        knobs.update(lazy_pool=True, pool_factor=REAL_POOL_PER_QUESTION * questions)
    write_dataset(generate(questions, seed, tokens_per_history=tokens, **knobs), path)
    return time.perf_counter() - start


def measure_floor(path: Path, repeats: int) -> dict[str, Any]:
    """The floor in a fresh process (best of ``repeats``): parse + count distinct texts."""
    best: dict[str, Any] | None = None
    for _ in range(repeats):
        done = subprocess.run(
            [sys.executable, "-c", FLOOR_CODE, str(path)], capture_output=True, text=True, check=True
        )
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        if best is None or figures["total"] < best["total"]:
            best = figures
    assert best is not None
    return best


def measure_breakdown(path: Path) -> dict[str, Any]:
    """The grid's phases in one fresh process (see ``BREAKDOWN_CODE``)."""
    done = subprocess.run(
        [sys.executable, "-c", BREAKDOWN_CODE, str(path)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the breakdown run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def run_grid(work: Path, data: Path, label: str, args: Sequence[str], cache: Path) -> tuple[Timed, Path]:
    """One full grid as a pytest subprocess; its timing and report directory."""
    test = work / "grid" / "test_grid.py"
    test.parent.mkdir(parents=True, exist_ok=True)
    test.write_text(GRID_TEST, encoding="utf-8")
    report = work / f"report-{label}"
    cmd = [
        sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:randomly",
        # as this repository's pyproject does for its own runs (the grid runs under a rootdir of its own):
        # langsmith's pytest plugin, which the langmem extra installs, is no part of the audit; it costs each
        # pytest process of the grid (the controller and each worker) about 0.8 CPU s (an empty session: 1.2 -> 0.4)
        "-p", "no:langsmith_plugin",
        "--rootdir", str(test.parent), "-o", f"cache_dir={cache}",
        "--restore-data", str(data), "--restore-report-dir", str(report),
        # small --questions runs lack the power for the family expectations: report, do not fail
        "--restore-family-checks", "report", *args,
    ]
    timed = run_timed(cmd, cwd=test.parent)
    if timed.returncode != 0:
        raise RuntimeError(f"grid run {label} failed ({timed.returncode}):\n{timed.output[-3000:]}")
    return timed, report


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Best wall time of ``repeats`` calls (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def compare_rankers(data: Path, questions: int, repeats: int) -> dict[str, Any]:
    """BM25-lite against a configured ``rank_bm25.BM25Okapi`` on the same stores and queries."""
    import math

    from rank_bm25 import BM25Okapi  # type: ignore[import-untyped]

    from pytest_restore.audit.run import Audit, AuditConfig
    from pytest_restore.data.dataset import load_dataset
    from pytest_restore.data.words import words
    from pytest_restore.memory.eviction import Control, Fifo, NoEvict, RandomPolicy
    from pytest_restore.memory.retrieval import TOP_K, LexicalIndex, bm25_scores
    from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer

    class ConfiguredOkapi(BM25Okapi):  # type: ignore[misc]
        """BM25Okapi with BM25-lite's IDF (no floor needed: it is never negative)."""

        def _calc_idf(self, nd: dict[str, int]) -> None:
            for word, freq in nd.items():
                self.idf[word] = math.log1p((self.corpus_size - freq + 0.5) / (freq + 0.5))

    dataset = load_dataset(data)
    audit = Audit(dataset, AuditConfig(questions=questions), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    policies = (NoEvict(), Fifo(), RandomPolicy(), Control())
    cases: list[tuple[Any, npt.NDArray[np.bool_]]] = []
    for p in audit.questions:
        for policy in policies:
            for budget in audit.config.budgets:
                if policy.name == "no-evict" and budget != audit.config.budgets[0]:
                    continue
                cases.append((p, audit.retain(policy, p, budget, 0, {})))
    docs = {id(p): [list(words(u.content)) for u in p.history.units] for p in audit.questions}  # warm, shared

    def top_k(scores: npt.NDArray[np.float64], positions: npt.NDArray[np.int64]) -> list[int]:
        keep = scores > 0
        cand, sc = positions[keep], scores[keep]
        return [int(x) for x in cand[np.lexsort((-cand, -sc))][:TOP_K]]

    def ours() -> list[list[int]]:
        out = []
        indexes: dict[int, LexicalIndex] = {}
        for p, store in cases:
            index = indexes.get(id(p))
            if index is None:
                index = indexes[id(p)] = LexicalIndex.build(p.history)
            scores = bm25_scores(index, store)
            members = np.flatnonzero(store)
            out.append(top_k(scores[members], members))
        return out

    def theirs() -> tuple[list[list[int]], list[npt.NDArray[np.float64]]]:
        out: list[list[int]] = []
        all_scores: list[npt.NDArray[np.float64]] = []
        for p, store in cases:
            members = np.flatnonzero(store)
            corpus = [docs[id(p)][i] for i in members]
            query = list(dict.fromkeys(words(p.question.question)))
            if not any(corpus):  # rank_bm25 cannot index a store without a word
                out.append([])
                all_scores.append(np.zeros(len(members)))
                continue
            scores = np.asarray(ConfiguredOkapi(corpus, k1=1.2, b=0.75).get_scores(query), dtype=np.float64)
            all_scores.append(scores)
            out.append(top_k(scores, members))
        return out, all_scores

    mine = ours()
    other, other_scores = theirs()
    same = sum(a == b for a, b in zip(mine, other))
    max_diff = 0.0
    for (p, store), theirs_scores in zip(cases, other_scores):
        index = LexicalIndex.build(p.history)
        members = np.flatnonzero(store)
        ours_scores = bm25_scores(index, store)[members]
        if ours_scores.size:
            max_diff = max(max_diff, float(np.max(np.abs(ours_scores - theirs_scores))))
    t_ours = best_of(ours, repeats)
    t_theirs = best_of(theirs, 1)
    return {
        "cases": len(cases),
        "questions": len(audit.questions),
        "identical": same,
        "max_score_diff": max_diff,
        "ours": t_ours,
        "theirs": t_theirs,
    }


def compare_bootstrap(records_path: Path, resamples: int, repeats: int) -> dict[str, Any]:
    """The project's bootstrap against ``scipy.stats.bootstrap`` on the grid's cell statistics."""
    from scipy import stats as scipy_stats

    from pytest_restore.bootstrap import _DRAWS, Resampler
    from pytest_restore.report.inputs import read_records
    from pytest_restore.stats.tally import CORRECT_ROW, IRR_ROW, N_ROW, REC_ROW, tally_cells

    records = read_records(records_path)
    ids = sorted({r.question_id for r in records})
    vectors: list[dict[str, npt.NDArray[np.float64]]] = []
    for cell in tally_cells(records, ids).values():
        rows = {"n": N_ROW, "irr": IRR_ROW, "rec": REC_ROW, "correct": CORRECT_ROW}
        vectors.append({k: cell.counts[row].astype(np.float64) for k, row in rows.items()})
    stats_of = [
        (x[num], x[den_a] + (x[den_b] if den_b else 0))
        for x in vectors
        for num, den_a, den_b in (("irr", "irr", "rec"), ("irr", "n", ""), ("correct", "n", ""))
    ]
    stats_of = [(num, den) for num, den in stats_of if den.sum() > 0]

    def interval(sums_num: npt.NDArray[np.float64], sums_den: npt.NDArray[np.float64]) -> None:
        ratio = np.divide(sums_num, sums_den, out=np.full(sums_num.shape, np.nan), where=sums_den != 0)
        np.quantile(ratio[~np.isnan(ratio)], [0.025, 0.975])

    def ours_one() -> None:
        num, den = stats_of[0]
        _DRAWS.clear()  # time the draw itself, not the process's cached one
        w = Resampler.draw(ids, resamples, 1)
        sums = w.totals(np.stack([num, den], axis=1))
        interval(sums[:, 0], sums[:, 1])

    def ours_all() -> None:
        _DRAWS.clear()
        w = Resampler.draw(ids, resamples, 1)
        sums = w.totals(np.stack([a for pair in stats_of for a in pair], axis=1))
        for k in range(len(stats_of)):
            interval(sums[:, 2 * k], sums[:, 2 * k + 1])

    def ratio_of_sums(num: npt.NDArray[np.float64], den: npt.NDArray[np.float64], axis: int) -> Any:
        return num.sum(axis=axis) / den.sum(axis=axis)

    sample = stats_of[: min(8, len(stats_of))]

    def theirs_some() -> None:
        rng = np.random.default_rng(1)
        for num, den in sample:
            with np.errstate(invalid="ignore", divide="ignore"):
                scipy_stats.bootstrap(
                    (num, den), ratio_of_sums, paired=True, vectorized=True,
                    n_resamples=resamples, method="percentile", rng=rng,
                )

    t_one = best_of(ours_one, repeats)
    t_all = best_of(ours_all, repeats)
    t_scipy = best_of(theirs_some, 1) / len(sample)
    return {
        "statistics": len(stats_of),
        "ours_one": t_one,
        "ours_per_stat": t_all / len(stats_of),
        "scipy_per_stat": t_scipy,
    }


def scorer_calls(data: Path) -> tuple[int, int]:
    """The llm-importance scorer's naive calls (every unit of every cell) and distinct contents."""
    from pytest_restore.data.dataset import load_dataset

    dataset = load_dataset(data)
    units = sum(sum(len(s) for s in q.haystack_sessions) for q in dataset.questions if not q.is_abstention)
    distinct = len({t.content for q in dataset.questions if not q.is_abstention for s in q.haystack_sessions for t in s})
    return units, distinct


# -- the command -----------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MB"


def bench_dataset(
    table: Table, work: Path, label: str, *, questions: int, tokens: int, sessions: int | None, args: argparse.Namespace,
    full: bool, reuse: str = "real", details: bool = True,
) -> dict[str, Any]:
    """Every figure of one dataset into ``table``; the raw figures.

    ``full``: also the warm and serial grids and the phase breakdown rows;
    ``details``: the phase breakdown (for --scale) and the model-call rows.
    """
    data = work / f"synthetic-{label}.json"
    gen = make_dataset(data, questions, 0, tokens, sessions, reuse)
    floor = measure_floor(data, args.repeats)
    table.add(f"[{label}] dataset", f"{floor['questions']} questions, {floor['history_tokens'] / 1e6:,.1f}M history tokens",
              f"{data.stat().st_size / 2**20:,.0f} MB file, {floor['turns']:,} turns, {floor['distinct_texts']:,} distinct texts "
              f"({floor['distinct_tokens'] / floor['history_tokens']:.0%} of the tokens); {reuse} reuse; generated in {gen:.1f} s")
    table.add(f"[{label}] floor: parse + count distinct texts", f"{floor['total']:.2f} s",
              f"parse {floor['parse']:.2f} s + count {floor['count']:.2f} s ({floor['distinct_tokens'] / 1e6:,.1f}M tokens), fresh process, best of {args.repeats}")
    out: dict[str, Any] = {"floor": floor}
    runs = [("n2-cold", ["-n", "2"], work / f"cache-{label}")]
    if full:
        runs += [("n2-warm", ["-n", "2"], work / f"cache-{label}"), ("serial", ["-p", "no:xdist"], work / f"cache-{label}-serial")]
    report = None
    for name, extra, cache in runs:
        timed, rep = run_grid(work, data, f"{label}-{name}", extra, cache)
        report = report or rep
        out[name] = timed
        note = {"n2-cold": "-n 2, empty cache", "n2-warm": "-n 2, prepared data cached by the previous run",
                "serial": "-p no:xdist, empty cache"}[name]
        table.add(f"[{label}] grid {name}", f"{timed.seconds:.1f} s = {timed.seconds / floor['total']:.1f}x floor",
                  f"{note}; peak RSS of the process tree {_mb(timed.peak_tree_bytes)}")
    assert report is not None
    if "serial" in out:
        ratio = out["serial"].seconds / out["n2-cold"].seconds
        table.add(f"[{label}] -n 2 against serial, both cold", f"{ratio:.2f}x as fast",
                  f"serial {out['serial'].seconds:.1f} s / -n 2 {out['n2-cold'].seconds:.1f} s (above 1: -n 2 is faster)")
    if not details:
        return out
    parts = measure_breakdown(data)
    out["breakdown"] = parts
    if full:
        total = parts["total"]
        table.add(f"[{label}] grid in one process, without pytest", f"{total:.1f} s",
                  f"the serial grid's work phase by phase (below); pytest and its items add {out['serial'].seconds - total:.1f} s")
        for phase, seconds in sorted(parts["phases"].items(), key=lambda kv: -kv[1]):
            table.add(f"[{label}]   {phase}", f"{seconds:.2f} s", f"{seconds / total:.0%} of the in-process grid")
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    for reader, calls in summary.get("model_calls", {}).items():
        table.add(f"[{label}] reader calls ({reader})", f"{calls['reader_unique']:,} of {calls['reader_naive']:,} naive = {calls['reader_ratio']:.2f}",
                  "oracle, policy and restored of every record; from the records' prompt ids")
        table.add(f"[{label}] judge calls", f"{calls['judge_unique']:,} of {calls['judge_naive']:,} naive = {calls['judge_ratio']:.2f}",
                  "distinct (question, reference, answer)")
    units, distinct = scorer_calls(data)
    budgets = 3
    table.add(f"[{label}] scorer calls", f"{distinct:,} of {units * budgets:,} naive = {distinct / (units * budgets):.3f}",
              "distinct unit contents against every unit of the three llm-importance cells")
    out["records"] = report / "records.jsonl"
    return out


def run(args: argparse.Namespace) -> int:
    """The bench: every figure, one table."""
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="pytest-restore-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    table = Table()
    print(f"bench: working in {work} ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})", file=sys.stderr)
    # numba compiles the kernels on the first run after an install or an upgrade (and caches them):
    # a small grid first, so that the timed grids do the audit's work only
    warm = work / "synthetic-warm-up.json"
    make_dataset(warm, 6, 0, 20_000, None, "real")  # long enough for every policy to evict at 8k
    timed, _ = run_grid(work, warm, "warm-up", ["-p", "no:xdist"], work / "cache-warm-up")
    table.add("warm-up: a 6-question grid", f"{timed.seconds:.1f} s",
              "serial; compiles the numba kernels if this install has not yet (cached after), so the grids below do not")
    s = bench_dataset(table, work, "S", questions=args.questions, tokens=102_000, sessions=None, args=args, full=True)
    table.add("peak RSS, largest single process", _mb(children_maxrss_bytes()), "getrusage(RUSAGE_CHILDREN).ru_maxrss over every run so far")
    rk = compare_rankers(work / "synthetic-S.json", args.ranker_questions, args.repeats)
    table.add("ranker: identical top-k", f"{rk['identical']:,} of {rk['cases']:,} stores",
              f"{rk['questions']} questions x (no-evict, fifo, random, control x 3 budgets); max |score diff| {rk['max_score_diff']:.1e}")
    table.add("ranker: BM25-lite vs rank_bm25", f"{rk['theirs'] / rk['ours']:.0f}x faster",
              f"ours {rk['ours'] * 1e3:.0f} ms (index built once per question), rank_bm25 {rk['theirs']:.1f} s (one BM25Okapi per store)")
    bs = compare_bootstrap(s["records"], args.resamples, args.repeats)
    table.add("bootstrap per statistic, amortised", f"{bs['scipy_per_stat'] / bs['ours_per_stat']:.0f}x faster than scipy",
              f"ours {bs['ours_per_stat'] * 1e3:.2f} ms (one resample draw shared by the grid's {bs['statistics']} cell intervals), scipy {bs['scipy_per_stat'] * 1e3:.0f} ms; R = {args.resamples:,}")
    table.add("bootstrap one statistic alone", f"{bs['scipy_per_stat'] / bs['ours_one']:.1f}x faster than scipy",
              f"ours {bs['ours_one'] * 1e3:.0f} ms including the draw, same resamples as scipy")
    if args.high_reuse:
        bench_dataset(table, work, "S-high-reuse", questions=args.questions, tokens=102_000, sessions=None, args=args,
                      full=False, reuse="high", details=False)
    if args.scale:
        m = bench_dataset(table, work, "M", questions=args.scale_questions, tokens=510_000, sessions=500, args=args, full=False)
        per_s = s["n2-cold"].seconds / (s["floor"]["history_tokens"] / 1e6)
        per_m = m["n2-cold"].seconds / (m["floor"]["history_tokens"] / 1e6)
        table.add("scale: grid seconds per million history tokens", f"S {per_s:.2f}, M {per_m:.2f}",
                  "M histories are 5x longer; redundancy's pairwise similarity is O(n^2) in units per history. "
                  "Below, each phase per history token, M against S: 1 is linear growth; M has half S's tokens, "
                  "so fixed costs show up to 2, per-question costs below 1")
        # phase by phase, per million history tokens: linear work costs the same per token at
        # 5x the history, per-question work (reading, judging) less, quadratic work more
        tokens_s, tokens_m = s["floor"]["history_tokens"] / 1e6, m["floor"]["history_tokens"] / 1e6
        for phase, seconds in sorted(s["breakdown"]["phases"].items(), key=lambda kv: -kv[1]):
            if seconds < 0.1:
                continue
            ps, pm = seconds / tokens_s, m["breakdown"]["phases"].get(phase, 0.0) / tokens_m
            table.add(f"scale: {phase}", f"S {ps * 1e3:.0f}, M {pm * 1e3:.0f} ms per M tokens",
                      f"M/S {pm / ps:.1f} per history token")
        table.add("scale: peak tree RSS, -n 2", f"S {_mb(s['n2-cold'].peak_tree_bytes)}, M {_mb(m['n2-cold'].peak_tree_bytes)}",
                  "per process it follows the largest history's n x n similarity arrays (and the "
                  "512 MB overlap cache), not the number of questions")
    print(table.render())
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``bench`` subcommand's options."""
    parser.add_argument("--questions", type=int, default=500, help="questions of the LongMemEval-S-sized dataset [500]")
    parser.add_argument("--work-dir", default="", help="where datasets, caches and reports go [a temporary directory]")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of the in-process timings (best is kept) [3]")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples [10000]")
    parser.add_argument("--ranker-questions", type=int, default=100, help="questions of the ranker comparison [100]")
    parser.add_argument("--scale", action="store_true", help="also run a LongMemEval-M-sized dataset")
    parser.add_argument("--high-reuse", action=argparse.BooleanOptionalAction, default=True,
                        help="also time the -n 2 grid on a file whose histories share most of their text [on]")
    parser.add_argument("--scale-questions", type=int, default=50, help="questions of the M-sized dataset [50]")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the benchmark's arguments and run it."""
    parser = argparse.ArgumentParser(
        prog="python benches/bench_grid.py",
        description=(
            "Generate the full synthetic LongMemEval-S and print, in one table: the floor (parse + "
            "count distinct texts), the full default grid with the fake models (-n 2 cold and warm, "
            "serial) as wall time and ratio to the floor, peak memory, BM25-lite against rank_bm25, "
            "the bootstrap against scipy.stats.bootstrap, and the model calls against the naive "
            "count. Needs the dev extra (rank_bm25)."
        ),
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
