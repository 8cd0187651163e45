"""Embeddings and the rankers that read them: the fake embedder, the store, the OpenAI-compatible provider, dense and hybrid.

The provider talks to ``openai_server.OpenAIServer`` (``/v1/embeddings`` with
the real API's limits and messages); the grid tests run the tiny fixture
through the plugin in a child pytest and count, on the server, the inputs
it received against the distinct texts the audit ranks.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from grid_helpers import SMALLEST_GRID, TINY
from openai_server import EMBED_MODES, EMBEDDING_MAX_TOKENS, INVALID_INPUT, Faults, OpenAIServer

from pytest_restore.audit.run import AuditConfig, audited_questions
from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.tokens import count_token
from pytest_restore.data.units import Granularity, build_history, has_gold, unit_contents
from pytest_restore.memory.retrieval import RRF_K, Dense, Hybrid, LexicalIndex, rank
from pytest_restore.models.embeddings import (
    EmbeddingError,
    EmbeddingLimits,
    EmbeddingStore,
    FakeEmbedder,
    TextVectors,
)
from pytest_restore.models.openai_chat import OpenAIEmbedder
from pytest_restore.report.checks import render_embeddings_md
from pytest_restore.run.embeddings import audited_texts

MODEL = "text-embedding-3-small"
KEY = "sk-test-embeddings-0123456789abcdef"


#: No test here reads a report's figure: the runs build it and do not render it (conftest's ``figures_unrendered``).
pytestmark = pytest.mark.usefixtures("figures_unrendered")


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        yield running


def embedder(server: OpenAIServer, **kwargs: object) -> OpenAIEmbedder:
    return OpenAIEmbedder(model=MODEL, base_url=server.base_url, backoff_base=0.001, backoff_cap=0.01, **kwargs)  # type: ignore[arg-type]


# -- the fake embedder -----------------------------------------------------------------


def test_fake_embedder_is_deterministic_unit_length_and_sees_subwords() -> None:
    texts = ["We booked the Italian restaurant", "restaurants in Rome", "my dog chased a ball", ""]
    a, b = FakeEmbedder().embed(texts), FakeEmbedder().embed(texts)
    assert np.array_equal(a, b) and a.shape == (4, 256)
    assert np.allclose(np.linalg.norm(a[:3], axis=1), 1.0) and not a[3].any()
    # "restaurant" and "restaurants" share their trigrams: closer than an unrelated text
    assert float(a[0] @ a[1]) > float(a[0] @ a[2]) + 0.1



def test_the_fake_embedder_embeds_from_several_threads_at_once() -> None:
    """The gateway embeds on a pool of threads (cognee sends its embeddings requests side by side): words new
    to the embedder grow its table from every thread at once, and each text still gets its own vector (a table
    replaced between reading its size and copying it failed ~2 requests in 3 here)."""
    embedder, failed = FakeEmbedder(64), []
    texts = [f"zqx{k}w{j}a zqx{k}w{j}b zqx{k}w{j}c" for k in range(8) for j in range(30)]

    def embed(k: int) -> None:
        try:
            for j in range(30):
                embedder.embed([texts[30 * k + j]])
        except ValueError as err:
            failed.append(err)

    threads = [threading.Thread(target=embed, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == [] and np.array_equal(embedder.embed(texts), FakeEmbedder(64).embed(texts))


# -- the store -------------------------------------------------------------------------


def test_store_keeps_int8_rows_with_a_scale_and_cuts_off_a_killed_writers_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(50, 1536)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1)[:, None]
    texts = [f"text {i}" for i in range(50)]
    store = EmbeddingStore(tmp_path / "m")
    with store.locked():
        store.append(texts[:40], vectors[:40])
    assert store.nbytes() == 40 * (1536 + 4) + 40 * 16  # int8 row + float32 scale, 16-byte key
    back = store.vectors(texts[:40])
    cosine = np.sum(back * vectors[:40], axis=1) / np.linalg.norm(back, axis=1)
    assert cosine.min() > 0.999
    # a writer killed between its vectors and its keys: the stray vectors are cut off at the next append
    with open(store.vectors_path, "ab") as handle:
        handle.write(b"\x01" * 1540 * 3)
    fresh = EmbeddingStore(tmp_path / "m")
    assert fresh.missing(texts) == texts[40:]
    with fresh.locked():
        fresh.append(texts[40:], vectors[40:])
    assert fresh.nbytes() == 50 * (1536 + 4 + 16)
    assert np.allclose(EmbeddingStore(tmp_path / "m").vectors(texts[45:]), fresh.vectors(texts[45:]))


# -- the provider against the loopback server -------------------------------------------


def test_batches_keep_to_the_limits_and_an_over_long_text_is_truncated_and_counted(
    server: OpenAIServer, tmp_path: Path
) -> None:
    long_text = " ".join(f"word{i}" for i in range(6000))  # well over 8,192 o200k tokens
    assert count_token(long_text) > EMBEDDING_MAX_TOKENS
    texts = [f"short text number {i}" for i in range(9)] + [long_text, "short text number 0"]
    model = embedder(server, limits=EmbeddingLimits(4, 8191, 300_000))
    vectors = TextVectors(model, tmp_path)
    assert vectors.ensure(texts) == 10  # ten distinct texts
    assert model.stats.truncated == 1 and model.stats.requests == 3  # 4 + 4 + 2 inputs
    assert all(len(entry.body["input"]) <= 4 for entry in server.log if entry.body)
    received = server.embedded
    assert max(received.values()) == 1 and len(received) == 10
    assert long_text not in received  # the truncated text went, kept to 90% of the limit
    assert max(count_token(t) for t in received) == int(8191 * 0.9)
    assert vectors.store.dimensions == 1536
    model.close()


def test_the_server_refuses_what_the_real_api_refuses(server: OpenAIServer) -> None:
    long_text = " ".join(f"word{i}" for i in range(6000))
    too_long = embedder(server, limits=EmbeddingLimits(2048, 100_000, None), max_tries=1)
    with pytest.raises(EmbeddingError, match="maximum context length is 8192 tokens, however you requested"):
        too_long.embed([long_text])
    too_many = embedder(server, limits=EmbeddingLimits(3000, 8191, None), max_tries=1)
    with pytest.raises(EmbeddingError) as raised:
        too_many.embed([f"t{i}" for i in range(2100)])
    message = str(raised.value)
    assert message.startswith(f"embedder openai:{MODEL}: HTTP 400 (not retried): ") and INVALID_INPUT in message
    assert "\n" not in message
    too_long.close()
    too_many.close()


def test_429s_with_retry_after_are_waited_out_and_each_text_is_answered_once(
    server: OpenAIServer, tmp_path: Path
) -> None:
    server.faults = Faults(rate=0.6, kinds=("429", "503"), seed=3, retry_after="0")
    model = embedder(server, limits=EmbeddingLimits(5, 8191, None))
    texts = [f"a note about topic {i}" for i in range(40)]
    TextVectors(model, tmp_path).ensure(texts)
    assert sum(server.attempts.values()) > 8  # faults were met and retried
    assert server.embedded == Counter(texts)
    model.close()


def test_a_rerun_sends_nothing_and_a_second_process_waits_for_the_first(server: OpenAIServer, tmp_path: Path) -> None:
    texts = [f"memory unit {i}" for i in range(30)]
    first = embedder(server)
    TextVectors(first, tmp_path).ensure(texts)
    server.reset_counters()
    again = embedder(server)
    source = TextVectors(again, tmp_path)
    assert source.ensure(texts) == 0 and source.vectors(texts).shape == (30, 1536)
    assert server.total_requests == 0
    first.close()
    again.close()


# -- the rankers ------------------------------------------------------------------------


class _Table:
    """A vectors source from a fixed table: the rankers' arithmetic checked by hand."""

    name = "table"

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def ensure(self, texts: object) -> int:
        return 0

    def vectors(self, texts: list[str]) -> np.ndarray:
        return np.asarray([self.table[t] for t in texts], dtype=np.float32)


def _tiny_history() -> object:
    question = next(q for q in load_dataset(TINY).questions if not q.is_abstention)
    return build_history(question)


def test_dense_ranks_by_cosine_ties_to_the_newer_unit_and_hybrid_fuses_by_rrf() -> None:
    history = _tiny_history()
    units = history.units  # type: ignore[attr-defined]
    n = len(units)
    rng = np.random.default_rng(1)
    table = {u.content: list(rng.normal(size=4)) for u in units}
    table[history.question.question] = [1.0, 0.0, 0.0, 0.0]  # type: ignore[attr-defined]
    # two units with the same direction tie: the newer one goes first
    table[units[0].content] = table[units[1].content] = [2.0, 0.0, 0.0, 0.0]
    source = _Table(table)
    dense = Dense(source)
    assert dense.name == "dense:table"
    state = dense.prepare(history)  # type: ignore[arg-type]
    store = np.ones(n, dtype=bool)
    ranked = dense.rank(history, store, n, state)  # type: ignore[arg-type]
    if units[0].content != units[1].content:
        assert ranked[:2] == [1, 0]
    cos = [table[u.content][0] / np.linalg.norm(table[u.content]) for u in units]
    assert all(cos[a] >= cos[b] - 1e-6 for a, b in itertools.pairwise(ranked))
    hybrid = Hybrid(source)
    index, sims = hybrid.prepare(history)  # type: ignore[arg-type]
    store[::3] = False
    got = hybrid.rank(history, store, 10, (index, sims))  # type: ignore[arg-type]
    lexical = rank(LexicalIndex.build(history), store, k=n)  # type: ignore[arg-type]
    dense_order = dense.rank(history, store, n, sims)  # type: ignore[arg-type]
    fused = {p: 1 / (RRF_K + i + 1) for i, p in enumerate(dense_order)}
    for i, p in enumerate(lexical):
        fused[p] += 1 / (RRF_K + i + 1)
    expected = sorted(fused, key=lambda p: (-fused[p], -p))[:10]
    assert got == expected and all(store[p] for p in got)


def test_the_texts_embedded_ahead_are_the_audits_texts() -> None:
    dataset = load_dataset(TINY)
    for granularity in Granularity:
        for q in dataset.questions:
            history = build_history(q, granularity)
            assert unit_contents(q, granularity) == [u.content for u in history.units]
            assert has_gold(q, granularity) == bool(history.gold)
    config = AuditConfig(questions=4)
    chosen = audited_questions(dataset, config)
    assert len(chosen) == 4
    texts = audited_texts(dataset, config)
    assert set(texts) == {t for q in chosen for t in [q.question, *unit_contents(q)]}


# -- the grid through the plugin ------------------------------------------------------------

GRID_ARGS = SMALLEST_GRID




def _distinct_texts() -> Counter[str]:
    return Counter(t for t in audited_texts(load_dataset(TINY), AuditConfig()) if t)


def _embeddings_check(project: pytest.Pytester) -> dict[str, Any]:
    summary = json.loads((project.path / "restore-report" / "summary.json").read_text())
    result: dict[str, Any] = summary["run"]["checks"]["embeddings"]["result"][f"openai:{MODEL}"]
    return result


def _run(project: pytest.Pytester, server: OpenAIServer, cache: Path, *extra: str) -> pytest.RunResult:
    return project.runpytest_inprocess(
        *GRID_ARGS, f"--restore-ranker=hybrid:openai:{MODEL}", f"--restore-base-url={server.base_url}",
        f"--restore-cache={cache}", *extra,
    )


def test_a_grid_embeds_each_distinct_text_once_and_a_rerun_sends_nothing(
    project: pytest.Pytester, server: OpenAIServer, tmp_path: Path
) -> None:
    result = _run(project, server, tmp_path / "cache", "-p", "no:xdist")
    assert result.ret == 0, result.outlines[-30:]
    assert server.embedded == _distinct_texts()  # every text the audit ranks, once
    records = (project.path / "restore-report" / "records.jsonl").read_text()
    assert f'"ranker": "hybrid:openai:{MODEL}"' in records
    said = _embeddings_check(project)
    assert said["distinct_texts"] == said["embedded_this_run"] == len(_distinct_texts()) and said["truncated"] == 0
    assert said["dimensions"] == 1536 and said["store_bytes"] == len(_distinct_texts()) * (1536 + 4 + 16)
    assert "## Embeddings" in (project.path / "restore-report" / "report.md").read_text()
    server.reset_counters()
    again = _run(project, server, tmp_path / "cache", "-p", "no:xdist")
    assert again.ret == 0 and server.total_requests == 0
    assert _embeddings_check(project)["embedded_this_run"] == 0


def test_an_xdist_grid_sends_no_text_twice(project: pytest.Pytester, server: OpenAIServer, tmp_path: Path) -> None:
    result = _run(project, server, tmp_path / "cache", "-n", "2")
    assert result.ret == 0, result.outlines[-30:]
    assert server.received_inputs == _distinct_texts()


@pytest.mark.parametrize("mode", ["401-echo-key", "echo-key"])
def test_a_key_the_server_echoes_lands_in_no_file(
    project: pytest.Pytester, server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.mode = mode
    result = _run(project, server, tmp_path / "cache", "-p", "no:xdist")
    assert result.ret == (1 if mode == "401-echo-key" else 0), result.outlines[-20:]
    text = "\n".join(result.outlines + result.errlines)
    assert KEY not in text
    for root in (project.path, tmp_path / "cache"):
        for path in root.rglob("*"):
            if path.is_file():
                assert KEY.encode() not in path.read_bytes(), path


def test_a_failed_embedding_call_fails_the_run_in_one_line(
    project: pytest.Pytester, server: OpenAIServer, tmp_path: Path
) -> None:
    server.faults = Faults(rate=1.0, kinds=("500",), max_per_request=None)
    result = _run(project, server, tmp_path / "cache", "-p", "no:xdist", "--restore-max-tries=2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = "\n".join(result.outlines + result.errlines)
    said = f"embedder openai:{MODEL}: failed after 2 tries: HTTP 500: injected 500"
    kept = f" (0 texts' vectors kept; a rerun sends the other {len(_distinct_texts())})"
    # said once, as the run's stop before its grid (not twice as pytest's Exit)
    assert [line for line in result.outlines + result.errlines if said in line] == [
        f"restore: run stopped before the grid: {said}{kept}"
    ], text[-3000:]
    assert "Traceback" not in text and not (project.path / "restore-report").exists()
    assert not os.path.exists(project.path / "restore-report.partial")


def test_the_compiled_bag_of_word_vectors_is_the_plain_sum() -> None:
    from pytest_restore.memory.kernels import weighted_row_sums

    rng = np.random.default_rng(2)
    table = rng.normal(size=(30, 8)).astype(np.float32)
    starts = np.array([0, 3, 3, 7], dtype=np.int64)  # the middle text has no words
    ids = rng.integers(0, 30, size=7).astype(np.int64)
    weights = rng.random(7).astype(np.float32)
    expected = np.stack([(weights[a:b, None] * table[ids[a:b]]).sum(axis=0) for a, b in itertools.pairwise(starts)])
    assert np.allclose(weighted_row_sums(starts, ids, weights, table), expected, atol=1e-5)


def test_rankers_of_one_audit_share_each_cells_stores_and_match_their_own_audits(tmp_path: Path) -> None:
    from pytest_restore.audit.run import Audit
    from pytest_restore.memory.eviction import default_registry
    from pytest_restore.memory.retrieval import Bm25Lite
    from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer

    dataset = load_dataset(TINY)
    config = AuditConfig(budgets=(300,))
    vectors = TextVectors(FakeEmbedder(), tmp_path)

    def audit(*rankers: object) -> Audit:
        return Audit(dataset, config, reader=FakeReader(), judge=FakeJudge(), scorer=FakeScorer(), rankers=rankers)  # type: ignore[arg-type]

    both = audit(Bm25Lite(), Hybrid(vectors))
    policy = default_registry()["random"]
    calls = Counter[str]()
    evict = both.evict

    def counted(*args: object, **kwargs: object) -> object:
        calls["evict"] += 1
        return evict(*args, **kwargs)  # type: ignore[arg-type]

    both.evict = counted  # type: ignore[method-assign]
    lexical = both.run_cell(policy, 300)
    fused = both.run_cell(policy, 300, ranker="hybrid:fake")
    assert calls["evict"] == len(both.questions) * len(config.seeds)  # evicted once for both rankers
    assert {r.ranker for r in lexical.records} == {"bm25-lite"} and {r.ranker for r in fused.records} == {"hybrid:fake"}
    assert lexical.records == audit(Bm25Lite()).run_cell(policy, 300).records
    assert fused.records == audit(Hybrid(vectors)).run_cell(policy, 300).records


# -- hostile embeddings servers (issue 32): what was paid for is kept, every wait has its deadline ------


def _texts(n: int, tag: str = "text") -> list[str]:
    return [f"{tag} {i}: the kettle, the garden and the library" for i in range(n)]


def _within(seconds: float, call: Any) -> Any:
    """``call()`` in a thread, failing the test if it has not returned within ``seconds``."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("ok", call()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert out, f"did not return within {seconds} s"
    return out[0]


def test_a_refused_request_keeps_the_other_requests_vectors_and_a_rerun_sends_only_the_rest(
    server: OpenAIServer, tmp_path: Path
) -> None:
    texts = _texts(42)
    server.refuse_input = texts[40]  # in the last of seven requests of six
    vectors = TextVectors(embedder(server, limits=EmbeddingLimits(6, 512)), tmp_path)
    with pytest.raises(EmbeddingError) as raised:
        vectors.ensure(texts)
    message = str(raised.value)
    assert "\n" not in message and "HTTP 413 (not retried): Request Entity Too Large" in message
    assert message.endswith("(36 texts' vectors kept; a rerun sends the other 6)")
    assert server.embedded == Counter(texts[:36])  # six requests answered, each paid for once
    server.refuse_input = None
    server.reset_counters()
    again = TextVectors(embedder(server, limits=EmbeddingLimits(6, 512)), tmp_path)
    assert again.ensure(texts) == 6
    assert server.received_inputs == Counter(texts[36:])  # only what the first run could not get
    np.testing.assert_allclose(again.vectors(texts), vectors.store.vectors(texts), atol=0)


def test_a_failing_embedder_stops_at_its_first_failed_request(server: OpenAIServer, tmp_path: Path) -> None:
    server.faults = Faults(rate=1.0, kinds=("500",), max_per_request=None)
    vectors = TextVectors(embedder(server, limits=EmbeddingLimits(6, 512), max_tries=3), tmp_path)
    outcome, error = _within(20, lambda: vectors.ensure(_texts(42)))
    assert outcome == "raised" and isinstance(error, EmbeddingError)
    assert "failed after 3 tries: HTTP 500: injected 500" in str(error)
    assert server.total_requests == 3  # one request's tries; the six others were never sent (was 21)


def test_an_embeddings_server_that_never_answers_stops_the_run_within_its_deadline(
    server: OpenAIServer, tmp_path: Path
) -> None:
    server.mode = "hang"
    said: list[str] = []
    vectors = TextVectors(embedder(server, limits=EmbeddingLimits(6, 512), timeout=0.3), tmp_path, say=said.append)
    outcome, error = _within(15, lambda: vectors.ensure(_texts(42)))  # was 7 requests x 6 tries x 0.3 s, then more
    assert outcome == "raised" and isinstance(error, EmbeddingError)
    assert "6 requests in a row got no answer within 0.3s (--restore-timeout)" in str(error)
    assert server.total_requests <= 7
    assert said == [
        (f"embedding 42 distinct texts with openai:{MODEL} (each request answered within 0.3s or sent again in "
         "halves; 6 unanswered in a row stop the run) ...")
    ]


def test_a_request_slower_than_the_timeout_is_split_rather_than_sent_whole_again(
    server: OpenAIServer, tmp_path: Path
) -> None:
    # 64 texts: 3.2 s; 32: 1.6 s (over the timeout: a server slowed by load only splits more); 16: 0.8 s,
    # 0.75 s inside it, so a loaded machine still answers 16 in time and never resends a single text
    # (0.42 s inside it failed at load 7: six 16-text requests in a row unanswered stopped the run)
    server.embed_seconds_per_input = 0.05
    texts = _texts(64, "slow")
    model = embedder(server, limits=EmbeddingLimits(64, 512), timeout=1.55)
    outcome, got = _within(30, lambda: model.embed(texts))
    assert outcome == "ok"
    np.testing.assert_allclose(got, FakeEmbedder(1536).embed(texts), atol=1e-6)
    sizes = Counter(len(entry.body["input"]) for entry in server.log if entry.body)
    assert sizes[64] == 1 and sizes[32] == 2 and model.stats.split >= 3  # 64 -> 32 + 32 -> 16 + ... (load: smaller)
    assert set(server.attempts.values()) == {1}  # no request sent whole a second time
    said = render_embeddings_md({f"openai:{MODEL}": {
        "distinct_texts": 64, "embedded_this_run": 64, "truncated": 0, "requests": 4, "tokens": 0,
        "dimensions": 1536, "store_bytes": 0, "split": 3,
    }})
    assert said.endswith(
        f"openai:{MODEL}: 3 requests took longer than the timeout and were sent again as two halves each "
        "(rather than whole), until the server answered in time.\n"
    )


@pytest.mark.parametrize("mode", EMBED_MODES)
def test_a_vector_no_model_gives_is_refused_in_one_line(server: OpenAIServer, mode: str) -> None:
    server.embed_mode = mode
    with pytest.raises(EmbeddingError) as raised:
        embedder(server, max_tries=2).embed(_texts(8))
    expected = {
        "zero-vectors": "malformed response: an all-zero vector for input 4 (it would rank nothing)",
        "empty-vectors": "malformed response: empty vectors (0 dimensions)",
        "duplicate-index": "malformed response: index 0 given twice and none for index 7 (8 vectors for 8 inputs)",
    }[mode]
    assert str(raised.value) == f"embedder openai:{MODEL}: failed after 2 tries: {expected}"
