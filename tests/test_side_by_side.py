"""The memory libraries audited side by side with the built-in policies, in one run and one report.

One run of the grid on the LoCoMo fixture (one budget that binds, the fake
writer answering every library through the run's gateway) is shared by the
module, run in this process as ``python -m pytest_restore run`` (which writes
pytest's files byte for byte, ``test_cli_run.py``); each library the dev extra did not install here is skipped by
name with its install line. A library's calls are priced per question from
what the gateway counted (a writer that reports its usage), unit by unit;
report.html is read in headless Chromium; a dry run estimates each library's
calls without building a store.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from grid_helpers import (
    GRID,
    ChildRun,
    figures_not_rendered,
    read_child,
    run_audit_here,
    shared_run,
)
from test_html import CHROMIUM, open_page

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.loaders import load_data
from pytest_restore.libraries.guest import (
    close_gateway,
    configure_gateway,
    library_version,
    run_gateway,
)
from pytest_restore.libraries.registry import LIBRARIES, Library
from pytest_restore.models.base import ChatRequest, ChatResult
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.fake_writer import FakeWriter
from pytest_restore.models.gateway import Gateway
from pytest_restore.models.providers import price_of
from pytest_restore.report.inputs import read_records
from pytest_restore.report.numbers import share_ci
from pytest_restore.stats.analysis import analyse
from pytest_restore.stats.cost import cost_figures
from pytest_restore.stats.results import CELL_COLUMNS, policy_order
from pytest_restore.stats.side_by_side import SIDE_COLUMNS

LOCOMO = Path(__file__).resolve().parent.parent / "fixtures" / "locomo_tiny.json"
#: one budget, and one that binds: fifo evicts, the libraries' adapters delete their oldest memories
BUDGET = 500
#: the libraries the side-by-side run names, and whether each is installed here
NAMED = ("mem0", "graphiti", "langmem")
ROWS: dict[str, Library] = {library.name: library for library in LIBRARIES if library.name in NAMED}
INSTALLED = [name for name in NAMED if ROWS[name].missing() is None]
POLICIES = ["fifo", "session-summary", *INSTALLED]


def _build(project: Path) -> None:
    """The run, as this process's own call of the ``run`` command: its tests read its exit code and the files it
    wrote, no terminal output of pytest's. A child pytest cost its start, its imports (the three libraries among
    them, which this process imports for its other tests anyway) and its exit: 13-15 CPU s against 6-10."""
    (project / "test_grid.py").write_text(GRID)
    # no test reads its figure (report.html is read for its stores, beside whatever figure it holds): built, not rendered
    with figures_not_rendered():
        run_audit_here(
            [
                f"--restore-data={LOCOMO}", f"--restore-budgets={BUDGET}", f"--restore-policies={','.join(POLICIES)}",
                "--restore-writer-model=fake", "--restore-bootstrap=200", "--restore-family-checks=report",
            ],
            project, project / "report",
        )


@pytest.fixture(scope="module")
def side_by_side_grid(tmp_path_factory: pytest.TempPathFactory) -> ChildRun:
    """``--restore-policies fifo,session-summary,mem0,graphiti,langmem`` (those installed) at one budget, fake models;
    run once per test run (the xdist workers that run this module's tests share it: ``shared_run``)."""
    return read_child(shared_run(tmp_path_factory, "side-by-side-grid", _build) / "report")


def _cells(run: ChildRun) -> list[dict[str, str]]:
    with (run.report / "cells.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def _version(name: str) -> str:
    return f"{ROWS[name].distribution} {library_version(ROWS[name].distribution)}" if name in ROWS else ""


def _installed(name: str) -> None:
    """Skip, saying why, where the library ``name`` is not installed."""
    if name in ROWS and ROWS[name].missing() is not None:
        pytest.skip(str(ROWS[name].missing()))


def test_the_side_by_side_grid_passes(side_by_side_grid: ChildRun) -> None:
    assert side_by_side_grid.ret == 0, side_by_side_grid.output[-4000:]
    header = (side_by_side_grid.report / "cells.csv").read_text().splitlines()[0].split(",")
    assert header == [*CELL_COLUMNS, *SIDE_COLUMNS]  # the columns of a run without a library, then the side's


@pytest.mark.parametrize("policy", ["fifo", "session-summary", *NAMED])
def test_cells_csv_has_a_row_per_policy_and_budget_with_its_version(side_by_side_grid: ChildRun, policy: str) -> None:
    """Each policy's cell at the budget, in both regimes, with what its stores held, its own calls per turn fed,
    its ingest time, its own calls' cost per question (zero with the fake writer) and its library's version."""
    _installed(policy)
    rows = [r for r in _cells(side_by_side_grid) if r["policy"] == policy]
    assert [(r["budget"], r["regime"]) for r in rows] == [(str(BUDGET), "a"), (str(BUDGET), "b")]
    for row in rows:
        assert row["library"] == _version(policy)
        assert float(row["memories_held"]) > 0 and float(row["tokens_held"]) <= BUDGET
        assert row["memory_usd_per_question"] == "0.000000"  # fake models are free; the column is the library's price
        if policy in NAMED:
            assert float(row["calls_per_turn"]) >= 1 and float(row["ingest_s_per_turn"]) > 0
        else:  # no model call of its own, no library to time
            assert (row["calls_per_turn"], row["embeddings_per_turn"], row["ingest_s_per_turn"]) == ("0.0000", "0.0000", "")


@pytest.mark.parametrize("policy", ["fifo", "session-summary", *NAMED])
def test_report_md_has_a_row_per_policy_and_budget_with_its_version(side_by_side_grid: ChildRun, policy: str) -> None:
    _installed(policy)
    text = (side_by_side_grid.report / "report.md").read_text()
    section = text.split("## Memory libraries side by side (regime b)", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith(f"| {policy} | ")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == str(BUDGET) and cells[-1] == (_version(policy) or "-")
    cell = next(r for r in _cells(side_by_side_grid) if r["policy"] == policy and r["regime"] == "b")
    assert cells[2:7] == [cell[k] for k in ("N", "irr", "rec", "dis", "res")]
    # the distortion share as its header says, dis / (irr + rec + dis): residual errors left out
    irr, rec, dis = (int(cell[k]) for k in ("irr", "rec", "dis"))
    assert cells[8].split(" ")[0] == (f"{dis / (irr + rec + dis):.2f}" if irr + rec + dis else "-")
    # with its question-cluster interval, as the two-bin share has it: the run's resamples over the same questions
    analysis = analyse(read_records(side_by_side_grid.report / "records.jsonl"), resamples=200)
    [share] = [d for d in analysis.distortion if (d.key.policy, d.key.budget) == (policy, BUDGET)]
    assert cells[8] == share_ci(share.share, share.lo, share.hi)
    assert share.share is None or (share.lo is not None and share.hi is not None and share.lo <= share.share <= share.hi)


def test_a_library_records_carry_its_share_of_its_stores_calls(side_by_side_grid: ChildRun) -> None:
    """The libraries' records name the writer model their gateway calls went to, with each question's share of its
    store's tokens (the fake writer reports none: zero, not missing); the built-in policies' carry none."""
    if not INSTALLED:
        pytest.skip("no memory library is installed here")
    records = read_records(side_by_side_grid.report / "records.jsonl")
    for r in records:
        if r.policy in INSTALLED and r.excluded is None:
            assert r.writer == "fake" and r.memory_tokens == (0.0, 0.0)
        elif r.policy == "fifo":
            assert r.writer is None and r.memory_tokens is None
    # and its embeddings: the tokens its stores embedded, per question, beside the chat calls' (the fake embedder: free)
    summary = json.loads((side_by_side_grid.report / "summary.json").read_text())
    figures = {c["policy"]: c["figures"] for c in summary["run"]["checks"]["memory_systems"]["result"]["cells"]}
    costs = {c["policy"]: c["memory"] for c in summary["cost"]["per_cell"]}
    for name in INSTALLED:
        assert figures[name]["embedder"] == "fake" and figures[name]["embedding_tokens"] > 0
        assert costs[name]["embedding_tokens"] > 0 and costs[name]["usd"] == 0.0
    assert "embedder" not in figures["session-summary"] and "embedding_tokens" not in (costs.get("fifo") or {})


# -- a library's calls priced per question ---------------------------------------------------------


class _Billed(FakeWriter):
    """The fake writer, reporting a usage for each answer as a provider would (7 tokens in per message, 3 out)."""

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        return [ChatResult(self.reply(r), input_tokens=7 * len(r.as_openai_messages()), output_tokens=3) for r in requests]


@pytest.fixture
def billed_gateway() -> Iterator[None]:
    configure_gateway(lambda: Gateway(_Billed(), FakeEmbedder(), chat_name="fake", embedding_name="fake"))
    yield
    close_gateway()


def test_a_librarys_own_calls_are_priced_and_split_over_the_questions_of_its_store(billed_gateway: None) -> None:
    """What the gateway counted for a store is what its questions' shares add up to; priced as the writer model."""
    _installed("mem0")
    from pytest_restore.libraries.mem0 import Mem0System

    dataset = load_data(LOCOMO)
    audit = Audit(dataset, AuditConfig(budgets=(BUDGET,)), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    cell = audit.run_cell(Mem0System(), BUDGET)
    gateway = run_gateway()
    assert gateway is not None and gateway.tokens["input"] > 0
    records = [r for r in cell.records if r.regime == "b" and r.excluded is None]
    assert {r.writer for r in records} == {"fake"}
    # each history's questions share its store's tokens: summed over them, every store once (one seed)
    per_history = Counter(p.question.history_key for p in audit.questions)
    assert len(records) == sum(per_history.values())
    assert sum(r.memory_tokens[0] for r in records if r.memory_tokens) == pytest.approx(gateway.tokens["input"], abs=0.05)
    assert sum(r.memory_tokens[1] for r in records if r.memory_tokens) == pytest.approx(gateway.tokens["output"], abs=0.05)
    # priced at the writer's price (here the reader's name, "fake": $2 in, $8 out per million tokens)
    cost = cost_figures(records, {"fake": (2.0, 8.0)})
    assert cost is not None
    [mine] = cost.cells
    assert mine.memory is not None and mine.memory.usd == pytest.approx(
        (2.0 * gateway.tokens["input"] + 8.0 * gateway.tokens["output"]) / 1e6 / len(records), rel=1e-3
    )  # each share is kept to a hundredth of a token
    # its embeddings: the store's figures name the embedder and the tokens of every text it asked for, priced at
    # the embedder's price (an OpenAI embedding model's here: $0.02 per million tokens in) over the same questions
    assert cell.memory is not None and cell.memory.embedder == "fake"
    assert cell.memory.embedding_tokens == gateway.tokens["embedding"] > 0
    embedder = "openai:text-embedding-3-small"
    assert price_of(embedder) == (0.02, 0.0) and price_of("openai:my-local-embedder") is None
    where = {(r.policy, r.budget, r.reader): (embedder, cell.memory.embedding_tokens) for r in records}
    [embedded] = cost_figures(records, {"fake": (2.0, 8.0), embedder: (0.02, 0.0)}, where).cells  # type: ignore[union-attr]
    assert embedded.memory is not None and embedded.memory.embedding_tokens == pytest.approx(gateway.tokens["embedding"] / len(records))
    assert embedded.memory.usd == pytest.approx(mine.memory.usd + 0.02 * gateway.tokens["embedding"] / 1e6 / len(records))
    [unpriced] = cost_figures(records, {"fake": (2.0, 8.0), embedder: None}, where).cells  # type: ignore[union-attr]
    assert unpriced.memory is not None and unpriced.memory.usd is None  # an embedder of unknown price: unknown


# -- report.html: each store of a question beside the others -------------------------------------


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_report_html_shows_each_librarys_held_memories_beside_the_other_stores(side_by_side_grid: ChildRun, tmp_path: Path) -> None:
    """A library's record opened in headless Chromium: under its story, one column per policy of the run at the
    same budget, a library's named with its version and listing the memories its record names (the ones citing
    the gold, with the turns they cite, then the others its reader saw), a store of raw turns its gold turns."""
    if not INSTALLED:
        pytest.skip("no memory library is installed here")
    library = INSTALLED[0]
    records = read_records(side_by_side_grid.report / "records.jsonl")
    dom = open_page(side_by_side_grid.report / "report.html", f"policy={library}&regime=b&open=first", tmp_path / "profile")
    opened = next(r for r in records if r.policy == library and r.regime == "b")
    side = dom.by_id("story-side")
    stores = side.classed("store")
    assert [s.attrs["data-policy"] for s in stores] == sorted(POLICIES, key=policy_order)
    for store in stores:
        policy = store.attrs["data-policy"]
        mine = next(r for r in records if r.policy == policy and r.regime == "b" and r.question_id == opened.question_id)
        assert store.attrs.get("data-library", "") == _version(policy)
        if mine.memories is None:  # a store of raw turns: its gold turns, kept or evicted
            assert [int(u.attrs["data-pos"]) for u in store.classed("held-turn")] == list(mine.gold_positions or ())
            continue
        memories = store.classed("memory")
        texts = [m.classed("text")[0].text for m in memories]
        assert texts == [*(mine.memories.texts or ()), *(mine.memories.others_texts or ())]
        wheres = [m.classed("where")[0].text for m in memories]
        assert wheres == [*(mine.memories.where or ()), *(mine.memories.others_where or ())]
        assert all("turn" in w for w in wheres)  # each names the turns it cites
        assert [m.attrs["data-gold"] for m in memories] == ["true"] * len(mine.memories.texts or ()) + ["false"] * len(
            mine.memories.others_texts or ()
        )


# -- the dry run's estimate of the libraries' calls ------------------------------------------------


def test_the_dry_run_estimates_each_librarys_calls_without_running_it(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each library named gets a line of the writer model's calls, its measured calls per turn times the turns its
    stores will be fed, at its measured tokens per call, said to be an estimate and where the figures are; no
    library store is built (the gateway would start for one). A library whose tokens were never measured is said
    in a line of its own, left out of the sum."""
    if not INSTALLED:
        pytest.skip("no memory library is installed here")
    from pytest_restore.libraries import registry
    from pytest_restore.libraries.registry import CallEstimate

    def no_gateway(self: Gateway) -> Gateway:
        raise AssertionError("a dry run started the gateway: a library's store was built")

    monkeypatch.setattr(Gateway, "start", no_gateway)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-DUMMY-KEY-0123456789")
    unmeasured = INSTALLED[-1]
    monkeypatch.setitem(registry.CALL_ESTIMATES, unmeasured, CallEstimate(2.0, None, "a test's figure"))
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", "-p", "no:cacheprovider", f"--restore-data={LOCOMO}", "--restore-budgets=2000,500",
        f"--restore-policies={','.join(['fifo', *INSTALLED])}", "--restore-writer-model=openai:gpt-4o-mini",
        "--restore-writer-embedder=openai:text-embedding-3-small", "--restore-calibration=off", "--restore-dry-run",
    )
    assert result.ret == 0, result.outlines[-20:]
    turns = 2 * (18 + 12)  # two budgets over the fixture's two conversations
    lines = [line for line in result.outlines if line.startswith("library ")]
    for name in INSTALLED[:-1]:
        known = registry.CALL_ESTIMATES[name]
        assert known.tokens is not None
        line = next(line for line in lines if f"  {name}: estimate, {known.chat_per_turn:.2f} chat calls a turn x {turns} turns" in line)
        calls = round(known.chat_per_turn * turns)
        assert line.split()[1:6] == ["openai:gpt-4o-mini", f"{calls:,}", "0", f"{calls:,}", f"{calls * known.tokens[0]:,}"]
        assert "libraries/registry.py" in line
    for name in INSTALLED[:-1]:  # the embeddings beside, at the embedder's price (OpenAI's: $0.02 per million tokens in)
        embeddings = registry.CALL_ESTIMATES[name].embeddings
        assert embeddings is not None
        requests = round(embeddings[0] * turns)
        line = next(line for line in lines if f"  {name}: estimate, {embeddings[0]:.2f} embeddings requests a turn" in line)
        tokens = requests * embeddings[1]
        assert line.split()[1:8] == [
            "openai:text-embedding-3-small", f"{requests:,}", "0", f"{requests:,}", f"{tokens:,}", "0", f"{tokens * 0.02 / 1e6:,.2f}"
        ]
    assert any(line.startswith("estimated cost of what is still to send: at most $") for line in result.outlines)
    [said] = [line for line in lines if line.startswith(f"library {unmeasured}:")]
    assert f"~2 chat calls a turn (a test's figure) x {turns} turns" in said and "not in the estimate" in said
    reader = next(line for line in result.outlines if line.startswith("reader"))
    assert reader.endswith(f"{', '.join(INSTALLED)} counted as fact-extract's stores: estimate")
