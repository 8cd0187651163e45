"""The reference memory systems that summarise and extract, and the fake reader reading what they hold."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from grid_helpers import GRID
from openai_server import OpenAIServer, fake_models_responder
from test_html import CHROMIUM, open_page

from pytest_restore.audit.checks import construct_checks
from pytest_restore.audit.run import Audit, AuditConfig
from pytest_restore.data.loaders import load_data
from pytest_restore.data.units import Unit, build_history
from pytest_restore.memory.derived import (
    ExtractiveSummary,
    FactExtract,
    SentenceFacts,
    SessionSummary,
    Summarizer,
    default_policies,
    key_sentence,
    sentences,
)
from pytest_restore.memory.eviction import EvictionContext, Policy, runs_by_default
from pytest_restore.memory.memories import Memory
from pytest_restore.memory.systems import MemorySystem, MemorySystemError
from pytest_restore.models.fake import (
    FakeJudge,
    FakeReader,
    FakeScorer,
    KnownQuestion,
    evidence_words,
)
from pytest_restore.models.openai_chat import OpenAIChatModel
from pytest_restore.models.prompts import (
    DONT_KNOW,
    FACTS_SYSTEM,
    SUMMARY_SYSTEM,
    PromptSet,
    parse_facts,
)
from pytest_restore.models.writers import (
    FactExtractModel,
    ModelSummary,
    SessionSummaryModel,
)
from pytest_restore.models.writers import default_policies as every_policy
from pytest_restore.record import Record
from pytest_restore.report.checks import render_memory_systems_md, unbound_budgets, unused_calls
from pytest_restore.report.html import DERIVED_KEYS, Strings, story_payload
from pytest_restore.report.story import render_story_text, tell

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
CTX = EvictionContext(question_id="q")


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


def turn(pos: int, session: int, content: str, role: str = "user", tokens: int = 20) -> Unit:
    date = f"2024/01/{session + 1:02d}"
    return Unit(pos, session, pos, date, role, content, f"[{date}] {role}:\n{content}", tokens)


SESSIONS = [
    turn(0, 0, "I moved to Lisbon in 2019. The weather is mild. We talk a lot."),
    turn(1, 0, "That sounds lovely. Tell me more.", "assistant"),
    turn(2, 1, "My rent is 950 euros a month. It is fine."),
    turn(3, 1, "Good to know.", "assistant"),
    turn(4, 2, "Nothing much happened today."),
]


def test_sentences_and_the_key_sentence() -> None:
    assert sentences("One. Two!\nThree?  Four") == ("One.", "Two!", "Three?", "Four")
    # the most fact-dense sentence: numbers, names, first-person words per word
    assert key_sentence("The weather is mild. I moved to Lisbon in 2019. It rains.") == "I moved to Lisbon in 2019."
    assert evidence_words("Oh, by the way: my rent at Orchard Street is $3,850.") == {"orchard", "street", "3", "850"}
    # no number and no name: its content words
    assert evidence_words("Side note, I bought a rubber plant today.") >= {"rubber", "plant"}


def test_a_closed_session_becomes_one_summary_citing_its_turns() -> None:
    system = SessionSummary(ExtractiveSummary(keep=0.2))
    held = system.hold(SESSIONS, np.full(5, 20), 10_000, CTX)
    assert [m.sources for m in held] == [(0, 1), (2, 3), (4,)]
    # a fifth of each session's sentences (at least one), the densest
    assert [m.text for m in held] == ["I moved to Lisbon in 2019.", "My rent is 950 euros a month.", SESSIONS[4].content]
    assert all(m.role == "memory" for m in held)
    # everything kept: every sentence, in order
    whole = SessionSummary(ExtractiveSummary(keep=1.0)).hold(SESSIONS, np.full(5, 20), 10_000, CTX)
    assert whole[0].text == " ".join(sentences(SESSIONS[0].content) + sentences(SESSIONS[1].content))


def test_summaries_are_evicted_oldest_first_and_the_open_session_is_held_raw() -> None:
    system = SessionSummary(ExtractiveSummary(keep=1.0))
    system.reset(10_000, CTX)
    for unit in SESSIONS[:3]:
        system.add(unit)
    assert system.memories()[-1] == Memory.of(SESSIONS[2])  # session 1 is open: its turn as it is
    sizes = [system.tokens(m) for m in SessionSummary(ExtractiveSummary(1.0)).hold(SESSIONS, np.full(5, 20), 10_000, CTX)]
    budget = sizes[1] + max(sizes[2], 20)  # room for the last two summaries only (or the open session's turn)
    held = SessionSummary(ExtractiveSummary(keep=1.0)).hold(SESSIONS, np.full(5, 20), budget, CTX)
    assert [m.sources for m in held] == [(2, 3), (4,)]


def test_a_restating_fact_replaces_the_held_one_and_cites_both_turns() -> None:
    units = [
        turn(0, 0, "My monthly rent at Orchard Street is $950."),
        turn(1, 0, "I adopted a cat named Noor."),
        turn(2, 1, "Update: my monthly rent at Orchard Street is $3,850 now."),
        turn(3, 1, "the sky is blue and so on and so forth."),
    ]
    held = FactExtract().hold(units, np.full(4, 20), 10_000, CTX)
    assert {m.text: m.sources for m in held} == {
        "user: I adopted a cat named Noor.": (1,),
        "user: Update: my monthly rent at Orchard Street is $3,850 now.": (0, 2),
    }
    short = FactExtract(SentenceFacts(max_words=4)).hold(units, np.full(4, 20), 10_000, CTX)
    # cut to four words: the numbers and names are gone
    assert {m.text for m in short} == {"user: I adopted a cat", "user: Update: my monthly rent"}


class KeepTwoUserTurns(MemorySystem):
    """Holds the last two user turns as they are; at the history's end, only the last."""

    name = "keep-two"

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self.kept: list[Memory] = []

    def add(self, unit: Unit) -> None:
        if unit.role == "user":
            self.kept = [*self.kept, Memory.of(unit)][-2:]

    def finish(self) -> None:
        self.kept = self.kept[-1:]

    def memories(self) -> list[Memory]:
        return self.kept


def test_the_trace_says_when_each_unit_lost_its_last_citing_memory() -> None:
    held = KeepTwoUserTurns().trace(SESSIONS, np.full(5, 20), 10_000, CTX)
    assert [m.sources for m in held.memories] == [(4,)]
    # 0 went when 4 arrived; the assistant's turns were never held (their own arrival); 2 went at the close
    assert held.lost == {0: 4, 1: 1, 2: None, 3: 3}
    budget = 10_000
    summaries = SessionSummary(ExtractiveSummary(keep=1.0)).trace(SESSIONS, np.full(5, 20), budget, CTX)
    assert summaries.lost == {} and [m.sources for m in summaries.memories] == [(0, 1), (2, 3), (4,)]


def test_the_registry_holds_both_systems_after_the_policies() -> None:
    names = list(every_policy())
    assert names[-4:] == ["session-summary", "fact-extract", "session-summary-model", "fact-extract-model"]
    assert all(every_policy()[n].derived for n in names[-4:]) and list(default_policies()) == names[:-2]
    # the one rule: they run only when --restore-policies names them, as every memory system does
    assert [n for n in names if not runs_by_default(every_policy()[n])] == names[-4:]


def reader_prompt(snippets: str) -> str:
    request = PromptSet().reader(question="What is my rent?", question_date="2024/02/01", snippets=snippets)
    return "\n".join(c for role, c in request.messages if role == "user")


def test_the_fake_reader_finds_a_fact_a_memory_holds_and_misses_one_it_lost() -> None:
    gold = "Oh, by the way: my monthly rent at the place on Orchard Street is $950. How are you?"
    reader = FakeReader(knobs=None, utilisation_scale=0.0)
    reader._known[("What is my rent?", "2024/02/01")] = KnownQuestion(
        "q1", "single-session-user", "$950", (f"[2024/01/01] user:\n{gold}",), (evidence_words(gold),)
    )
    kept = "[2024/01/01] memory:\nuser: my monthly rent on Orchard Street is $950"
    lost = "[2024/01/01] memory:\nuser: my monthly rent on Orchard Street is $"
    other = "[2024/01/02] user:\nSomething else entirely."
    assert reader.answer(reader_prompt(f"{other}\n\n{kept}")) == "$950"
    assert reader.answer(reader_prompt(f"{other}\n\n{lost}")) == DONT_KNOW
    # a raw turn that happens to hold the words is not read as a memory: raw turns are found verbatim
    assert reader.answer(reader_prompt("[2024/01/01] user:\nmy rent on Orchard Street is $950")) == DONT_KNOW
    assert reader.answer(reader_prompt(f"[2024/01/01] user:\n{gold}")) == "$950"


# -- the audit over derived memories: the distorted bin -------------------------------------


class Verbatim(Summarizer):
    """Keeps every turn of a closed session word for word (each turn its own raw memory)."""

    def summarize(self, turns: Sequence[Unit]) -> list[Memory]:
        return [Memory.of(t) for t in turns]


class DropDigits(Summarizer):
    """Keeps every turn of a closed session, each as a memory with its digits removed."""

    def summarize(self, turns: Sequence[Unit]) -> list[Memory]:
        return [Memory(re.sub(r"\d", "", t.content), t.date, (t.position,)) for t in turns]


@pytest.fixture(scope="module")
def embedded_audit(embedded_data: Path) -> Audit:
    """Eight questions of the embedded default (a stratified subset), their histories whole: enough for a
    distorted record of each regime and for compression to move the distorted share. A derived store's
    cell costs in proportion to the histories fed (twenty questions: 7 CPU s for this module's cells)."""
    dataset = load_data(embedded_data)
    reader = FakeReader()
    config = AuditConfig(budgets=(80_000,), questions=8, seeds=(0,))
    audit = Audit(dataset, config, reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    return audit


def distorted(audit: Audit, system: Policy) -> list[Record]:
    run = audit.run_cell(system, 80_000)
    assert construct_checks(run, audit) == []
    return [r for r in run.records if r.bin == "distorted"]


def test_a_verbatim_summary_distorts_nothing_and_one_without_digits_does(embedded_audit: Audit) -> None:
    verbatim = embedded_audit.run_cell(SessionSummary(Verbatim()), 80_000)
    assert {r.bin for r in verbatim.records} - {None} and not [r for r in verbatim.records if r.bin == "distorted"]
    lost = distorted(embedded_audit, SessionSummary(DropDigits()))
    assert any(re.search(r"\d", r.reference or "") for r in lost)
    for r in lost:
        assert r.memories is not None and r.memories.forced.correct is False and r.gold_evicted == 0
        assert r.conditions.restored.correct is True and all("memory of session" in w for w in r.memories.where)
        assert len(r.memories.injected or ()) == len(r.memories.positions or ()) > 0
    # the story of a distorted record: the gold cited by held memories, regime (a)'s context told beside its own
    r = next(r for r in lost if r.regime == "b")
    story = tell([r], embedded_audit.history(r.question_id).question)
    assert all(g.fate.startswith("cited by a held memory") for g in story.cells[0].gold)
    text = render_story_text(story, full=True)
    assert "DISTORTED" in text and "forced: the store with its memories citing gold forced" in text
    assert f"held memories citing gold: {len(r.memories.positions or ())} (the forced condition reads them all)" in text
    # every memory a reader saw is told whole: those citing no gold too, their texts kept by the record
    seen = {s.unit.position: s.unit for c in story.cells[0].conditions for s in c.seen or ()}
    derived = {p: u for p, u in seen.items() if u.session < 0}
    others = set(r.memories.others or ())
    assert others and others <= set(derived) and "its text is not recorded" not in text
    flat = " ".join(text.split())
    assert all(" ".join(u.content.split()) in flat and u.label.startswith("memory of session") for u in derived.values())
    forced = story.cells[0].conditions[-1]
    assert [s.unit.label for s in forced.seen or () if s.forced] == list(r.memories.where or ())
    # report.html keys a derived memory apart from the data's units (another cell's memory may share its position)
    entry, rows = story_payload(story, 0, Strings())
    keys = rows[0][-1][-1][-1]  # the forced condition's forced units
    assert keys and all(k >= DERIVED_KEYS and entry["units"][str(k)][5].startswith("memory of session") for k in keys)


def test_a_budget_that_never_binds_a_derived_store_is_said(embedded_audit: Audit) -> None:
    """The cells' figures count what each store held; a tighter budget whose stores hold what the loosest's do
    is named in the report's memory-systems section: its cell repeats the loosest's (the embedded default's
    facts fit under 8k, so fact-extract's budgets read the same), while session-summary's 8k bites."""
    cells = []
    questions = embedded_audit.questions[:6]  # a history each
    for system in (FactExtract(), SessionSummary()):
        for budget in (80_000, 8_000):
            figures = embedded_audit.run_cell(system, budget, questions).memory
            assert figures is not None and figures.stores == 6 and figures.calls == {}
            cells.append({
                "cell": f"{system.name}-{budget // 1000}k", "policy": system.name, "budget": budget,
                "reader": "fake", "ranker": "", "figures": figures.to_json(),
            })
    facts, summaries = cells[:2], cells[2:]
    assert facts[0]["figures"] == facts[1]["figures"] and facts[0]["figures"]["held_tokens"] > 8_000
    assert summaries[1]["figures"]["held_tokens"] < summaries[0]["figures"]["held_tokens"]
    notes = unbound_budgets(cells)
    assert len(notes) == 4 and notes[3].startswith("- fact-extract held the same at 8k as at 80k (")
    assert "its cell repeats 80k's" in notes[3]
    section = render_memory_systems_md(cells)
    assert "Budgets that never bound" in section
    units = cells[0]["figures"]["units"]
    assert units >= 1000 and f"| {units:,} |" in section  # counts read as the tokens beside them do


def test_a_budget_that_never_bound_is_said_under_the_table_in_the_terminal_and_the_page(project: pytest.Pytester) -> None:
    """The terminal's and report.html's tables show a memory system's cells alike when its budget never bound:
    each says so under the table (report.md in its memory-systems section), and the page points to report.md
    for the sections it does not carry."""
    result = project.runpytest_inprocess(
        "-p", "no:xdist", f"--restore-data={TINY}", "--restore-policies=fact-extract", "--restore-budgets=600,300",
        "--restore-bootstrap=200", "--restore-family-checks=report",
    )
    assert result.ret == 0, result.outlines
    note = "fact-extract held the same at 300 as at 600 ("
    said = [line for line in result.outlines if note in line]
    assert len(said) == 1 and said[0].startswith("warning: ") and said[0].endswith("so its cell repeats 600's.")
    report = project.path / "restore-report"
    assert f"- {said[0].removeprefix('warning: ')}" in (report / "report.md").read_text()
    page = (report / "report.html").read_text()
    assert note in page and page.index(note) < page.index("Regime (a): forced surviving gold")
    assert "report.md, beside this page, holds the run's other sections" in page
    if CHROMIUM is None:
        return
    # the page's question list has the verdict that decides the distorted bin: the forced memories'
    dom = open_page(report / "report.html", "regime=b", project.path / "profile")
    head = [th.text for th in dom.by_id("rows").all(lambda n: n.tag == "th")]
    assert head[-2:] == ["restored", "forced memories"]
    records = [json.loads(line) for line in (report / "records.jsonl").read_text().splitlines()]
    rows = dom.by_id("rows").all(lambda n: n.tag == "tr" and "data-index" in n.attrs)
    assert rows
    verdicts = {True: "correct", False: "wrong", None: "no verdict"}
    for row in rows:
        forced = records[int(row.attrs["data-index"])]["memories"]["forced"]["correct"]
        assert [td.text for td in row.all(lambda n: n.tag == "td")][-1] == verdicts[forced]


def test_the_distorted_share_moves_with_compression(embedded_audit: Audit) -> None:
    short, long = (len(distorted(embedded_audit, FactExtract(SentenceFacts(max_words=w)))) for w in (6, 40))
    assert short > long
    terse, fuller = (len(distorted(embedded_audit, SessionSummary(ExtractiveSummary(keep=k)))) for k in (0.05, 0.25))
    assert terse != fuller


# -- the real-model writers: through the model layer -------------------------------------------------


def audited(records: Sequence[Record]) -> list[tuple[object, ...]]:
    """What the audit found per record (the models' names and token counts aside)."""
    return [
        (
            r.question_id, r.regime, r.bin, r.excluded, r.gold_evicted_after, r.gold_ranks, r.store_tokens,
            r.memories and (r.memories.texts, r.memories.injected, r.memories.forced.answer),
            *((c.answer, c.correct, c.injected_positions) for _, c in r.conditions.by_name()),
        )
        for r in records
    ]


def test_the_model_writers_prompts_and_their_replies() -> None:
    summary = ModelSummary().request(SESSIONS[:2])
    assert summary.messages[0] == ("system", SUMMARY_SYSTEM) and "user: I moved to Lisbon in 2019." in summary.messages[1][1]
    assert parse_facts("- I live in Lisbon.\n2) My rent is 950 euros.\n\n") == ["I live in Lisbon.", "My rent is 950 euros."]
    assert parse_facts("NONE") == [] and parse_facts(" none. ") == []
    # a system that writes with a model asks one request per session (summaries) or per turn (facts)
    assert len(SessionSummaryModel().requests(SESSIONS)) == 3 and len(FactExtractModel().requests(SESSIONS)) == 5
    assert SessionSummary().requests(SESSIONS) == [] and FactExtract().requests(SESSIONS) == []
    with pytest.raises(LookupError, match="no model reply for the summary of session 0"):
        SessionSummaryModel().hold(SESSIONS, np.full(5, 20), 10_000, CTX)


def test_the_model_variants_through_a_loopback_server_write_what_the_offline_ones_do(tmp_path: Path) -> None:
    """The writers' calls go through the model layer (an OpenAI-compatible model on a loopback server answering
    as the fake models do), asked once per session or turn in one batch; the records are the offline
    variants' (the fake model writes as the offline writers do). A writer call that fails for good excludes
    the records of its history, naming the writer, and is never scored."""
    dataset = load_data(TINY)
    histories = [build_history(q) for q in dataset.questions if not q.is_abstention]
    config = AuditConfig(budgets=(300,))

    def audit_with(reader: object) -> Audit:
        audit = Audit(dataset, config, reader=reader, judge=FakeJudge(), scorer=FakeScorer())  # type: ignore[arg-type]
        return audit

    offline = audit_with(FakeReader(histories))
    with OpenAIServer(fake_models_responder(histories), latency=0.001) as server:
        model = OpenAIChatModel(model="fake-writer", base_url=server.base_url, cache=None, max_tries=2, backoff_base=0.005)
        try:
            online = audit_with(model)
            for system, reference in ((SessionSummaryModel(), SessionSummary()), (FactExtractModel(), FactExtract())):
                asked = len(online.writer_requests(system))
                run = online.run_cell(system, 300)
                prompt = SUMMARY_SYSTEM if isinstance(system, SessionSummary) else FACTS_SYSTEM
                sent = [n for body, n in server.successes.items() if prompt in body]
                assert asked and len(sent) == asked and set(sent) == {1}  # each request once
                assert audited(run.records) == audited(offline.run_cell(reference, 300).records)
                assert construct_checks(run, online) == []
                # the writer's calls are the memory's cost: each question carries its share of them, as reported
                shares = {r.question_id: r.memory_tokens for r in run.records}
                assert all(t is not None for t in shares.values()) and not any(r.memory_tokens_estimated for r in run.records)
                spent = [(x.input_tokens, x.output_tokens) for x in model.run(online.writer_requests(system))]
                for i in (0, 1):
                    total = sum(t[i] for t in spent)
                    assert total > 0 and sum(t[i] for t in shares.values() if t) == pytest.approx(total, abs=0.01 * len(shares))
        finally:
            model.close()

    def refuse_summaries(messages: list[dict[str, object]]) -> str:
        if messages[0]["content"] == SUMMARY_SYSTEM:
            raise ValueError("the summariser is down")
        return fake_models_responder(histories)(messages)

    with OpenAIServer(refuse_summaries, latency=0.001) as server:
        model = OpenAIChatModel(model="fake-writer", base_url=server.base_url, cache=None, max_tries=2, backoff_base=0.005)
        try:
            run = audit_with(model).run_cell(SessionSummaryModel(), 300)
        finally:
            model.close()
    assert run.records and all(r.excluded == "api_error: writer" and r.bin is None for r in run.records)

    def blank_summaries(messages: list[dict[str, object]]) -> str:
        if messages[0]["content"] == SUMMARY_SYSTEM:
            return "  "
        return fake_models_responder(histories)(messages)

    with OpenAIServer(blank_summaries, latency=0.001) as server:
        model = OpenAIChatModel(model="fake-writer", base_url=server.base_url, cache=None, max_tries=2, backoff_base=0.005)
        try:
            audit = audit_with(model)
            run = audit.run_cell(SessionSummaryModel(), 300)
            asked = len(audit.writer_requests(SessionSummaryModel()))
        finally:
            model.close()
    # a blank summary is an answer the system can make nothing of: counted, by cause; with none used the cell fails
    assert run.memory is not None and run.memory.calls == {"writer": asked} and not run.memory.failed
    assert run.memory.rejected == {"writer": {"empty reply": asked}}
    assert unused_calls(run.memory.to_json()) == [f"every one of its {asked} writer calls rejected or failed"]
    assert run.records and all(r.excluded is None for r in run.records)  # scored as the system behaved: it held nothing of them


def test_the_dry_run_counts_and_prices_the_writer_calls(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A grid naming a system that writes with the run's model: the dry run counts its writer requests (one per
    distinct session) and prices them under the reader's model, before any call."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-DUMMY-KEY-0123456789")
    args = [
        f"--restore-data={TINY}", "--restore-budgets=300", "--restore-policies=fifo,session-summary-model",
        "--restore-reader=openai:gpt-4o-mini", "--restore-calibration=off", "--restore-dry-run",
    ]
    result = pytester.runpytest_inprocess("-p", "no:xdist", "-p", "no:cacheprovider", *args)
    assert result.ret == 0, result.outlines
    dataset = load_data(TINY)
    histories = {q.history_key: build_history(q) for q in dataset.questions if not q.is_abstention}
    by_session: dict[tuple[str, int], list[Unit]] = {}
    for key, h in histories.items():
        for u in h.units:
            by_session.setdefault((key, u.session), []).append(u)
    # a session two histories share is one request
    sessions = len({(t[-1].date, tuple((u.role, u.content) for u in t)) for t in by_session.values()})
    line = next(line for line in result.outlines if line.startswith("writer"))
    assert line.split()[1] == "openai:gpt-4o-mini" and int(line.split()[2].replace(",", "")) == sessions
    assert "estimated cost" in result.stdout.str()
    reader = next(line for line in result.outlines if line.startswith("reader"))
    assert reader.endswith("session-summary-model counted as written offline: estimate")

    # --restore-writer-model: the writer is another model; the reader's line is the fake's, counted as written
    result = pytester.runpytest_inprocess(
        "-p", "no:xdist", "-p", "no:cacheprovider", *args[:3], "--restore-calibration=off", "--restore-dry-run",
        "--restore-writer-model=openai:gpt-4o-mini",
    )
    assert result.ret == 0, result.outlines
    line = next(line for line in result.outlines if line.startswith("writer"))
    assert line.split()[1] == "openai:gpt-4o-mini" and int(line.split()[2].replace(",", "")) == sessions
    reader = next(line for line in result.outlines if line.startswith("reader"))
    assert reader.split()[1] == "fake" and reader.endswith("counted as written offline: estimate")


def test_the_writer_model_writes_cached_priced_and_counted_as_its_own(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--restore-writer-model names the model the memory systems write with, apart from the reader: its calls
    go to it (the reader asks none), the records name it, its usage and price are its own, and the memory's
    cost per question is priced at it; a second run reads every write from the cache."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-DUMMY-KEY-0123456789")
    dataset = load_data(TINY)
    histories = [build_history(q) for q in dataset.questions if not q.is_abstention]
    pytester.makepyfile(test_grid=GRID)
    with OpenAIServer(fake_models_responder(histories), latency=0.001) as server:
        args = [
            "-p", "no:xdist", "-p", "no:cacheprovider", f"--restore-data={TINY}", "--restore-budgets=300",
            "--restore-policies=session-summary-model", "--restore-writer-model=openai:summariser",
            "--restore-reader=openai:reader", f"--restore-base-url={server.base_url}",
            "--restore-price=openai:summariser=2,8", "--restore-price=openai:reader=1,1",
            "--restore-calibration=off", "--restore-bootstrap=200", "--restore-family-checks=report",
        ]
        result = pytester.runpytest_inprocess(*args)
        assert result.ret == 0, result.outlines[-20:]
        header = next(line for line in result.outlines if line.startswith("policy "))
        row = next(line for line in result.outlines if line.startswith("session-summary-model "))
        assert len(row) == len(header) and row.split()[1] == "300"  # the long name keeps the table's columns
        sent = sum(server.successes.values())
        report = pytester.path / "restore-report"
        records = [json.loads(line) for line in (report / "records.jsonl").read_text().splitlines()]
        summary = json.loads((report / "summary.json").read_text())
        again = pytester.runpytest_inprocess(*args)
        assert again.ret == 0 and sum(server.successes.values()) == sent  # every write from the cache
    models = {body: json.loads(body)["model"] for body in server.successes}
    written = {body for body in models if SUMMARY_SYSTEM in body}
    assert written and {models[body] for body in written} == {"summariser"}  # each summary by the writer
    assert {m for body, m in models.items() if body not in written} == {"reader"}
    assert {(r["reader"], r["writer"]) for r in records} == {("openai:reader", "openai:summariser")}
    settings = summary["run"]["settings"]
    assert settings["writer"] == "openai:summariser" and settings["model_prices"]["openai:summariser"] == [2.0, 8.0]
    assert sorted(settings["model_usage"]) == ["reader openai:reader", "writer openai:summariser"]
    [cell] = summary["cost"]["per_cell"]
    memory = cell["memory"]
    assert memory["tokens_in"] > 0 and memory["usd"] == pytest.approx((2 * memory["tokens_in"] + 8 * memory["tokens_out"]) / 1e6, rel=1e-3)


# -- a library's histories fed side by side (MemorySystem.parallel_stores) ---------------------------------


class SideBySide(FactExtract):
    """fact-extract as a library that allows its stores to be built three at a time: each store's reset waits
    until three are in (a barrier: fed one at a time, it breaks), and the history named ``fails`` raises."""

    parallel_stores = 3

    def __init__(self, barrier: threading.Barrier | None = None, fails: str | None = None) -> None:
        super().__init__()
        self.barrier, self.fails = barrier, fails
        # the instances that built a store, by id (shared by the copies). The dict holds each copy, so that a
        # copy freed once its history is fed cannot leave its id to the next one (train 130928 counted 5 of 6)
        self.copies: dict[int, SideBySide] = {}

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self.copies[id(self)] = self
        if self.barrier is not None:
            self.barrier.wait()
        if ctx.question_id == self.fails:
            raise MemorySystemError(f"memory system {self.name!r} on {ctx.question_id}: refused")
        super().reset(budget, ctx)


class OneAtATime(SideBySide):
    parallel_stores = 1


def test_a_librarys_histories_are_fed_side_by_side_as_they_are_one_at_a_time(
    embedded_audit: Audit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to the lesser of the system's parallel_stores and the run's concurrency, each history by a copy of the
    system on its own thread; the records and figures are those of feeding them one at a time, and a history
    that fails raises the same line at its first question."""
    questions = embedded_audit.questions[:6]  # a history each
    alone = embedded_audit.run_cell(OneAtATime(), 80_000, questions)
    monkeypatch.setattr(embedded_audit, "config", replace(embedded_audit.config, concurrency=3))
    system = SideBySide(threading.Barrier(3, timeout=30))  # two windows of three histories
    together = embedded_audit.run_cell(system, 80_000, questions)
    assert len(system.copies) == 6 and id(system) not in system.copies  # a copy per history, the system untouched
    assert audited(together.records) == audited(alone.records)
    assert together.memory is not None and alone.memory is not None
    assert replace(together.memory, ingest_seconds=0.0) == replace(alone.memory, ingest_seconds=0.0)
    # the run's concurrency bounds it: at 1 the barrier of three would break
    monkeypatch.setattr(embedded_audit, "config", replace(embedded_audit.config, concurrency=1))
    assert audited(embedded_audit.run_cell(SideBySide(), 80_000, questions).records) == audited(alone.records)
    third = questions[2].question.history_key
    errors = []
    for system, concurrency in ((OneAtATime(fails=third), 1), (SideBySide(fails=third), 3)):
        monkeypatch.setattr(embedded_audit, "config", replace(embedded_audit.config, concurrency=concurrency))
        with pytest.raises(MemorySystemError) as raised:
            embedded_audit.run_cell(system, 80_000, questions)
        errors.append(str(raised.value))
    assert errors[0] == errors[1] == f"memory system 'fact-extract' on {third}: refused"
