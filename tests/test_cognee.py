"""cognee audited as a memory system, its model calls answered offline in cognee's own formats.

cognee is not in the dev extra (measured beside it: it downgrades openai,
pandas and SQLAlchemy, and brings ladybug, which breaks graphiti's Kuzu
driver offline), so this module is skipped, saying so, where it is not
installed (``pip install 'pytest-restore[cognee]'``); CI runs it in a venv
of its own (the second stage of ``.ci/run``). Where it is, the real cognee
runs: add and cognify turn by turn into a dataset of
its own per store (SQLite, LanceDB and its graph as files under a scratch
directory), its chat and embeddings calls to
:class:`~openai_server.OpenAIServer` on 127.0.0.1, the chat calls answered
by the offline writer's cognee answers
(:func:`pytest_restore.libraries.cognee.fake_answer`), the embeddings by the
server's fake embedder. cognee configures itself once per process, so every
test here shares one server and one set of endpoints.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from library_audit import LOCOMO, audit_library
from openai_server import OpenAIServer

from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import Unit
from pytest_restore.libraries import cognee as adapter
from pytest_restore.libraries.cognee import (
    EMBEDDINGS,
    GRAPH,
    REPAIR,
    SUMMARY,
    CogneeRanker,
    CogneeSystem,
    fake_answer,
    message_text,
)
from pytest_restore.libraries.guest import GuestFailure, LibraryEndpoints
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.synthetic.embedded import EMBEDDED_SEED
from pytest_restore.synthetic.generator import generate, write_dataset

#: found, not imported (cognee reads its configuration when imported): every test but the shapes' needs it
needs_cognee = pytest.mark.skipif(
    importlib.util.find_spec("cognee") is None,
    reason="cognee is not installed (not in the dev extra): pip install 'pytest-restore[cognee]'",
)
EMBEDDER, DIMS, KEY = "nomic-embed-text", 768, "sk-run-token-0123456789abcdef"
ALL = 100_000


class CogneeModel:
    """The offline writer's cognee answers; the first graph call about a box gets its JSON cut off midway."""

    def __init__(self, cut: str = "boxes") -> None:
        self.cut = cut
        self.answered: Counter[str] = Counter()

    def __call__(self, messages: list[dict[str, Any]]) -> str:
        raise ValueError("cognee's calls carry a response_format")

    def answer_body(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = fake_answer(body)
        if answer is None:
            raise ValueError("not a call cognee makes")
        first = str(body["messages"][-1]["content"])
        if self.cut and self.cut in first and "previous response failed" not in first and "nodes" in answer["content"]:
            self.answered["malformed"] += 1
            return {"role": "assistant", "content": answer["content"][:20]}
        self.answered["used"] += 1
        return answer


@pytest.fixture(scope="module")
def model() -> CogneeModel:
    return CogneeModel()


@pytest.fixture(scope="module")
def server(model: CogneeModel) -> Iterator[OpenAIServer]:
    with OpenAIServer(model, expected_key=KEY) as running:
        yield running


@pytest.fixture(scope="module")
def endpoints(server: OpenAIServer) -> LibraryEndpoints:
    return LibraryEndpoints(server.base_url, KEY, "small-model", EMBEDDER, DIMS)


@pytest.fixture(scope="module")
def ruth(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """The LoCoMo fixture's second conversation (Ruth and Sam, 12 turns): cognee takes ~2 s a turn."""
    conversations = json.loads(LOCOMO.read_text())
    path = tmp_path_factory.mktemp("locomo") / "locomo_ruth.json"
    path.write_text(json.dumps(conversations[1:]))
    return load_data(path)


@pytest.fixture(scope="module")
def audited(endpoints: LibraryEndpoints, ruth: Dataset) -> tuple[Audit, CogneeSystem]:
    system = CogneeSystem(endpoints, budgeted=False)
    return audit_library(ruth, system, CogneeRanker(), (ALL,), seeds=(0,)), system


@needs_cognee
def test_provenance_runs_through_cognees_graph(audited: tuple[Audit, CogneeSystem]) -> None:
    audit, system = audited
    p = next(p for p in audit.questions if p.history.question.question == "What is the name of Ruth's cat?")
    view, mask = audit.held(system, p, ALL, 0, {})
    assert view.sources is not None
    units = view.history.units
    n = len(units) - int(mask.sum())
    raw = units[:n]
    held = [(units[q].content, view.sources[q]) for q in np.flatnonzero(mask)]
    # each turn's chunk cites that turn; its summary lists that turn's statements
    for unit in raw:
        assert (message_text(unit), (unit.position,)) in held
    summaries = [(t, s) for t, s in held if t.startswith("Facts:")]
    assert len(summaries) == len(raw)
    assert all(t.startswith(f"Facts:\n- {raw[s[0]].role}: {raw[s[0]].content[:12]}") for t, s in summaries)
    # an entity cites every turn whose chunk contains it: Pixel, named in three of Ruth's turns
    [(pixel, sources)] = [(t, s) for t, s in held if t.startswith("pixel: ")]
    assert sources == tuple(u.position for u in raw if "Pixel" in u.content) == (2, 3, 4)
    assert pixel.endswith(next(u.content for u in reversed(raw) if "Pixel" in u.content))  # the newest description


@needs_cognee
def test_two_calls_a_turn_and_a_rejected_answer_counted(audited: tuple[Audit, CogneeSystem], model: CogneeModel) -> None:
    audit, system = audited
    figures = audit.run_cell(system, ALL).memory
    assert figures is not None and figures.stores == 1 and figures.units == 12
    assert figures.calls[GRAPH] == figures.calls[SUMMARY] == 12 and figures.calls[EMBEDDINGS] > 12
    # "Cats and boxes" (D2:4): its graph answer was cut off; cognee asked again without a word (cut off again),
    # then with the error, and used that answer
    assert figures.rejected == {GRAPH: {"not valid JSON": 1}, REPAIR: {"not valid JSON": 1}}
    assert model.answered["malformed"] == 2 and figures.calls[REPAIR] == 2 and figures.failed == {}


@needs_cognee
def test_the_cognee_ranker_is_cognees_vector_search(audited: tuple[Audit, CogneeSystem]) -> None:
    audit, system = audited
    p = next(p for p in audit.questions if p.history.question.question == "How far does Ruth run?")
    view, mask = audit.held(system, p, ALL, 0, {})
    ranked = audit.rank(view, mask, "cognee")
    assert ranked and all(mask[q] for q in ranked)
    assert len(ranked) < int(mask.sum())  # relations are not in cognee's vector index
    records = audit.run_cell(system, ALL, ranker="cognee").records
    assert records and {r.ranker for r in records} == {"cognee"}


UNITS = [
    Unit(i, 0, i, f"2024/01/0{i + 1}", speaker, text, f"{speaker}: {text}", 10)
    for i, (speaker, text) in enumerate([
        ("Ines", "I keep a red bicycle in the garage at Porto."),
        ("Paula", "My garden in Lisbon has seven tomato plants."),
        ("Ines", "Marguerite teaches the pottery class on Wednesdays."),
    ])
]


@needs_cognee
def test_the_budget_forgets_the_oldest_turns_through_cognee(endpoints: LibraryEndpoints, server: OpenAIServer) -> None:
    full = CogneeSystem(endpoints, budgeted=False)
    everything = full.hold(UNITS, np.full(3, 10), 10**6, EvictionContext(question_id="bike"))
    budget = sum(full.tokens(m) for m in everything if max(m.sources) == 2)
    before = Counter(server.attempts)
    small = CogneeSystem(endpoints)
    held = small.hold(UNITS, np.full(3, 10), budget, EvictionContext(question_id="bike"))
    # the same history sends only requests the first store sent: a cache keyed by the request answers a rerun
    assert not set(server.attempts) - set(before)
    assert {m.sources for m in held} == {(2,)} and small.figures().evicted == 2
    assert sum(small.tokens(m) for m in held) <= budget
    texts = {m.text for m in held}
    # what cognee still holds is what turn 2 made or named (Ines, named in turns 0 and 2, now cites 2 alone)
    assert texts == {m.text for m in everything if max(m.sources) == 2}


@needs_cognee
def test_cognee_failures_are_one_line_naming_it_the_question_and_the_unit(
    endpoints: LibraryEndpoints, server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.expected_key = "sk-another-key-0123456789"  # cognee's key is refused: a 401, which cognee does not retry
    try:
        with pytest.raises(GuestFailure) as failed:
            CogneeSystem(endpoints, deadline=60).hold(UNITS[:1], np.full(1, 10), 10**6, EvictionContext(question_id="q-401"))
    finally:
        server.expected_key = KEY
    line = str(failed.value)
    assert line.startswith("memory library 'cognee' on q-401: ingesting unit 0 failed: ") and "\n" not in line
    assert KEY not in line

    other = LibraryEndpoints(endpoints.base_url, KEY, "another-model", EMBEDDER, DIMS)
    with pytest.raises(GuestFailure, match="'cognee' on q-other: import failed: .*once per process"):
        CogneeSystem(other).reset(100, EvictionContext(question_id="q-other"))

    monkeypatch.setattr(adapter, "_PROCESS", [])
    monkeypatch.setitem(sys.modules, "cognee", None)  # as if it were not installed
    with pytest.raises(GuestFailure, match=r"^memory library 'cognee' on q-none: import failed: ImportError: needs cognee: "
                       r"pip install 'pytest-restore\[cognee\]'"):
        CogneeSystem(endpoints).reset(100, EvictionContext(question_id="q-none"))


@pytest.fixture(scope="module")
def embedded_small(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """One question of the embedded default's generator (its seed), at 1,000 tokens a history (~14 turns): the
    default's 102k-token histories are ~470 turns each, and cognee takes 2 to 7 s a turn."""
    path = tmp_path_factory.mktemp("embedded") / "embedded-small.json"
    write_dataset(generate(1, EMBEDDED_SEED, tokens_per_history=1000), path)
    return load_data(path)


#: a budget that binds on the embedded history (the test asserts cognee forgot some of what it made)
BUDGET = 1000


@needs_cognee
def test_the_embedded_defaults_generator(endpoints: LibraryEndpoints, embedded_small: Dataset) -> None:
    """cognee holds memories of the generator's turns, every one citing turns it received, within a budget that
    binds, and the cell's records are scored. (At 300 tokens it holds nothing: what one turn leaves, its chunk,
    summary, entities and relations, is over 300 tokens, so each turn forgets the one before.)"""
    reader = FakeReader()
    audit = Audit(embedded_small, AuditConfig(budgets=(BUDGET,), seeds=(0,)), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    system = CogneeSystem(endpoints)
    cell = audit.run_cell(system, BUDGET)
    figures = cell.memory
    units = sum(len(p.history.units) for p in audit.questions)
    assert figures is not None and figures.stores == 1 and figures.held > 0 and cell.records
    assert figures.units == units == figures.calls[GRAPH] == figures.calls[SUMMARY]
    assert figures.held_tokens <= BUDGET and figures.evicted > 0
    [p] = audit.questions
    view, mask = audit.held(system, p, BUDGET, 0, {})
    assert view.sources is not None and all(0 <= s < units for q in np.flatnonzero(mask) for s in view.sources[q])


#: A child process feeding three turns to cognee through a gateway of its own, whose upstream is a loopback
#: server (argv: its base URL, the cache's directory, the turns, the embeddings model): cognee configures itself once per process, so
#: each run of the same history through a new gateway is a process of its own, as a rerun of the audit is.
RERUN = """
import json, sys
import numpy as np
from pytest_restore.data.units import Unit
from pytest_restore.libraries.cognee import CogneeSystem
from pytest_restore.libraries.guest import LibraryEndpoints
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.gateway import Gateway
from pytest_restore.models.openai_chat import OpenAIChatModel, OpenAIEmbedder

url, cache, embedding_model = sys.argv[1], sys.argv[2], sys.argv[4]
units = [Unit(i, 0, i, f"2024/01/0{i + 1}", s, t, f"{s}: {t}", 10) for i, (s, t) in enumerate(json.loads(sys.argv[3]))]
chat = OpenAIChatModel(model="small-model", base_url=url, cache=ResponseCache(cache + "/responses"), max_tries=1)
embedder = OpenAIEmbedder(model=embedding_model, base_url=url, max_tries=1)
with Gateway(chat, embedder, cache_dir=__import__("pathlib").Path(cache)) as gw:
    e = LibraryEndpoints(gw.base_url, gw.token, gw.chat_name, gw.embedding_name, gw.probe_dimensions())
    held = CogneeSystem(e, budgeted=False).hold(units, np.full(len(units), 10), 10**6, EvictionContext(question_id="bike"))
print(json.dumps(sorted([m.text, list(m.sources)] for m in held)))
"""


@needs_cognee
def test_a_rerun_through_the_gateway_on_the_same_cache_sends_nothing_upstream(tmp_path: Path) -> None:
    """The same three turns fed to cognee twice, each time in a process of its own through a gateway over a managed
    model and embedder with one response cache: the second run holds the same memories and sends nothing upstream."""
    turns = json.dumps([(u.role, u.content) for u in UNITS])

    def run_once(server: OpenAIServer) -> Any:
        done = subprocess.run(
            [sys.executable, "-c", RERUN, server.base_url, str(tmp_path), turns, EMBEDDER],
            check=False, capture_output=True, text=True, timeout=600, env={**os.environ, "OPENAI_API_KEY": "sk-loopback-0123456789"},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    with OpenAIServer(CogneeModel(cut="")) as first:
        held = run_once(first)
        assert held and len(first.log) >= 2 * len(UNITS)  # two chat calls a turn, and its embeddings
    with OpenAIServer(CogneeModel(cut="")) as second:
        assert run_once(second) == held
        assert second.log == []  # the rerun: every answer from the response cache and the vectors on disk


def test_the_fake_writer_answers_cognees_two_calls_and_its_re_ask_through_the_gateway() -> None:
    """cognee's shapes (registered when its adapter is imported, cognee or not) answer its calls through the
    gateway: the summary lists the chunk's statements, the graph names its speaker and what it mentions."""
    from pydantic import BaseModel

    from pytest_restore.models.embeddings import FakeEmbedder
    from pytest_restore.models.fake_writer import FakeWriter
    from pytest_restore.models.gateway import Gateway

    openai = pytest.importorskip("openai")

    class Node(BaseModel):
        id: str
        name: str
        type: str
        description: str

    class Edge(BaseModel):
        source_node_id: str
        target_node_id: str
        relationship_name: str
        description: str | None

    class KnowledgeGraph(BaseModel):
        nodes: list[Node]
        edges: list[Edge]

    chunk = "[5 June 2022] Ruth: Her name is Pixel, she is three years old."
    writer = FakeWriter()
    with Gateway(writer, FakeEmbedder(), chat_name="fake", embedding_name="fake") as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=gw.token)
        schema = {"name": "KnowledgeGraph", "schema": KnowledgeGraph.model_json_schema(), "strict": True}
        graph = client.chat.completions.create(
            model="fake", messages=[{"role": "system", "content": "Extract a graph."}, {"role": "user", "content": chunk}],
            response_format={"type": "json_schema", "json_schema": schema},
        )
        re_ask = client.chat.completions.create(
            model="fake", response_format={"type": "json_object"},
            messages=[
                {"role": "system", "content": f"Summarize.\n```json\n{json.dumps({'title': 'SummarizedContent'})}\n```"},
                {"role": "user", "content": f"{chunk}\n\nYour previous response failed validation with this error:\nx"},
            ],
        )
    parsed = KnowledgeGraph.model_validate_json(graph.choices[0].message.content or "")
    assert [n.name for n in parsed.nodes] == ["Ruth", "Pixel"] and parsed.edges[0].description == f"Ruth: {chunk[20:]}"
    assert json.loads(re_ask.choices[0].message.content or "")["summary"] == "Facts:\n- Ruth: Her name is Pixel, she is three years old."
    assert writer.answered == {"shape": 2}
