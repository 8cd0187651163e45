"""graphiti audited as a memory system, through the run's gateway, answered by the fake writer's graphiti shapes.

The real graphiti-core runs here (the dev extra installs it with Kuzu): an
episode per turn into a Kuzu database in memory, its chat and embedding
calls to a :class:`~pytest_restore.models.gateway.Gateway` on 127.0.0.1
over the :class:`~pytest_restore.models.fake_writer.FakeWriter` (graphiti's
shapes registered by its adapter) and the fake embedder. The rerun test puts
a managed model between the gateway and a loopback upstream
(:class:`~openai_server.OpenAIServer` answering with
:class:`~graphiti_model.GraphitiModel`, the same shapes) to count what goes
upstream.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import library_audit
import numpy as np
import pytest
from graphiti_model import GraphitiModel
from library_audit import LOCOMO, assert_the_budget_kept_the_newest, audit_library, shortest
from net_guard import net_guard
from openai_server import OpenAIServer

from pytest_restore.audit.run import Audit, AuditConfig, Prepared
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import Unit
from pytest_restore.libraries import graphiti as adapter
from pytest_restore.libraries.graphiti import (
    ADDED,
    INVALIDATED,
    GraphitiRanker,
    GraphitiSystem,
)
from pytest_restore.libraries.graphiti_shapes import graphiti_answer
from pytest_restore.libraries.guest import GuestFailure, LibraryEndpoints
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.fake_writer import FakeWriter
from pytest_restore.models.gateway import Gateway
from pytest_restore.models.openai_chat import OpenAIChatModel, OpenAIEmbedder
from pytest_restore.synthetic.generator import generate, write_dataset

pytest.importorskip("graphiti_core", reason="the graphiti extra is not installed")

EMBEDDER, DIMS = "nomic-embed-text", 768
#: a budget no store of the fixture reaches, and one that makes the adapter evict
ALL, SMALL = 5000, 120
#: the share of the fake writer's answers the malformed test breaks
BROKEN = 0.5
#: a question of the fixture's second conversation, the one audited under both budgets
RUTHS = "How far does Ruth run?"
#: an invalidated fact's text ends with the date it stopped being true
UNTIL = re.compile(r" \(until (\d{4}-\d{2}-\d{2})\)$")


def endpoints(server: OpenAIServer | Gateway) -> LibraryEndpoints:
    """Where graphiti's calls go: a gateway (its run token), or a loopback server."""
    if isinstance(server, Gateway):
        return LibraryEndpoints(server.base_url, server.token, server.chat_name, server.embedding_name, server.probe_dimensions())
    return LibraryEndpoints(server.base_url, "run-token", "small-model", EMBEDDER, DIMS)


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    """The run's gateway as a run with ``--restore-writer-model fake`` makes it."""
    with Gateway(FakeWriter(), FakeEmbedder(DIMS)) as running:
        yield running


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_data(LOCOMO)


@pytest.fixture(scope="module")
def audited(gateway: Gateway, locomo: Dataset) -> tuple[Audit, GraphitiSystem]:
    """The fixture's two conversations under graphiti, the second (Ruth's twelve turns) also under a budget that evicts."""
    # its two conversations fed side by side, each by a copy of the system (MemorySystem.parallel_stores)
    system = GraphitiSystem(endpoints(gateway))
    audit = audit_library(locomo, system, GraphitiRanker(), (ALL, SMALL), run=(ALL,), concurrency=2)
    ruths = next(p for p in audit.questions if p.history.question.question == RUTHS).history.question.history_key
    audit.run_cell(system, SMALL, questions=[p for p in audit.questions if p.history.question.history_key == ruths])
    return audit, system


def view_of(audit: Audit, system: GraphitiSystem, question: str, budget: int = ALL) -> tuple[Prepared, np.ndarray]:
    return library_audit.view_of(audit, system, question, budget)


def held_facts(view: Prepared, mask: np.ndarray) -> list[tuple[str, tuple[int, ...], int]]:
    """Each held memory's text, its sources and its position in the view."""
    return [(view.history.units[p].content, view.sources[p], int(p)) for p in np.flatnonzero(mask)]


def test_every_fact_cites_the_turns_of_its_episodes(audited: tuple[Audit, GraphitiSystem]) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "Which evening is Ines's pottery class on now?")
    units = view.history.units
    n = len(units) - int(mask.sum())
    facts = held_facts(view, mask)
    assert facts and all(p >= n for _, _, p in facts)  # graphiti keeps facts, no raw turn
    for text, sources, _ in facts:
        # the writer states a fact as "Speaker: sentence" of the turn its episode was made from
        speaker, _, sentence = UNTIL.sub("", text).partition(": ")
        said = units[max(sources)]
        assert speaker == said.role and sentence in said.content, (text, sources)
    tally = next(t for t in system.tallies if t.question == view.history.question.history_key and t.budget == ALL)
    assert tally.figures.events[ADDED] == tally.held == int(mask.sum())
    # graphiti's calls, counted by kind: entities and facts once per episode, a date per new fact
    calls = tally.figures.calls
    assert calls["entities"] == tally.figures.units == n and calls["facts"] == n - tally.figures.rejected_of("entities")
    assert calls["fact dates"] == tally.figures.events[ADDED] and calls["embeddings"] > 0


def test_a_contradicted_fact_is_held_with_the_date_it_ended(audited: tuple[Audit, GraphitiSystem]) -> None:
    """Ines moved her class (D2:1, turn 6): graphiti invalidated the fact of her signing up (D1:1, turn 0)
    and keeps it, dated; the fact that replaced it cites the later turn."""
    audit, system = audited
    view, mask = view_of(audit, system, "Which evening is Ines's pottery class on now?")
    facts = {sources: text for text, sources, _ in held_facts(view, mask)}
    assert UNTIL.search(facts[(0,)]) and UNTIL.search(facts[(0,)]).group(1) == "2023-03-17"  # type: ignore[union-attr]
    assert "signed up for the pottery class" in facts[(0,)]
    assert "Wednesdays" in facts[(6,)] and not UNTIL.search(facts[(6,)])
    tally = next(t for t in system.tallies if t.question == view.history.question.history_key and t.budget == ALL)
    assert tally.figures.events[INVALIDATED] == sum(1 for t in facts.values() if UNTIL.search(t)) >= 1


def test_the_graphiti_ranker_is_graphitis_search_without_invalidated_facts(audited: tuple[Audit, GraphitiSystem]) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "Which evening is Ines's pottery class on now?")
    ranked = audit.rank(view, mask, "graphiti")
    invalidated = [p for text, _, p in held_facts(view, mask) if UNTIL.search(text)]
    assert ranked and all(mask[p] for p in ranked)
    assert invalidated and not set(invalidated) & set(ranked)  # graphiti's search, filtered to facts still true
    assert set(invalidated) <= set(audit.rank(view, mask, "bm25-lite"))  # the audit's rankers read every held fact
    records = audit.run_cell(system, ALL, ranker="graphiti").records
    assert records and {r.ranker for r in records} == {"graphiti"}


def test_the_graphiti_ranker_reads_only_graphiti_stores(audited: tuple[Audit, GraphitiSystem]) -> None:
    audit, _ = audited
    p = audit.questions[0]
    with pytest.raises(ValueError, match="ranker 'graphiti' reads only the stores of the memory system 'graphiti'"):
        audit.rank(p, np.ones(len(p.history.units), dtype=bool), "graphiti")


def test_a_cells_figures_are_its_stores_graphiti_counted_once_each(audited: tuple[Audit, GraphitiSystem]) -> None:
    audit, system = audited
    figures = audit.run_cell(system, ALL).memory
    stores = [t for t in system.tallies if t.budget == ALL]
    assert figures is not None and figures.stores == len(stores) == 2  # the fixture's two conversations
    assert figures.held == sum(t.held for t in stores) and figures.units == sum(t.figures.units for t in stores)
    for kind in ("entities", "facts", "fact dates", "embeddings"):
        assert figures.calls[kind] == sum(t.figures.calls[kind] for t in stores) > 0
    assert figures.rejected == {} and figures.failed == {}  # the fake writer's answers are all of graphiti's schemas


def test_the_budget_deletes_the_oldest_facts_through_graphiti(audited: tuple[Audit, GraphitiSystem]) -> None:
    audit, system = audited
    small, small_mask, tally = assert_the_budget_kept_the_newest(audit, system, RUTHS, ALL, SMALL)
    # deleted in graphiti itself: its own search finds no fact the adapter let go
    store = GraphitiSystem.live[(tally.question, tuple(sorted(small.history.units[p].content for p in np.flatnonzero(small_mask))))]
    assert len(store.facts) == tally.held


def turns(*lines: str) -> list[Unit]:
    return [Unit(i, 0, i, f"2024/01/0{i + 1} (Mon) 10:00", "Ines", c, f"Ines: {c}", 10) for i, c in enumerate(lines)]


def test_answers_graphiti_cannot_use_are_counted_by_cause_and_their_turns_cited_by_nothing() -> None:
    """The fake writer breaks a share of its answers (cut off mid-JSON, or JSON of another shape): each is
    counted by the call it answered and its cause, and a turn whose entities or facts came back broken is
    cited by no fact (graphiti gave its episode up)."""
    units = turns(
        "I keep a red bicycle in the garage at home.", "My garden has seven tomato plants this year.",
        "Paula visits next weekend from Lisbon by train.", "The pottery class moved to Wednesdays because of work.",
        "Marguerite teaches the evening pottery class downtown.", "I baked twenty custard tarts for the office party.",
    )
    writer = FakeWriter(malformed=BROKEN)
    with Gateway(writer, FakeEmbedder(DIMS)) as broken:
        system = GraphitiSystem(endpoints(broken), budgeted=False)
        held = system.hold(units, np.full(len(units), 10), 10**6, EvictionContext(question_id="h"))
    figures = system.figures()
    rejected = sum(sum(causes.values()) for causes in figures.rejected.values())
    assert rejected == writer.answered["malformed"] > 0  # every broken answer graphiti got, counted once
    causes = {cause for by in figures.rejected.values() for cause in by}
    assert "not valid JSON" in causes and any(c.startswith("JSON of the wrong shape (") for c in causes), causes
    cited = {s for m in held for s in m.sources}
    lost = figures.rejected_of("entities") + figures.rejected_of("facts")
    assert lost > 0 and len(units) - len(cited) >= lost
    assert figures.units == len(units) == figures.calls["entities"] and figures.failed == {}


def test_graphiti_answers_only_its_own_schemas_from_the_requests_text() -> None:
    prompt = [{"role": "user", "content": "<CURRENT MESSAGE>\nPaula: I moved to Lisbon last spring with my cat.\n</CURRENT MESSAGE>"}]
    assert graphiti_answer("ExtractedEntities", prompt) == {"extracted_entities": [
        {"name": "Paula", "entity_type_id": 0, "episode_indices": [0]},
        {"name": "Lisbon", "entity_type_id": 0, "episode_indices": [0]},
    ]}
    timing = [{"role": "user", "content": "<FACT>\nx\n</FACT>\n\n<REFERENCE TIME>\n2023-03-17T18:40:00+00:00\n</REFERENCE TIME>"}]
    assert graphiti_answer("EdgeTimestamps", timing) == {"valid_at": "2023-03-17T18:40:00Z", "invalid_at": None}
    assert graphiti_answer("verdict", prompt) is None


def test_a_failure_inside_graphiti_is_one_line_naming_the_question_and_the_unit() -> None:
    with OpenAIServer(GraphitiModel()) as broken:
        broken.mode = "404-model"
        system = GraphitiSystem(endpoints(broken))
        with pytest.raises(GuestFailure) as failed:
            system.hold(turns("I keep a red bicycle in the garage."), np.full(1, 10), 1000, EvictionContext(question_id="q-9"))
    message = str(failed.value)
    assert "\n" not in message and "run-token" not in message
    assert message.startswith("memory library 'graphiti' on q-9: add of unit 0 failed: NotFoundError: ")
    assert system.figures().failed == {"entities": 1}


def test_without_graphiti_the_policy_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "graphiti_core", None)
    adapter._graphiti.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install 'pytest-restore\[graphiti\]'"):
            GraphitiSystem(endpoints=LibraryEndpoints("http://127.0.0.1:9/v1", "t", "m", EMBEDDER, DIMS)).reset(
                100, EvictionContext(question_id="q")
            )
    finally:
        monkeypatch.undo()
        adapter._graphiti.cache_clear()


def test_graphiti_runs_with_its_telemetry_off_and_reports_its_version(audited: tuple[Audit, GraphitiSystem]) -> None:
    from graphiti_core.telemetry import telemetry

    assert telemetry.is_telemetry_enabled() is False
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", GraphitiSystem.version())
    _, system = audited
    # each store's figures name the library and its version, and time its ingestion (the report's library rows)
    assert {t.figures.library for t in system.tallies} == {f"graphiti-core {system.version}"}
    assert all(t.figures.ingest_seconds > 0 for t in system.tallies)


def test_graphiti_on_the_embedded_defaults_data(gateway: Gateway, tmp_path: Path) -> None:
    """A question of the embedded default's kind (the synthetic LongMemEval-S generator, a short history):
    the user's and the assistant's turns become facts citing their turns, and the gold turn is among them."""
    # the shortest history of six (four turns, a gold among them): graphiti makes ~7 calls a turn
    write_dataset([shortest(generate(6, 0, tokens_per_history=1000))], tmp_path / "embedded.json")
    reader = FakeReader()
    audit = Audit(load_data(tmp_path / "embedded.json"), AuditConfig(budgets=(ALL,)), reader=reader, judge=FakeJudge(),
                  scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    system = GraphitiSystem(endpoints(gateway))
    cell = audit.run_cell(system, ALL)
    [p] = audit.questions
    view, mask = audit.held(system, p, ALL, 0, {})
    facts = held_facts(view, mask)
    assert facts and cell.records and cell.memory is not None and cell.memory.held == len(facts)
    for text, sources, _ in facts:
        speaker, _, sentence = UNTIL.sub("", text).partition(": ")
        said = view.history.units[max(sources)]
        assert speaker == said.role in ("user", "assistant") and sentence in said.content
    assert set(view.history.gold) <= {s for _, sources, _ in facts for s in sources}  # the gold turn is cited


def test_a_process_opens_more_kuzu_databases_than_kuzus_defaults_allow() -> None:
    """graphiti makes Kuzu's database with Kuzu's defaults, which reserve 8 TB of address space each: the 16th
    store of a process failed ("Mmap for size 8796093022208 failed"). The adapter's stores are sized."""
    kuzu = pytest.importorskip("kuzu")
    with adapter._sized_kuzu(kuzu):
        databases = [kuzu.Database(":memory:") for _ in range(20)]
    assert kuzu.Database is not None and len(databases) == 20
    for database in databases:
        database.close()


def test_only_the_newest_stores_stay_open(monkeypatch: pytest.MonkeyPatch, gateway: Gateway) -> None:
    monkeypatch.setattr(adapter, "LIVE_STORES", 1)
    system = GraphitiSystem(endpoints(gateway))
    units = turns("I keep a red bicycle in the garage.")
    system.hold(units, np.full(1, 10), 1000, EvictionContext(question_id="first"))
    first = system.store
    system.hold(units, np.full(1, 10), 1000, EvictionContext(question_id="second"))
    assert first.loop.loop.is_closed() and first.graphiti is None  # its loop stopped, its database released
    assert [key[0] for key in GraphitiSystem.live] == ["second"]
    assert "first" in {key[0] for key in GraphitiSystem.closed}  # the ranker says so, rather than "another's store"


def test_a_rerun_on_the_same_cache_sends_nothing_upstream(locomo: Dataset, tmp_path: Path) -> None:
    """graphiti through the gateway over a managed model: the first run's calls reach the loopback upstream,
    the rerun's come from the run's response cache and the vectors kept on disk. Ruth's first two turns:
    each turn's calls are cached alike (graphiti makes ~7 a turn), so a longer history adds only time."""
    history = next(p for p in Audit(locomo, AuditConfig(budgets=(ALL,)), reader=FakeReader(), judge=FakeJudge(),
                                    scorer=FakeScorer()).questions if p.history.question.question == RUTHS).history
    units, sizes = history.units[:2], history.sizes[:2]

    def ingest(upstream: OpenAIServer) -> list[tuple[tuple[int, ...], str]]:
        chat = OpenAIChatModel(model="small-model", base_url=upstream.base_url, cache=ResponseCache(tmp_path / "responses"), max_tries=1)
        vectors = OpenAIEmbedder(model=EMBEDDER, base_url=upstream.base_url, max_tries=1)
        with Gateway(chat, vectors, cache_dir=tmp_path) as gw:
            held = GraphitiSystem(endpoints(gw)).hold(units, sizes, ALL, EvictionContext(question_id="rerun"))
        return [(m.sources, m.text) for m in held]

    with OpenAIServer(GraphitiModel()) as first:
        before = ingest(first)
        assert before and len(first.log) > 2 * len(units)  # chat calls and embeddings for every turn
    with OpenAIServer(GraphitiModel()) as second:
        assert ingest(second) == before
        assert second.log == []


def test_graphiti_connects_to_nothing_but_the_gateway(gateway: Gateway) -> None:
    """The socket-level guard (``net_guard``): while a store is built, a connection anywhere but the gateway's
    port on 127.0.0.1 (a telemetry endpoint, a model download, a provider's API) fails the test, as would a
    name lookup, even where graphiti caught the error."""
    system = GraphitiSystem(endpoints(gateway))
    units = turns("Paula visits next weekend from Lisbon by train.", "Paula moved to Porto last spring with her cat.")
    with net_guard(gateway.port):
        held = system.hold(units, np.full(2, 10), 1000, EvictionContext(question_id="guarded"))
    assert held


def test_graphiti_is_known_by_name_and_talks_to_the_runs_gateway() -> None:
    """``--restore-policies graphiti`` and ``--restore-ranker graphiti`` find the adapter through the
    libraries' table; its store's calls go to the run's gateway (:func:`run_endpoints`)."""
    from pytest_restore.libraries.guest import run_endpoints
    from pytest_restore.libraries.registry import register_libraries
    from pytest_restore.memory.eviction import PolicyRegistry
    from pytest_restore.memory.retrieval import RankerRegistry

    policies, rankers = PolicyRegistry(), RankerRegistry()
    register_libraries(policies, rankers)
    system = policies["graphiti"]
    assert isinstance(system, GraphitiSystem) and system.endpoints is run_endpoints and system.budgeted
    assert isinstance(rankers["graphiti"], GraphitiRanker)
