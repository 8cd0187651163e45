"""The fast paths give the same results as the plain ones; the shared caches are safe to reuse."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import figures_not_rendered, flat_record

from pytest_restore.audit.memo import model_calls, prompt_id
from pytest_restore.audit.run import Audit, AuditConfig, count_tokens_ahead
from pytest_restore.data import tokens
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import (
    Granularity,
    Unit,
    build_histories,
    build_history,
    counts_file_name,
)
from pytest_restore.memory.eviction import EvictionContext, RandomPolicy, Redundancy
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.report.markdown import render_model_calls_md
from pytest_restore.synthetic.generator import generate, write_dataset

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"


class SlowRandom(RandomPolicy):
    """``random`` through the generic victim loop: one ``Generator.integers`` call per eviction."""

    name = "slow-random"

    def choose_victim(self, stored: Sequence[int], units: Sequence[Unit]) -> int:
        return stored[int(self._rng.integers(len(stored)))]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("small") / "small.json"
    write_dataset(generate(6, 3, tokens_per_history=6000), path)
    return path


def test_random_fast_path_draws_the_generic_victims(small: Path) -> None:
    dataset = load_dataset(small)
    for q in dataset.questions:
        for granularity in Granularity:
            h = build_history(q, granularity)
            total = int(h.sizes.sum())
            for budget in (total, total // 2, total // 5, 50, 1):
                for seed in (0, 1, 2):
                    ctx = EvictionContext(q.question_id, seed)
                    fast = RandomPolicy().retain(h.units, h.sizes, budget, ctx)
                    slow = SlowRandom().retain(h.units, h.sizes, budget, ctx)
                    assert fast.tolist() == slow.tolist(), (q.question_id, granularity, budget, seed)


def test_random_kernel_draws_like_generator_integers_with_the_rejection_branch() -> None:
    # bounds near 2**31 make Lemire's rejection step frequent: the kernel must redraw alike
    from pytest_restore.memory.kernels import OUT_OF_DRAWS, below

    highs = [3_000_000_000, 2**31 + 7, 1, 2, 40, 3_999_999_999] * 50
    draws = np.random.default_rng(5).integers(0, 1 << 32, size=400, dtype=np.uint32)
    rng_slow = np.random.default_rng(5)
    k = 0
    rejected = 0
    for high in highs:
        value, after = below(draws, k, high)
        assert value == int(rng_slow.integers(high))
        rejected += after - k > 1
        k = after
    assert rejected > 0  # the rejection branch ran
    assert below(draws, len(draws), 7) == (OUT_OF_DRAWS, len(draws))


def test_random_kernel_asks_for_more_draws_when_short() -> None:
    from pytest_restore.memory.kernels import random_victims

    sizes = np.full(50, 10, dtype=np.int64)
    few = np.random.default_rng(1).integers(0, 1 << 32, size=5, dtype=np.uint32)
    _, enough = random_victims(sizes, 100, few)
    assert not enough
    many = np.random.default_rng(1).integers(0, 1 << 32, size=200, dtype=np.uint32)
    kept, enough = random_victims(sizes, 100, many)
    assert enough and int(kept.sum()) == 10


def test_redundancy_with_one_unit_over_the_budget() -> None:
    texts = ["alpha beta", "a much longer unit with many words", "gamma", "alpha gamma"]
    units = tuple(Unit(i, 0, i, "d", "user", t, t, s) for i, (t, s) in enumerate(zip(texts, (3, 50, 2, 2))))
    sizes = np.array([u.tokens for u in units], dtype=np.int64)
    kept = Redundancy().retain(units, sizes, 10, EvictionContext("x"))
    assert kept.tolist() == [False, False, True, True]


def test_dataset_cache_is_reused_and_invalidated(small: Path, tmp_path: Path) -> None:
    data = tmp_path / "d.json"
    data.write_bytes(small.read_bytes())
    cache = tmp_path / "cache"
    first = load_dataset(data, cache_dir=cache)
    files = sorted(cache.glob("dataset-*.marshal"))
    assert len(files) == 1
    again = load_dataset(data, cache_dir=cache)
    assert again == first and again.questions[0].haystack_sessions == first.questions[0].haystack_sessions
    # a changed file is parsed again, under a new key
    data.write_bytes(data.read_bytes().replace(b'"answer": "', b'"answer": "X', 1))
    changed = load_dataset(data, cache_dir=cache)
    assert changed.sha256 != first.sha256
    assert len(list(cache.glob("dataset-*.marshal"))) == 2
    assert changed == load_dataset(data)


def test_unreadable_dataset_cache_is_ignored(small: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = load_dataset(small, cache_dir=cache)
    (file,) = cache.glob("dataset-*.marshal")
    file.write_bytes(b"not marshal")
    assert load_dataset(small, cache_dir=cache) == first


def test_token_counts_file_gives_the_same_histories_without_encoding(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset = load_dataset(small)
    questions = [q for q in dataset.questions if not q.is_abstention]
    counts = tmp_path / counts_file_name(dataset.sha256, Granularity.TURN)
    first = build_histories(questions, counts_file=counts)
    assert counts.exists()
    # a fresh process: empty memo, and an encoder that must not be asked
    monkeypatch.setattr(tokens, "_COUNTER", tokens.TokenCounter())

    def no_encoding(*args: object) -> Any:
        raise AssertionError("the counts file should have made encoding unnecessary")

    monkeypatch.setattr(tokens, "_count_text", no_encoding)  # tiktoken's and the Python count alike
    again = build_histories(questions, counts_file=counts)
    assert [h.sizes.tolist() for h in again] == [h.sizes.tolist() for h in first]
    assert [h.units for h in again] == [h.units for h in first]


def test_counts_made_ahead_let_an_audit_build_without_encoding(
    small: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what an xdist controller does once before its workers build their audits
    dataset = load_dataset(small)
    config = AuditConfig(cache_dir=str(tmp_path))
    heard: list[int] = []
    assert count_tokens_ahead(dataset, config, heard.append)
    assert heard and heard[0] > 0  # the number of distinct texts, said before counting
    assert not count_tokens_ahead(dataset, config, heard.append) and len(heard) == 1  # already there
    reference = _audit(small)
    # a worker: empty memo, and an encoder that must not be asked
    monkeypatch.setattr(tokens, "_COUNTER", tokens.TokenCounter())

    def no_encoding(*args: object) -> Any:
        raise AssertionError("the counts made ahead should have made encoding unnecessary")

    monkeypatch.setattr(tokens, "_count_text", no_encoding)  # tiktoken's and the Python count alike
    worker = _audit(small, cache_dir=str(tmp_path))
    assert [p.history.sizes.tolist() for p in worker.questions] == [p.history.sizes.tolist() for p in reference.questions]


def test_counts_file_name_depends_on_data_and_granularity() -> None:
    names = {counts_file_name(sha, g) for sha in ("a", "b") for g in Granularity}
    assert len(names) == 4


def _audit(path: Path, **config: Any) -> Audit:
    reader = FakeReader()
    audit = Audit(load_dataset(path), AuditConfig(**config), reader=reader, judge=FakeJudge(), scorer=FakeScorer())
    reader.learn(p.history for p in audit.questions)
    return audit


def test_cells_run_once_per_process_and_records_carry_prompt_ids(small: Path) -> None:
    audit = _audit(small, budgets=(3000,))
    fifo = audit_policy("fifo")
    run = audit.run_cell(fifo, 3000)
    sent = audit.reader.usage.sent
    assert audit.run_cell(fifo, 3000) is run  # the control's check reuses it
    assert audit.reader.usage.sent == sent
    for r in run.records:
        for _name, condition in r.conditions.by_name():
            assert isinstance(condition.prompt, str) and len(condition.prompt) == 16
    # the two regimes of one store share the restored call, and the oracle is once per question
    calls = model_calls(run.records)["fake"]
    assert calls.reader_naive == 3 * len(run.records)
    distinct = {c.prompt for r in run.records for _name, c in r.conditions.by_name()}
    assert calls.reader_unique == len(distinct) <= 2 * len(run.records)
    section = render_model_calls_md(model_calls(run.records))
    assert "## Model calls" in section and f"| {calls.reader_naive} | {calls.reader_unique} |" in section


def test_a_request_is_hashed_once_and_a_scorer_request_not_at_all(small: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_restore.audit import calls, memo

    audit = _audit(small, budgets=(3000, 1000))
    hashed: list[ChatRequest] = []
    digest = memo.request_digest

    def counted(request: ChatRequest) -> bytes:
        hashed.append(request)
        return digest(request)

    monkeypatch.setattr(memo, "request_digest", counted)
    monkeypatch.setattr(calls, "request_digest", counted)
    asked: list[ChatRequest] = []
    run = audit.reader.run

    def reader_run(requests: Sequence[ChatRequest], keys: Any = None) -> Any:
        asked.extend(requests)
        return run(requests, keys)

    monkeypatch.setattr(audit.reader, "run", reader_run)
    policy = audit_policy("llm-importance")
    first = audit.run_cell(policy, 3000)
    contents = {u.content for p in audit.questions for u in p.history.units}
    # each distinct unit content scored once, its request known to the memo by the content: none hashed
    assert audit.scorer.usage.sent == len(contents) and audit.scorer.usage.failed == 0
    assert not any(r.messages[0][1] == audit.prompts.scorer_system for r in hashed)
    # a reader request's one digest names it in the memo and gives its record's prompt id
    readers = [r for r in hashed if r.messages[0][1] == audit.prompts.reader_system]
    assert asked and len(readers) == len(asked)
    assert {prompt_id(r) for r in asked} == {c.prompt for r in first.records for _, c in r.conditions.by_name()}
    audit.run_cell(policy, 1000)  # the scores are known: nothing more is sent to the scorer
    assert audit.scorer.usage.sent == len(contents)
    assert first.records[0].importance_scores is not None and sum(first.records[0].importance_scores) == len(
        audit.history(first.records[0].question_id).units
    )


def audit_policy(name: str) -> Any:
    from pytest_restore.memory.eviction import default_registry

    return default_registry()[name]


def test_prompt_id_names_the_whole_request() -> None:
    a = ChatRequest(messages=(("system", "s"), ("user", "u")), max_tokens=10)
    assert prompt_id(a) == prompt_id(ChatRequest(messages=(("system", "s"), ("user", "u")), max_tokens=10))
    others = [
        ChatRequest(messages=(("system", "s"), ("user", "v")), max_tokens=10),
        ChatRequest(messages=(("system", "su"), ("user", "")), max_tokens=10),
        ChatRequest(messages=(("system", "s"), ("user", "u")), max_tokens=11),
        ChatRequest(messages=(("system", "s"), ("user", "u")), max_tokens=10, temperature=0.5),
    ]
    assert len({prompt_id(a), *(prompt_id(o) for o in others)}) == 5


def test_model_calls_without_prompt_ids_is_empty() -> None:
    assert model_calls([flat_record(question_id="q")]) == {}  # a record without prompt ids
    assert render_model_calls_md({}) == ""


def test_ranker_matches_configured_rank_bm25(small: Path) -> None:
    pytest.importorskip("rank_bm25")
    from bench_grid import compare_rankers

    figures = compare_rankers(small, 6, 1)
    assert figures["identical"] == figures["cases"] > 0
    assert figures["max_score_diff"] < 1e-9


def test_bench_parser_knows_its_options() -> None:
    from bench_grid import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--questions", "20", "--scale"])
    assert args.questions == 20 and args.scale and args.resamples == 10_000
    assert os.fspath(args.work_dir) == ""
    assert parser.parse_args([]).high_reuse


def test_bench_data_with_real_reuse_holds_more_distinct_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench_grid import FLOOR_CODE, make_dataset

    share = {}
    for reuse in ("real", "high"):
        make_dataset(tmp_path / f"{reuse}.json", 30, 0, 8_000, None, reuse)
        # the bench runs the floor's script in a fresh process for its timing; its counts are the same
        # in this one, without an interpreter's start
        monkeypatch.setattr(sys, "argv", ["floor", str(tmp_path / f"{reuse}.json")])
        exec(FLOOR_CODE, {"__name__": "floor"})  # noqa: S102 - the bench's own script
        figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        share[reuse] = figures["distinct_tokens"] / figures["history_tokens"]
    # at 8k-token histories each question's own text (evidence, its mentions, distractors) is a large
    # part of the file: "high" reuse shares only the filler (measured: real 0.98, high 0.66)
    assert share["real"] > 0.9
    assert share["high"] < 0.75


def test_kernels_fall_back_to_per_process_compiling_without_a_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # numba refuses cache=True when no directory is writable (a read-only install, no home)
    from pytest_restore.memory import kernels

    calls: list[dict[str, bool]] = []

    def fake_njit(**options: bool):  # type: ignore[no-untyped-def]
        calls.append(options)
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'kernels.py'")
        return lambda fn: fn

    monkeypatch.setattr(kernels, "njit", fake_njit)
    compiled = kernels._compiled(lambda x: x + 1)
    assert compiled(1) == 2
    assert calls == [{"cache": True, "nogil": True}, {"nogil": True}]


def test_the_kernels_cache_is_looked_for_where_numba_keeps_it() -> None:
    # kernel_cache answers without loading numba: the directories and index names numba itself gives
    from pytest_restore.memory import kernel_cache, kernels

    kernels.fact_counts("I have 3 dogs.")  # a kernel compiled, or loaded from the disk cache
    indexes = [
        Path(k._cache._cache_file._index_path)
        for k in vars(kernels).values()
        if getattr(getattr(k, "_cache", None), "_cache_file", None) is not None
    ]
    assert len(indexes) > 10
    directories = kernel_cache.cache_directories()
    for index in indexes:
        assert index.parent in directories, (index, directories)
        assert index.name.startswith("kernels.") and index.name.endswith(kernel_cache.index_suffix()), index
    assert kernel_cache.cached_on_disk() is any(index.exists() for index in indexes) is True


@pytest.mark.parametrize("where", ["in-tree", "NUMBA_CACHE_DIR", "user", "none"])
def test_the_kernels_cache_is_found_in_each_place_numba_may_keep_it(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_restore.memory import kernel_cache

    source = tmp_path / "pkg" / "kernels.py"
    source.parent.mkdir()
    source.write_text("")
    monkeypatch.delenv("NUMBA_DISABLE_JIT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba-dir"))
    in_tree, numba_dir, user = (source.parent / "__pycache__", *kernel_cache.cache_directories(source)[::2])
    assert kernel_cache.cache_directories(source) == [numba_dir, in_tree, user]
    assert numba_dir.parent == tmp_path / "numba-dir" and user.parent == tmp_path / "home-cache" / "numba"
    found = {"in-tree": in_tree, "NUMBA_CACHE_DIR": numba_dir, "user": user}.get(where)
    for directory in (in_tree, numba_dir, user):
        directory.mkdir(parents=True)
        (directory / f"other.f-12{kernel_cache.index_suffix()}").write_text("")  # another module's kernel
        (directory / "kernels.f-12.py27.nbi").write_text("")  # another interpreter's
    if found is not None:
        (found / f"kernels.lowest_key-57{kernel_cache.index_suffix()}").write_text("")
    assert kernel_cache.cached_on_disk(source) is (found is not None)
    monkeypatch.setenv("NUMBA_DISABLE_JIT", "1")  # nothing compiles
    assert kernel_cache.cached_on_disk(source)


def test_bench_breakdown_accounts_for_the_grid_phase_by_phase(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench_grid import BREAKDOWN_CODE

    from pytest_restore.memory.eviction import BUILTIN_POLICIES

    # the bench runs the breakdown's script in a fresh process, for its imports' time; its phases are the same
    # in this one, without an interpreter's start (4.0 CPU s in a child), the figure built and not rendered
    monkeypatch.setattr(sys, "argv", ["breakdown", str(Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json")])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the script's report directory
    with figures_not_rendered():
        exec(BREAKDOWN_CODE, {"__name__": "breakdown"})  # noqa: S102 - the bench's own script
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    phases = figures["phases"]
    for policy in BUILTIN_POLICIES:
        assert f"cells: {policy.name} (evict, rank, inject, read, judge)" in phases
    for phase in ("parse and validate", "prepare: units, token counts, lexical indexes",
                  "report (statistics, tables, figure)"):
        assert phases[phase] > 0, phase


def test_random_policy_draws_again_with_more_when_the_kernel_runs_short(
    small: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_restore.memory import kernels

    dataset = load_dataset(small)
    h = build_history(dataset.questions[0], Granularity.TURN)
    ctx = EvictionContext(dataset.questions[0].question_id, 1)
    budget = int(h.sizes.sum()) // 4
    want = RandomPolicy().retain(h.units, h.sizes, budget, ctx)
    real = kernels.random_victims_left
    lengths: list[int] = []

    def short_at_first(sizes, budget, draws):  # type: ignore[no-untyped-def]
        lengths.append(len(draws))
        if len(lengths) == 1:
            return np.zeros(len(sizes), dtype=bool), np.full(len(sizes), -1), False
        return real(sizes, budget, draws)

    monkeypatch.setattr(kernels, "random_victims_left", short_at_first)
    got = RandomPolicy().retain(h.units, h.sizes, budget, ctx)
    assert len(lengths) == 2 and lengths[1] > lengths[0]
    assert got.tolist() == want.tolist() and not want.all()
