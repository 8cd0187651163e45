"""mem0 audited as a memory system, against a loopback server that answers mem0's calls in its formats.

The real ``mem0ai`` package runs here (the dev extra installs it): its
``add`` turn by turn, its Qdrant in memory, its model calls to
:class:`~openai_server.OpenAIServer` on 127.0.0.1, answered by
:class:`~mem0_model.Mem0Model` (extraction and update by rule; answers cut
off in their JSON, or of the wrong shape, where its rules say) and the
server's fake embeddings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import library_audit
import numpy as np
import pytest
from grid_helpers import GRID
from library_audit import LOCOMO, assert_the_budget_kept_the_newest, audit_library, shortest
from mem0_model import LONG, Mem0Model
from net_guard import net_guard
from openai_server import OpenAIServer

from pytest_restore.__main__ import main
from pytest_restore.audit.run import Audit, AuditConfig, Prepared
from pytest_restore.data.dataset import Dataset
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import Unit
from pytest_restore.libraries.guest import (
    GuestFailure,
    LibraryEndpoints,
    close_gateway,
    configure_gateway,
    library_version,
    run_gateway,
)
from pytest_restore.libraries.mem0 import (
    EXTRACTION,
    UPDATE,
    Mem0Ranker,
    Mem0System,
)
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.models.cache import ResponseCache
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.gateway import Gateway
from pytest_restore.models.openai_chat import OpenAIChatModel, OpenAIEmbedder

EMBEDDER, DIMS = "nomic-embed-text", 768
#: a budget no store of the fixture reaches, and one that makes the adapter evict
ALL, SMALL = 5000, 120


#: mem0's major version here: the loopback model (``mem0_model.py``) speaks mem0 1's two calls
MEM0_1 = library_version("mem0ai").startswith("1.")
speaks_mem0_1 = pytest.mark.skipif(not MEM0_1, reason="the loopback model answers mem0 1's extraction and update calls")


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIServer]:
    if not MEM0_1:
        pytest.skip("the loopback model answers mem0 1's extraction and update calls")
    with OpenAIServer(Mem0Model()) as running:
        yield running


def mem0_of(server: OpenAIServer, **options: object) -> Mem0System:
    """mem0 with its calls straight to the loopback server (the adapter alone; through the gateway: below)."""
    return Mem0System(LibraryEndpoints(server.base_url, "sk-local", "small-model", EMBEDDER, DIMS), **options)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def locomo() -> Dataset:
    return load_data(LOCOMO)


@pytest.fixture(scope="module")
def audited(server: OpenAIServer, locomo: Dataset) -> tuple[Audit, Mem0System]:
    """One audit of the fixture's two conversations with mem0 under both budgets, read by BM25-lite and mem0."""
    # its two conversations fed side by side, each by a copy of the system (MemorySystem.parallel_stores)
    system = mem0_of(server)
    return audit_library(locomo, system, Mem0Ranker(), (ALL, SMALL), concurrency=2), system


def view_of(audit: Audit, system: Mem0System, question: str, budget: int = ALL) -> tuple[Prepared, np.ndarray]:
    return library_audit.view_of(audit, system, question, budget)


def test_every_memory_cites_the_turns_it_came_from(audited: tuple[Audit, Mem0System]) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "Which evening is Ines's pottery class on now?")
    units = view.history.units
    n = len(units) - int(mask.sum())
    memories = [(units[p], view.sources[p]) for p in np.flatnonzero(mask)]
    assert memories and all(p >= n for p in np.flatnonzero(mask))  # mem0 keeps no raw turn
    for memory, sources in memories:
        # the model writes a fact as "Speaker: sentence" of the turn it read: the newest source said it
        speaker, _, sentence = memory.content.partition(": ")
        newest = units[max(sources)]
        assert speaker == newest.role and sentence in newest.content, (memory.content, sources)
    # Ines moved her class (D2:1, turn 6): the model updated the memory of her signing up (D1:1, turn 0)
    moved = [s for m, s in memories if "Wednesdays" in m.content]
    assert moved == [(0, 6)]
    assert not any("signed up" in m.content for m, _ in memories)  # the update replaced the old text


def test_an_answer_mem0_cannot_parse_is_counted_and_its_turn_cited_by_nothing(
    audited: tuple[Audit, Mem0System], server: OpenAIServer
) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "What colour is the bowl Ines made?")
    long_turns = [u.position for u in view.history.units[: len(view.sources) - int(mask.sum())] if len(u.content) > LONG]
    assert long_turns == [7]  # D2:2, the bowl's photo: its extraction answer was cut off
    first = next(t for t in system.tallies if t.question == view.history.question.history_key and t.budget == ALL)
    assert first.figures.rejected == {EXTRACTION: {"not valid JSON": 1}}
    assert server.responder.answered["malformed"] == sum(t.figures.rejected_of(EXTRACTION) for t in system.tallies)
    # the gold turn mem0 lost is cited by no memory: evicted, in the audit's words; the other is kept
    assert view.evicted(mask) == [7] and len(view.citing(mask)) == 1
    records = [r for r in audit.run_cell(system, ALL).records if r.question_id == view.history.question.question_id]
    assert {r.gold_evicted for r in records} == {1}


def test_a_cells_figures_are_its_stores_mem0_counted_once_each(audited: tuple[Audit, Mem0System]) -> None:
    audit, system = audited
    for budget in (ALL, SMALL):
        figures = audit.run_cell(system, budget).memory
        stores = [t for t in system.tallies if t.budget == budget]
        assert figures is not None and figures.stores == len(stores) == 2  # the fixture's two conversations
        assert figures.held == sum(t.held for t in stores) and figures.units == sum(t.figures.units for t in stores)
        for kind in (EXTRACTION, UPDATE, "embeddings"):
            assert figures.calls[kind] == sum(t.figures.calls[kind] for t in stores) > 0
        assert figures.rejected_of(EXTRACTION) == sum(t.figures.rejected_of(EXTRACTION) for t in stores) > 0
        assert figures.evicted == sum(t.figures.evicted for t in stores) and (figures.evicted > 0) == (budget == SMALL)


@speaks_mem0_1
def test_deletes_and_rejected_shapes_from_add_events() -> None:
    model = Mem0Model()
    lines = [
        "I keep a red bicycle in the garage.",
        "I no longer keep the bicycle, I sold it last week.",
        "FORMAT trouble: this answer comes back in the wrong shape.",
        "My garden has seven tomato plants this year.",
    ]
    units = [Unit(i, 0, i, f"2024/01/0{i + 1}", "Ines", c, f"Ines: {c}", 10) for i, c in enumerate(lines)]
    with OpenAIServer(model) as local:
        system = mem0_of(local, budgeted=False)
        held = system.hold(units, np.full(len(units), 10), 10**6, EvictionContext(question_id="h"))
    assert [(m.sources, m.text, m.date) for m in held] == [((3,), f"Ines: {lines[3]}", "2024/01/04")]
    figures = system.figures()
    assert figures.events == {"ADD": 2, "DELETE": 1}
    assert figures.rejected == {EXTRACTION: {"JSON of the wrong shape ('facts')": 1}} and model.answered["wrong_shape"] == 1
    assert figures.calls == {EXTRACTION: 4, UPDATE: 3, "embeddings": 3}  # the rejected turn has no update


def test_the_budget_evicts_the_oldest_memories_through_mem0(audited: tuple[Audit, Mem0System]) -> None:
    audit, system = audited
    # the oldest went: what is left holds the newest memory, and nothing from the first session's start
    assert_the_budget_kept_the_newest(audit, system, "How many tarts were left over?", ALL, SMALL)


def test_the_mem0_ranker_is_mem0s_search(audited: tuple[Audit, Mem0System]) -> None:
    audit, system = audited
    view, mask = view_of(audit, system, "Where does Paula live?")
    ranked = audit.rank(view, mask, "mem0")
    assert ranked and all(mask[p] for p in ranked)
    # mem0 ranks by cosine to the question over the server's vectors (its text with newlines as spaces)
    embed = FakeEmbedder(DIMS)
    vectors = embed.embed([view.history.question.question] + [view.history.units[p].content for p in ranked])
    cosines = vectors[1:] @ vectors[0] / (np.linalg.norm(vectors[1:], axis=1) * np.linalg.norm(vectors[0]))
    assert list(cosines) == sorted(cosines, reverse=True)
    assert len(ranked) == int(mask.sum())  # mem0's search has no threshold: every memory is ranked
    records = audit.run_cell(system, ALL, ranker="mem0").records
    assert records and {r.ranker for r in records} == {"mem0"}


def test_the_mem0_ranker_reads_only_mem0_stores(audited: tuple[Audit, Mem0System]) -> None:
    audit, _ = audited
    p = audit.questions[0]
    with pytest.raises(ValueError, match="ranker 'mem0' reads only the stores of the memory system 'mem0'"):
        audit.rank(p, np.ones(len(p.history.units), dtype=bool), "mem0")


def test_mem0_runs_with_its_telemetry_off(audited: tuple[Audit, Mem0System]) -> None:
    from mem0.memory import telemetry

    assert telemetry.MEM0_TELEMETRY is False


#: A conftest that audits mem0 against the loopback server at ``{url}``.
MEM0_CONFTEST = """
from pytest_restore.libraries.guest import LibraryEndpoints
from pytest_restore.libraries.mem0 import Mem0System


def pytest_restore_register_policies(registry, config):
    # a user's own mem0 takes the built-in's place: its calls straight to the loopback server
    registry.register(Mem0System(LibraryEndpoints("{url}", "sk-local", "small-model", "{embedder}", {dims})))
"""


def grid_with_mem0(pytester: pytest.Pytester, model: Mem0Model, mode: str | None = None) -> tuple[pytest.RunResult, Path]:
    """A grid run of mem0 on the LoCoMo fixture at one budget, its calls answered by ``model`` (the
    server in ``mode``, :class:`OpenAIServer`'s faults)."""
    with OpenAIServer(model) as local:
        local.mode = mode
        pytester.makeconftest(MEM0_CONFTEST.format(url=local.base_url, embedder=EMBEDDER, dims=DIMS))
        pytester.makepyfile(test_grid=GRID)
        result = pytester.runpytest_inprocess(
            "-p", "no:xdist", "-p", "no:cacheprovider", f"--restore-data={LOCOMO}", f"--restore-budgets={ALL}",
            "--restore-policies=mem0", "--restore-bootstrap=200", "--restore-family-checks=report",
        )
    return result, pytester.path / "restore-report"


@speaks_mem0_1
def test_the_answers_mem0_rejected_reach_the_report_and_a_cell_that_used_none_fails(pytester: pytest.Pytester) -> None:
    """summary.json and report.md count each memory system cell's calls, failures and rejected answers by cause
    (through the item's message, as from an xdist worker); a cell where mem0 used no extraction answer fails
    the run, saying so in one line, and its report is still written whole."""
    model = Mem0Model()
    result, report = grid_with_mem0(pytester, model)
    assert result.ret == 0, result.outlines[-20:]
    cells = json.loads((report / "summary.json").read_text())["run"]["checks"]["memory_systems"]["result"]["cells"]
    [cell] = cells
    figures = cell["figures"]
    assert (cell["cell"], cell["policy"], figures["stores"]) == ("mem0-5k", "mem0", 2)  # the fixture's two conversations
    assert figures["rejected"] == {EXTRACTION: {"not valid JSON": model.answered["malformed"]}} and model.answered["malformed"]
    assert figures["calls"][EXTRACTION] == figures["units"] == model.answered["malformed"] + model.answered["facts"]
    assert figures["calls"][UPDATE] == model.answered["update"] and figures["failed"] == {}
    text = (report / "report.md").read_text()
    # the section is rebuilt from summary.json as the session wrote it
    assert main(["report", str(report / "records.jsonl"), "--out", str(pytester.path / "rebuilt")]) == 0
    assert (pytester.path / "rebuilt" / "report.md").read_text() == text
    section = text[text.index("## Memory systems"):]
    row = next(line for line in section.splitlines() if line.startswith("| mem0-5k |"))
    assert f"fact extraction: {model.answered['malformed']} not valid JSON" in row and "No answer used" not in section

    cut = Mem0Model(long=0)  # every extraction answer cut off mid-JSON
    result, report = grid_with_mem0(pytester, cut)
    assert result.ret == 1
    line = f"memory system 'mem0' in mem0-5k: every one of its {cut.answered['malformed']} fact extraction calls rejected or failed"
    assert any(line in out for out in result.outlines), result.outlines[-30:]
    summary = json.loads((report / "summary.json").read_text())
    [cell] = summary["run"]["checks"]["memory_systems"]["result"]["cells"]
    assert cell["figures"]["held"] == 0 and UPDATE not in cell["figures"]["calls"]
    assert "**No answer used** in mem0-5k" in (report / "report.md").read_text()

    # mem0's client failing inside the cell (its server refuses the key, echoing it): the cell fails on
    # one line naming the library and the question, none of mem0's or our frames
    kept = (report / "report.md").read_text()
    result, report = grid_with_mem0(pytester, Mem0Model(), mode="401-echo-key")
    assert result.ret == 1
    failed = [out for out in result.outlines if "memory library 'mem0' on fx-" in out]
    assert failed and "add on unit 0 failed: AuthenticationError" in failed[0], result.outlines + result.errlines
    output = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in output and "mem0/memory/main.py" not in output and "def add(" not in output
    assert (report / "report.md").read_text() == kept  # the earlier report kept


# -- mem0 on the run's gateway -------------------------------------------------------------------


@pytest.fixture
def offline_gateway() -> Iterator[None]:
    """The process's gateway as a run without models has it: the fake writer and the fake embedder."""
    configure_gateway(None)
    yield
    close_gateway()


def test_the_built_in_mem0_runs_offline_through_the_gateway_and_connects_nowhere_else(
    locomo: Dataset, offline_gateway: None
) -> None:
    """The policy ``mem0`` as the registry makes it (no endpoints given): its calls to the run's gateway, the
    fake writer answering mem0's own formats from the turns' text; every memory cites the turn it came from."""
    from pytest_restore.run.plan import default_registries

    registries = default_registries()
    system = registries.policies["mem0"]
    assert isinstance(system, Mem0System) and isinstance(registries.rankers["mem0"], Mem0Ranker)
    audit = Audit(locomo, AuditConfig(budgets=(ALL,)), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    with net_guard():  # loopback only: the gateway; mem0's telemetry or anything else would fail here
        cell = audit.run_cell(system, ALL)
    gateway = run_gateway()
    assert gateway is not None and gateway.usage.sent > 0 and gateway.chat_name == "fake"
    figures = cell.memory
    assert figures is not None and figures.stores == 2 and figures.held > 0 and figures.rejected == {}
    assert figures.calls[EXTRACTION] == figures.units and figures.calls["embeddings"] > 0
    assert figures.library == f"mem0ai {library_version('mem0ai')}" and figures.ingest_seconds > 0
    for p in audit.questions[:3]:
        view, mask = audit.held(system, p, ALL, 0, {})
        units = view.history.units
        for position in np.flatnonzero(mask):
            speaker, _, sentence = units[position].content.partition(": ")
            newest = units[max(view.sources[position])]
            assert speaker == newest.role and sentence in newest.content  # the turn it cites said it: label-free


def test_mem0_on_the_command_line_is_the_built_in_and_on_the_embedded_default_offline(
    pytester: pytest.Pytester, offline_gateway: None, tmp_path: Path
) -> None:
    """``--restore-policies mem0`` with nothing registered by hand: the built-in, lazily imported, with the
    fake writer; the report's memory-systems cell names mem0's version. Then a history of the embedded default's
    generator (its seed): the shortest of six at 1k tokens a history, four turns, under a budget they outgrow
    (mem0 makes ~10 calls a turn: a whole ~450-turn history of the default takes minutes)."""
    pytester.makepyfile(test_grid=GRID)
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", "-p", "no:cacheprovider", f"--restore-data={LOCOMO}", f"--restore-budgets={ALL}",
        "--restore-policies=mem0", "--restore-bootstrap=200", "--restore-family-checks=report",
    )
    assert result.ret == 0, result.outlines[-20:]
    summary = json.loads((pytester.path / "restore-report" / "summary.json").read_text())
    [cell] = summary["run"]["checks"]["memory_systems"]["result"]["cells"]
    assert cell["policy"] == "mem0" and cell["figures"]["library"] == f"mem0ai {library_version('mem0ai')}"
    assert cell["figures"]["calls"][EXTRACTION] == cell["figures"]["units"] > 0
    assert "**Memory libraries.**" in (pytester.path / "restore-report" / "report.md").read_text()

    from pytest_restore.synthetic.embedded import EMBEDDED_SEED
    from pytest_restore.synthetic.generator import generate, write_dataset

    write_dataset([shortest(generate(6, EMBEDDED_SEED, tokens_per_history=1000))], tmp_path / "embedded.json")
    dataset = load_data(tmp_path / "embedded.json")
    audit = Audit(dataset, AuditConfig(budgets=(ALL,)), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    history = audit.questions[0].history
    units, sizes = history.units, history.sizes
    system = Mem0System()
    with net_guard():
        held = system.hold(units, sizes, 200, EvictionContext(question_id=history.question.history_key))
    assert held and sum(system.tokens(m) for m in held) <= 200 < int(sizes.sum())
    assert all(0 <= min(m.sources) and max(m.sources) < len(units) for m in held)
    assert system.figures().calls[EXTRACTION] == len(units) and system.figures().evicted > 0


def test_a_missing_mem0_is_one_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_restore.libraries import registry

    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    policies = registry.PolicyRegistry()
    registry.register_libraries(policies)
    assert "mem0" in policies
    with pytest.raises(ImportError, match=r"^memory library 'mem0' needs mem0ai: pip install 'pytest-restore\[mem0\]'$"):
        policies["mem0"]


def _through_gateway(server: OpenAIServer, cache: Path, **options: object) -> None:
    """This process's gateway: the loopback server's model upstream, managed and cached under ``cache``."""

    deadline = float(options.pop("deadline", 60))  # type: ignore[arg-type]

    def make() -> Gateway:
        chat = OpenAIChatModel(model="small-model", base_url=server.base_url, cache=ResponseCache(cache), **options)  # type: ignore[arg-type]
        embedder = OpenAIEmbedder(model=EMBEDDER, base_url=server.base_url, **options)  # type: ignore[arg-type]
        return Gateway(chat, embedder, dimensions=DIMS, cache_dir=cache, deadline=deadline)

    configure_gateway(make)


@speaks_mem0_1
def test_a_rerun_through_the_gateway_sends_nothing_upstream(locomo: Dataset, tmp_path: Path) -> None:
    """mem0's extraction, update and embedding calls go through the gateway into the run's response cache:
    the same stores built again on the same cache send not one request to the server. The first conversation's
    first four turns: each turn's calls are cached alike (mem0 makes ~10 a turn), so a longer history adds only time."""
    audit = Audit(locomo, AuditConfig(budgets=(ALL,)), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    history = audit.questions[0].history
    units, sizes = history.units[:4], history.sizes[:4]
    held = []
    try:
        for _ in range(2):
            with OpenAIServer(Mem0Model()) as upstream:
                _through_gateway(upstream, tmp_path)
                memories = Mem0System().hold(units, sizes, ALL, EvictionContext(question_id=history.question.history_key))
                held.append(sorted((m.sources, m.text) for m in memories))
                sent = len(upstream.log)
                close_gateway()
            if len(held) == 1:
                assert sent > 0 and held[0]
        assert sent == 0 and held[0] == held[1]
    finally:
        configure_gateway(None)


@pytest.mark.parametrize("mode", ["500-echo-key", "hang"])
def test_a_server_echoing_the_key_or_never_answering_fails_one_store_in_one_line(
    mode: str, locomo: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 44's two mem0 cases: a chat server that echoes the key in a 500, and one that never answers:
    each ends the store within the deadline in one line naming mem0 and the question, no key on any line."""
    key = "sk-proj-Mem0SecretKey0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    audit = Audit(locomo, AuditConfig(budgets=(ALL,)), reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer())
    started = time.monotonic()
    try:
        with OpenAIServer(Mem0Model()) as upstream:
            upstream.mode = mode
            _through_gateway(upstream, tmp_path, max_tries=1, timeout=0.5, deadline=3.0)
            with pytest.raises(GuestFailure) as failed:
                audit.held(Mem0System(max_tokens=64), audit.questions[0], ALL, 0, {})
    finally:
        close_gateway()
        configure_gateway(None)
    message = str(failed.value)
    assert message.startswith(f"memory library 'mem0' on {audit.questions[0].history.question.history_key}: add on unit 0 failed")
    assert "\n" not in message and time.monotonic() - started < 30
    assert key not in message + caplog.text and key[:16] not in message + caplog.text


@pytest.mark.parametrize("silent", ["chat", "embeddings"])
def test_ctrl_c_ends_a_mem0_run_whose_model_server_never_answers_within_seconds(silent: str, tmp_path: Path) -> None:
    """Issue 44: mem0's chat server (or its embeddings server) never answers, and the user presses Ctrl-C.
    mem0 waits on its own client in its own thread pool, which it joins before the interrupt leaves its code;
    before, the run went on for a minute and more after SIGINT (the gateway's deadline, then mem0's client's
    retries). Now every wait the run started ends at once: the process exits 2 within seconds, says it was
    interrupted in pytest's one line, shows no traceback, and leaves the earlier report as it was."""
    import os
    import signal
    import subprocess
    import sys

    (tmp_path / "test_grid.py").write_text(GRID)
    earlier = tmp_path / "restore-report"
    earlier.mkdir()
    (earlier / "report.md").write_text("# an earlier run's report\n")
    (earlier / "summary.json").write_text("{}\n")
    models = (
        ["--restore-writer-model=openai:small-model"] if silent == "chat"
        else ["--restore-writer-model=fake", "--restore-writer-embedder=openai:text-embedding-3-small"]
    )
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-Mem0CtrlC0123456789abcdef"}
    with OpenAIServer() as upstream:
        upstream.mode = "hang"
        child = subprocess.Popen(
            # langsmith's pytest plugin (langmem's dependency, installed here) costs the child 0.8 s of imports
            [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-p", "no:langsmith_plugin", f"--restore-data={LOCOMO}",
             f"--restore-budgets={ALL}", "--restore-policies=mem0", *models, f"--restore-base-url={upstream.base_url}",
             "--restore-bootstrap=200", "--restore-family-checks=report"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while upstream.total_requests == 0 and child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert upstream.total_requests > 0 and child.poll() is None, "mem0 never called its model"
            time.sleep(0.5)  # mem0's thread is blocked on the gateway, the gateway's on the upstream
            child.send_signal(signal.SIGINT)
            interrupted = time.monotonic()
            out, _ = child.communicate(timeout=60)
            ended = time.monotonic() - interrupted
        finally:
            if child.poll() is None:
                child.kill()
                child.communicate()
    print(f"mem0 with a silent {silent} server: ended {ended:.1f} s after Ctrl-C")
    assert child.returncode == pytest.ExitCode.INTERRUPTED, out[-2000:]
    assert ended < 30, (ended, out[-2000:])  # about 6-10 s measured on 2 busy cores, most of it pytest's own end
    lines = out.splitlines()
    assert sum("KeyboardInterrupt !!!" in line for line in lines) == 1, out[-2000:]
    assert "Traceback" not in out and "mem0/" not in out and "openai/" not in out, out[-2000:]
    assert (earlier / "report.md").read_text() == "# an earlier run's report\n" and sorted(p.name for p in earlier.iterdir()) == ["report.md", "summary.json"]
