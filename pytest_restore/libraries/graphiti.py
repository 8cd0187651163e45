"""graphiti audited as a memory system: one episode per turn, its facts held, provenance from their episodes.

`graphiti <https://github.com/getzep/graphiti>`_ (graphiti-core, the
``graphiti`` extra: ``pip install 'pytest-restore[graphiti]'``) builds a
temporal knowledge graph: each episode (here, one turn) goes through its
model to extract entities, resolve them against those it has, extract facts
between them (edges), date each fact and check it against the facts held
(a repeat joins the old fact; a contradiction *invalidates* the old one:
graphiti keeps it, with ``invalid_at``/``expired_at`` set).
:class:`GraphitiSystem` is a :class:`~pytest_restore.memory.systems.MemorySystem`
(the policy ``graphiti``):

- **One store per history**: a Kuzu database in memory (256 MB of buffer
  pool, not Kuzu's default 80% of the machine; 4 GB of address space, not
  8 TB, which allowed 15 per process) with the full-text indexes graphiti's
  searches here read, and an event loop of its own
  (:class:`~pytest_restore.libraries.guest.StoreLoop`; graphiti is async
  only), made at :meth:`~GraphitiSystem.reset`. Nothing is written to disk.
  The newest :data:`LIVE_STORES` finished stores stay open for the ranker;
  older ones are closed and their memory given back.
- **Ingestion.** Each unit is one ``add_episode``, in order: the body
  ``"Speaker: text"`` (a ``user``/``assistant`` turn names its role), the
  reference time the unit's date plus its position in microseconds (turns of
  one session share a date; graphiti orders the earlier episodes it shows
  its model by that time, and ties would come back in any order, so a rerun
  could send other prompts and miss the cache).
- **What is held** is graphiti's facts, each a memory whose text is the fact
  and whose sources are the units of the episodes graphiti lists for it
  (``EntityEdge.episodes``: a repeated fact cites every turn that said it).
  An **invalidated fact is held** (docs/PROTOCOL.md, *Memory libraries*):
  graphiti keeps it on purpose, as history; its text then ends with the
  date it stopped being true, ``(until YYYY-MM-DD)``, from graphiti's own
  ``invalid_at``.
- **Budget.** graphiti has none. After each episode, while the facts held
  are over the budget (o200k_base tokens of their snippets), the adapter
  deletes the oldest through graphiti (``EntityEdge.delete``; oldest: whose
  newest source is earliest, then first seen), so later episodes resolve
  against what is held. ``GraphitiSystem(..., budgeted=False)`` keeps all.
- **Its model calls**: graphiti's OpenAI-compatible client and embedder at
  the endpoints given (:class:`~pytest_restore.libraries.guest.LibraryEndpoints`:
  the run's gateway, or a test's loopback server); its cross-encoder is never
  asked (the searches used here rank by reciprocal rank fusion) and refuses
  if it is. graphiti's own retries are off: it retried an unparsable answer
  four times, 5 to 120 s apart, and the same request gets the same answer
  from the gateway's cache; transport errors are retried under the gateway.
- **Answers it cannot use are counted** (:meth:`GraphitiSystem.figures`):
  each call by kind (graphiti's prompt), each answer that is not JSON or not
  of the schema asked, each call that failed. graphiti gives up the episode
  on such an answer (it raises; a timestamp answer it drops and goes on):
  the adapter counts it and goes on with the next turn, which no fact then
  cites. Any other error inside graphiti stops the store with one line
  naming the library, the question and the unit
  (:func:`~pytest_restore.libraries.guest.guest_failure`).
- **Telemetry** is off before graphiti is imported
  (``GRAPHITI_TELEMETRY_ENABLED=false``); graphiti is imported only when the
  policy is asked for.

Retrieval: :class:`GraphitiRanker` (the ranker ``graphiti``) ranks a
``graphiti`` store's facts by graphiti's own hybrid search (BM25 over the
facts and cosine over their embeddings, fused by reciprocal rank), without
the invalidated facts: graphiti's ``search`` returns them too, and an agent
asking for what is true now filters them out.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import functools
import gc
import json
import logging
import threading
import warnings
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from pytest_restore.data.dataset import parse_date
from pytest_restore.data.locomo import parse_locomo_date
from pytest_restore.data.units import History, Unit
from pytest_restore.libraries import graphiti_shapes
from pytest_restore.libraries.system import (
    LibraryRanker,
    LibrarySearch,
    LibrarySystem,
    LibraryTally,
    LiveKey,
    StoreLoop,
    guest_failure,
    importing,
)
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.retrieval import Store
from pytest_restore.memory.systems import SystemFigures

#: The distribution whose version the report names.
DISTRIBUTION = "graphiti-core"
LIBRARY = "graphiti"
#: graphiti's prompts (the name it gives each call) -> the kind of call the figures count.
CALL_KINDS: dict[str, str] = {
    "extract_nodes.extract_message": "entities",
    "extract_nodes.extract_text": "entities",
    "extract_nodes.extract_json": "entities",
    "dedupe_nodes.nodes": "entity resolution",
    "dedupe_nodes.node": "entity resolution",
    "extract_edges.edge": "facts",
    "extract_edges.extract_timestamps": "fact dates",
    "extract_edges.extract_timestamps_batch": "fact dates",
    "dedupe_edges.resolve_edge": "fact resolution",
    "extract_nodes.extract_summaries_batch": "summaries",
    "extract_nodes.extract_entity_summaries_from_episodes": "summaries",
    "extract_nodes.extract_attributes": "attributes",
    "extract_edges.extract_attributes": "attributes",
}
EMBEDDINGS = "embeddings"
#: Finished stores kept open for the ranker ``graphiti`` (the newest; each Kuzu database in memory holds
#: ~90 MB and a thread or two): older ones are closed.
LIVE_STORES = 4
#: Each store's Kuzu database: its buffer pool and the address space it reserves. Kuzu's defaults (80% of the
#: machine's memory, 8 TB) let a process open only 15 databases: the 16th store failed with "Mmap ... failed".
KUZU_BUFFER_POOL = 256 * 2**20
KUZU_MAX_DB_SIZE = 2**32
#: The full-text indexes graphiti's searches here read: facts' and entities' (episodes' and communities'
#: are searched by no path the adapter takes; each costs ~40 MB and ~0.3 s a store).
FULLTEXT_INDEXES = ("'RelatesToNode_'", "'Entity'")
#: What the figures' events count: facts graphiti made, facts a later turn repeated, facts it invalidated.
ADDED, REPEATED, INVALIDATED = "fact added", "fact repeated", "fact invalidated"


class Rejected(Exception):
    """An answer graphiti could not use (counted; graphiti gives up the episode)."""


#: One store graphiti built (its figures: calls by kind, the answers it could not use, its facts' events).
GraphitiTally = LibraryTally


@dataclass
class _Fact:
    """One fact graphiti holds, as the adapter last read it."""

    text: str
    sources: tuple[int, ...]
    #: when the adapter first saw it (the tie-break of "oldest")
    order: int
    invalid: bool


@dataclass
class _Store:
    """One live graphiti store: its ``Graphiti``, its loop, its episodes' units and its facts."""

    graphiti: Any
    loop: StoreLoop
    tally: LibraryTally
    where: str
    deadline: float
    group_id: str = ""
    #: episode uuid -> the position of the unit it was made from
    episodes: dict[str, int] = field(default_factory=dict)
    #: edge uuid -> the fact as last read
    facts: dict[str, _Fact] = field(default_factory=dict)
    #: the history has ended: later calls (the ranker's) are not the store's
    finished: bool = False

    def close(self) -> None:
        """Stop the store's loop and release its Kuzu database."""
        self.loop.close()
        driver = getattr(self.graphiti, "driver", None)
        for part in (getattr(driver, "client", None), getattr(driver, "db", None)):
            with contextlib.suppress(Exception):  # a database already gone is released all the same
                part.close()  # type: ignore[union-attr]
        self.graphiti = None  # its clients and driver go with it, not at the next full collection

    def run(self, what: str, make: Callable[[], Awaitable[Any]]) -> Any:
        """``make()`` awaited on the store's loop; any failure is one line naming graphiti, the question and ``what``."""

        async def call() -> Any:
            return await make()

        try:
            return self.loop.run(call(), self.deadline)
        except Exception as err:
            self.close()  # the audit stops here for this history: nothing will run on the store again
            raise guest_failure(LIBRARY, self.tally.question, what, err) from err


@functools.cache
def _graphiti() -> Any:
    """graphiti's module namespace, imported with its telemetry off (once per process)."""
    with importing("graphiti-core with Kuzu", "graphiti"):
        import kuzu
        from graphiti_core import Graphiti
        from graphiti_core.cross_encoder.client import CrossEncoderClient
        from graphiti_core.driver.driver import GraphProvider
        from graphiti_core.driver.kuzu_driver import KuzuDriver
        from graphiti_core.edges import EntityEdge
        from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
        from graphiti_core.errors import GroupsEdgesNotFoundError
        from graphiti_core.graph_queries import get_fulltext_indices
        from graphiti_core.llm_client.config import LLMConfig
        from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
        from graphiti_core.nodes import EpisodeType
        from graphiti_core.search.search_config_recipes import EDGE_HYBRID_SEARCH_RRF
        from graphiti_core.search.search_filters import (
            ComparisonOperator,
            DateFilter,
            SearchFilters,
        )

    class NoCrossEncoder(CrossEncoderClient):
        """graphiti's reranker slot: the searches the audit runs fuse ranks and never ask it."""

        async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
            raise RuntimeError("graphiti's cross-encoder is not used by the audit (searches fuse ranks instead)")

    graphiti_shapes.register()  # the fake writer answers graphiti's prompts in their own shapes
    # graphiti reports a failed call at ERROR on its own loggers before raising it; the adapter's one line says it
    logging.getLogger("graphiti_core").addHandler(logging.NullHandler())

    return SimpleNamespace(
        Graphiti=Graphiti, KuzuDriver=KuzuDriver, EntityEdge=EntityEdge, OpenAIEmbedder=OpenAIEmbedder,
        OpenAIEmbedderConfig=OpenAIEmbedderConfig, LLMConfig=LLMConfig, OpenAIGenericClient=OpenAIGenericClient,
        EpisodeType=EpisodeType, GroupsEdgesNotFoundError=GroupsEdgesNotFoundError,
        EDGE_HYBRID_SEARCH_RRF=EDGE_HYBRID_SEARCH_RRF, ComparisonOperator=ComparisonOperator, DateFilter=DateFilter,
        SearchFilters=SearchFilters, NoCrossEncoder=NoCrossEncoder, kuzu=kuzu,
        fulltext=[q for q in get_fulltext_indices(GraphProvider.KUZU) if any(t in q for t in FULLTEXT_INDEXES)],
    )


def _release_memory() -> None:
    """Give back what closed stores held: graphiti's objects hold each other in cycles (a collection frees
    them now, not at the next full one), and glibc keeps the pages Kuzu's threads freed unless trimmed.
    Measured over 30 stores of 3 turns with 4 open: resident memory +14 MB a store without, flat with."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


_KUZU_LOCK = threading.Lock()
#: held while the finished stores kept open (``GraphitiSystem.live``) change
_LIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def _sized_kuzu(kuzu: Any) -> Iterator[None]:
    """While the block runs, a Kuzu database is made with the adapter's sizes (graphiti's driver makes its
    own with Kuzu's defaults and takes no size)."""
    with _KUZU_LOCK:
        made = kuzu.Database

        def sized(path: str, **options: Any) -> Any:
            options.setdefault("buffer_pool_size", KUZU_BUFFER_POOL)
            options.setdefault("max_db_size", KUZU_MAX_DB_SIZE)
            return made(path, **options)

        kuzu.Database = sized
        try:
            yield
        finally:
            kuzu.Database = made


def episode_body(unit: Unit) -> str:
    """The text one unit is added as: ``"Speaker: text"`` (a session unit's turns already name their speakers)."""
    return unit.content if unit.role == "session" else f"{unit.role}: {unit.content}"


def reference_time(unit: Unit) -> dt.datetime:
    """The unit's date (UTC) plus its position in microseconds: strictly increasing along a history."""
    when = parse_date(unit.date) or parse_locomo_date(unit.date)
    if when is None:
        raise ValueError(f"unit {unit.position}: date {unit.date!r} is in none of LongMemEval's, LoCoMo's or ISO 8601's formats")
    when = when.replace(tzinfo=dt.timezone.utc) if when.tzinfo is None else when.astimezone(dt.timezone.utc)
    return when + dt.timedelta(microseconds=unit.position)


def fact_text(fact: str, invalid_at: dt.datetime | None, expired: bool) -> str:
    """A fact as the reader sees it: an invalidated one ends with the date it stopped being true."""
    if invalid_at is not None:
        return f"{fact} (until {invalid_at.date().isoformat()})"
    return f"{fact} (no longer true)" if expired else fact


def rejection_cause(err: BaseException) -> str:
    """Why an answer was of no use: not JSON, JSON of another shape (the first field wrong), or empty."""
    if isinstance(err, json.JSONDecodeError):
        return "not valid JSON"
    errors = getattr(err, "errors", None)
    if callable(errors):
        first = (errors() or [{}])[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "answer"
        return f"JSON of the wrong shape ({where}: {first.get('type', 'invalid')})"
    return f"unusable ({type(err).__name__})"


class GraphitiSystem(LibrarySystem[_Store]):
    """graphiti as a memory system (module docstring): an episode per unit, its facts held."""

    name = "graphiti"
    distribution = DISTRIBUTION
    #: stores built side by side (each waits on its model calls): as many as stay open for the ranker
    parallel_stores = LIVE_STORES

    #: the newest finished stores of the process (:data:`LIVE_STORES`), by (history key, held texts): what
    #: :class:`GraphitiRanker` searches; an older one is closed
    live: ClassVar[OrderedDict[LiveKey, _Store]] = OrderedDict()
    #: the keys of the stores closed so (the ranker says so rather than mistake them for another system's)
    closed: ClassVar[set[LiveKey]] = set()

    # -- one store -------------------------------------------------------

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        tally = self.begin(budget, ctx)
        g = self.imported(_graphiti)
        e = self.resolved_endpoints()
        loop = StoreLoop(LIBRARY)
        store = _Store(None, loop, tally, f"memory system {self.name!r} on {ctx.question_id}", self.deadline)
        self.store = store
        try:
            llm = g.OpenAIGenericClient(
                g.LLMConfig(api_key=e.api_key, base_url=e.base_url, model=e.chat_model, small_model=e.chat_model, temperature=0.0)
            )
            embedder = g.OpenAIEmbedder(g.OpenAIEmbedderConfig(
                api_key=e.api_key, base_url=e.base_url, embedding_model=e.embedding_model, embedding_dim=e.embedding_dims,
            ))
            _count_calls(llm, embedder, store)
            with warnings.catch_warnings(), _sized_kuzu(g.kuzu):
                warnings.simplefilter("ignore", DeprecationWarning)  # graphiti's Kuzu backend is deprecated: known
                driver = g.KuzuDriver(db=":memory:")
            store.graphiti = g.Graphiti(graph_driver=driver, llm_client=llm, embedder=embedder, cross_encoder=g.NoCrossEncoder())
        except Exception as err:
            loop.close()
            raise self.failure("making a store", err) from err
        # Kuzu's full-text indexes: Graphiti.build_indices_and_constraints does nothing on Kuzu

        async def indexes() -> None:
            for statement in g.fulltext:
                await driver.execute_query(statement)

        store.run("building its indexes", indexes)

    def ingest(self, unit: Unit) -> None:
        """One episode of the unit; the facts graphiti holds read again after it."""
        g = _graphiti()
        store = self.store
        self.received(unit)
        try:
            when = reference_time(unit)
        except ValueError as err:
            raise self.failure(f"add of unit {unit.position}", err) from err

        async def add_episode() -> Any:
            try:
                return await store.graphiti.add_episode(
                    name=f"turn {unit.position}", episode_body=episode_body(unit), source_description="conversation turn",
                    reference_time=when, source=g.EpisodeType.message,
                )
            except Rejected:
                return None

        result = store.run(f"add of unit {unit.position}", add_episode)
        if result is not None:
            store.episodes[str(result.episode.uuid)] = unit.position
            store.group_id = str(result.episode.group_id)
        self._read_facts(f"after unit {unit.position} arrived")

    def _read_facts(self, when: str) -> None:
        """What graphiti holds (every edge of the store's group), each fact's sources from its episodes."""
        g = _graphiti()
        store = self.store

        async def every_edge() -> list[Any]:
            try:
                return list(await g.EntityEdge.get_by_group_ids(store.graphiti.driver, [store.group_id]))
            except g.GroupsEdgesNotFoundError:  # graphiti's answer for a graph with no fact yet
                return []

        edges = store.run(f"reading its facts {when}", every_edge)
        events = store.tally.figures.events
        facts: dict[str, _Fact] = {}
        for edge in edges:
            key = str(edge.uuid)
            unknown = [u for u in edge.episodes if u not in store.episodes]
            if unknown or not edge.episodes:
                raise self.failure(f"reading its facts {when}",
                                   f"fact {key} cites {'episode ' + unknown[0] if unknown else 'no episode'}, which no turn made")
            sources = tuple(sorted({store.episodes[u] for u in edge.episodes}))
            invalid = edge.expired_at is not None  # graphiti's own mark of a fact no longer current
            before = store.facts.get(key)
            if before is None:
                events[ADDED] += 1
            else:
                if len(sources) > len(before.sources):
                    events[REPEATED] += 1
                if invalid and not before.invalid:
                    events[INVALIDATED] += 1
            order = before.order if before is not None else len(store.facts) + len(facts)
            facts[key] = _Fact(fact_text(str(edge.fact), edge.invalid_at, edge.expired_at is not None), sources, order, invalid)
        store.facts = facts

    def delete_oldest(self, unit: Unit) -> None:
        """Delete the oldest facts (through graphiti) while those held are over the budget."""
        g = _graphiti()
        store = self.store
        for key in self.oldest_over_budget({k: f.order for k, f in store.facts.items()}):

            async def delete(uuid: str = key) -> None:
                edge = await g.EntityEdge.get_by_uuid(store.graphiti.driver, uuid)
                await edge.delete(store.graphiti.driver)

            store.run(f"deleting a fact for the budget after unit {unit.position}", delete)
            del store.facts[key]

    def held_items(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Each fact graphiti holds by its uuid: its text and the units of its episodes."""
        return {key: (f.text, f.sources) for key, f in self.store.facts.items()}

    def finish(self) -> None:
        store = self.store
        store.finished = True
        super().finish()
        store.tally.figures.held, store.tally.figures.held_tokens = store.tally.held, store.tally.held_tokens

    def keep_live(self, key: LiveKey, store: _Store) -> None:
        """Keep the newest :data:`LIVE_STORES` finished stores open for the ranker; close the older ones."""
        live = GraphitiSystem.live
        with _LIVE_LOCK:  # stores of several histories may finish at once (MemorySystem.parallel_stores)
            live[key] = store
            live.move_to_end(key)
            GraphitiSystem.closed.discard(key)
            gone = []
            while len(live) > LIVE_STORES:
                old, oldest = live.popitem(last=False)
                gone.append(oldest)
                GraphitiSystem.closed.add(old)
        for oldest in gone:
            oldest.close()
        if gone:
            _release_memory()


def _count_calls(llm: Any, embedder: Any, store: _Store) -> None:
    """Count graphiti's model calls by kind while it builds ``store``, check each answer against the schema
    asked, and send each once (the ranker's searches after :meth:`GraphitiSystem.finish` are not the store's).

    graphiti's own retry (tenacity: four attempts 5 to 120 s apart, on an
    unparsable answer too) is replaced by a single attempt: the gateway
    retries what a retry can mend, and it would answer the same request the
    same way from its cache.
    """
    generate = llm.generate_response

    async def once(messages: Any, response_model: Any = None, *args: Any, **kwargs: Any) -> Any:
        return await llm._generate_response(messages, response_model, *args, **kwargs)

    async def counted(messages: Any, *args: Any, **kwargs: Any) -> Any:
        figures = store.tally.figures if not store.finished else SystemFigures()
        name = str(kwargs.get("prompt_name") or "")
        kind = CALL_KINDS.get(name, name or "other")
        model = kwargs.get("response_model", args[0] if args else None)
        figures.calls[kind] += 1
        try:
            answer = await generate(messages, *args, **kwargs)
            if model is not None:
                model.model_validate(answer)
        except json.JSONDecodeError as err:
            figures.reject(kind, rejection_cause(err))
            raise Rejected(kind) from err
        except Exception as err:
            if type(err).__name__ in ("ValidationError", "EmptyResponseError"):
                figures.reject(kind, rejection_cause(err) if type(err).__name__ == "ValidationError" else "empty answer")
                raise Rejected(kind) from err
            figures.failed[kind] += 1
            raise
        return answer

    llm._generate_response_with_retry = once
    llm.generate_response = counted
    for method in ("create", "create_batch"):
        original = getattr(embedder, method)

        def wrapper(*args: Any, _call: Any = original, **kwargs: Any) -> Any:
            if not store.finished:
                store.tally.figures.calls[EMBEDDINGS] += 1
            return _call(*args, **kwargs)

        setattr(embedder, method, wrapper)


# -- graphiti's own search, as a ranker ----------------------------------------------------------------


@dataclass(frozen=True)
class _Ranking:
    """A question's view of a ``graphiti`` store, ranked whole by graphiti's search (``None``: the store was
    closed before this question asked; ``closed`` says so)."""

    order: tuple[int, ...] | None
    closed: bool = False


class GraphitiRanker(LibraryRanker):
    """graphiti's own search over a ``graphiti`` store's facts, best first (the ranker ``graphiti``).

    graphiti's hybrid search (BM25 over the facts, cosine over their
    embeddings, fused by reciprocal rank), restricted to facts not
    invalidated, asked once per question for every fact held: regime (b)
    reads its top k. A result is placed at the view's unit holding its
    text; facts graphiti's search does not return (no word in common with
    the question and a cosine under its threshold) and units graphiti does
    not hold (the raw gold turns the restore adds) are not ranked.

    The question is searched when the audit prepares it, right after its
    store is built (:data:`LIVE_STORES` stay open for that), and the order is
    kept, so the ranker can read a cell long after its stores were closed.
    """

    name = "graphiti"
    system = GraphitiSystem

    def __init__(self) -> None:
        self._orders: dict[tuple[str, str, tuple[str, ...]], tuple[int, ...]] = {}

    def prepare(self, history: History) -> _Ranking | None:  # type: ignore[override]  # searched once, kept
        key, positions = self.view(history)
        mine = (history.question.question_id, *key)
        if mine in self._orders:
            return _Ranking(self._orders[mine])
        store = GraphitiSystem.live.get(key)
        if store is None:  # a raw history, or another system's memories: ranking it is the error
            return _Ranking(None, closed=True) if key in GraphitiSystem.closed else None
        GraphitiSystem.live.move_to_end(key)
        every = max(sum(len(p) for p in positions.values()), 1)
        order = self._orders[mine] = tuple(dict.fromkeys(self.search(history, LibrarySearch(store, positions), every)))
        return _Ranking(order)

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        if state is None:
            raise self.not_its_store(history)
        if state.order is None:
            raise ValueError(
                f"ranker {self.name!r}: the graphiti store of {history.question.question_id} was closed before the "
                f"question was searched (the newest {LIVE_STORES} stay open)"
            )
        members = np.asarray(store, dtype=bool)
        return [p for p in state.order if members[p]][:k]

    def search(self, history: History, state: LibrarySearch, k: int) -> list[int]:
        """graphiti's hybrid search for the question, ``k`` facts at most, without the invalidated ones."""
        g = _graphiti()
        store: _Store = state.store
        # a copy of graphiti's recipe: Graphiti.search sets the shared recipe's limit, which its own
        # ingestion searches then use (a rank of 50 here would change the candidates every later store sees)
        config = g.EDGE_HYBRID_SEARCH_RRF.model_copy(deep=True)
        config.limit = k
        current = g.SearchFilters(expired_at=[[g.DateFilter(comparison_operator=g.ComparisonOperator.is_null)]])
        found = store.run(
            "search", lambda: store.graphiti.search_(history.question.question, config=config, group_ids=[store.group_id], search_filter=current)
        )
        return self.placed(state, (store.facts[str(e.uuid)].text for e in found.edges if str(e.uuid) in store.facts))
