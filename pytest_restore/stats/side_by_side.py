"""The memory libraries beside the built-in policies: one row per policy and budget, every figure a comparison needs.

A run that names a memory library (``--restore-policies
fifo,session-summary,mem0,graphiti,langmem``) asks which store to deploy, so
its report puts each regime-(b) cell's figures on one row, from the sources
that already hold them (nothing here is counted again):

- the bins, the two-bin share with its interval, the destruction share: the
  cell's :class:`~pytest_restore.stats.results.CellStats`; the distortion
  share with its interval (the same question-cluster bootstrap):
  :attr:`~pytest_restore.stats.analysis.Analysis.distortion`;
- the memories and tokens held: the mean over the cell's records of the store
  each question was read from (``store_units``, ``store_tokens``: units for a
  store of raw turns, memories for a memory system);
- model calls and ingest seconds per turn fed, and the library's version: the
  memory-systems check's figures of the cell (``SystemFigures``; a policy
  that is no memory system makes no call of its own, and has no ingest time);
- the cost per question of the policy's own model calls: the cell's memory
  share in :mod:`pytest_restore.stats.cost` (a library's chat calls through
  the run's gateway, priced as the writer model, and its embeddings, priced
  as the embedder, split over the questions of each store).

:func:`side_by_side` builds the rows once per report, before anything renders
(:func:`pytest_restore.report.model.build_model`); ``report.md``'s section
(:mod:`pytest_restore.report.side_by_side`) and ``cells.csv``'s extra columns
(:data:`SIDE_COLUMNS`) format them. A run without a library gets neither, so its
files are as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_restore.record import Record, ranker_of
from pytest_restore.stats.analysis import Analysis
from pytest_restore.stats.cost import CostFigures

#: The columns ``cells.csv`` gains when a memory library ran (the same values on a cell's regime (a) and (b) rows
#: and under every ranker: they describe the cell's stores, not how they were read).
SIDE_COLUMNS: tuple[str, ...] = (
    "memories_held",
    "tokens_held",
    "calls_per_turn",
    "embeddings_per_turn",
    "ingest_s_per_turn",
    "memory_usd_per_question",
    "library",
)

#: The kind of call a library's figures count its embeddings requests under.
EMBEDDINGS = "embeddings"


@dataclass(frozen=True)
class SideRow:
    """One regime-(b) cell's figures side by side (module docstring); ``None``: not measured or undefined."""

    policy: str
    budget: int
    reader: str
    N: int
    irr: int
    rec: int
    dis: int
    res: int
    two_bin_share: float | None
    two_bin_lo: float | None
    two_bin_hi: float | None
    dis_share: float | None
    #: the distortion share's question-cluster bootstrap interval (the two-bin share's resamples and confidence)
    dis_lo: float | None
    dis_hi: float | None
    destruction_share: float | None
    #: mean memories (units, for a store of raw turns) and tokens in the store a question was read from
    memories_held: float | None
    tokens_held: float | None
    #: the policy's own chat calls and embeddings requests per turn it was fed (0: it makes none)
    calls_per_turn: float | None
    embeddings_per_turn: float | None
    #: seconds to make and feed a library's stores, per turn fed (``None``: no library)
    ingest_s_per_turn: float | None
    #: the policy's own model calls per question, in USD (``None``: a price is unknown)
    memory_usd_per_question: float | None
    #: whether some of those calls' tokens are estimated (a model reported no usage)
    memory_estimated: bool
    #: the library's distribution and version (``mem0ai 2.2.1``), "" for a built-in policy
    library: str


def _library_cells(info_cells: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, str], Mapping[str, Any]]:
    """The memory-systems check's figures by (policy, budget, reader)."""
    return {(str(c["policy"]), int(c.get("budget", 0)), str(c.get("reader", ""))): c["figures"] for c in info_cells}


def ran_a_library(system_cells: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a memory library's cell is among the memory-systems check's cells."""
    return any(c["figures"].get("library") for c in system_cells)


def _mean(values: Sequence[int | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _restorable_share(num: int, restorable: int) -> float | None:
    """``num`` over the errors a restore fixes or a memory kept a trace of (irr + rec + dis), as the
    distortion finding reads it: residual errors are not in the denominator (cells.csv's ``dis_share``,
    a share of every error, is another figure)."""
    return num / restorable if restorable else None


def side_by_side(
    analysis: Analysis, records: Sequence[Record], system_cells: Sequence[Mapping[str, Any]], cost: CostFigures | None
) -> tuple[SideRow, ...]:
    """The rows, one per regime-(b) cell of the run's ranker in the one cell order; empty when no library ran."""
    if not ran_a_library(system_cells):
        return ()
    figures = _library_cells(system_cells)
    ranker = analysis.counts.ranker  # the cells' ranker: the baseline's when the run compares several
    costs = {(c.policy, c.budget, c.reader): c for c in cost.cells if c.ranker == ranker} if cost is not None else {}
    stores: dict[tuple[str, int, str], list[Record]] = {}
    for r in records:
        if r.regime == "b" and ranker_of(r) == ranker:
            stores.setdefault((r.policy, r.budget, r.reader), []).append(r)
    distortion = {d.key: d for d in analysis.distortion}
    rows = []
    for cell in analysis.cells:
        if cell.regime != "b":
            continue
        key = (cell.policy, cell.budget, cell.reader)
        dis = distortion.get(cell.key)
        mine = stores.get(key, [])
        f = figures.get(key)
        spent = costs.get(key)
        memory = spent.memory if spent is not None else None
        calls = embeddings = ingest = None
        if f is not None:
            turns = max(1, int(f["units"]))
            embeddings = f["calls"].get(EMBEDDINGS, 0) / turns
            calls = sum(n for kind, n in f["calls"].items() if kind != EMBEDDINGS) / turns
            ingest = float(f["ingest_seconds"]) / turns if f.get("library") else None
        elif memory is None:  # a store of raw turns built without a model (fifo, ...): no call of its own
            calls = embeddings = 0.0
        rows.append(SideRow(
            cell.policy, cell.budget, cell.reader, cell.N, cell.irr, cell.rec, cell.dis, cell.res,
            cell.two_bin_share, cell.two_bin_lo, cell.two_bin_hi, _restorable_share(cell.dis, cell.irr + cell.rec + cell.dis),
            dis.lo if dis is not None else None, dis.hi if dis is not None else None, cell.destruction_share,
            _mean([r.store_units for r in mine]), _mean([r.store_tokens for r in mine]),
            calls, embeddings, ingest,
            memory.usd if memory is not None else (0.0 if spent is not None else None),
            bool(memory is not None and memory.estimated),
            str(f.get("library", "")) if f is not None else "",
        ))
    return tuple(rows)
