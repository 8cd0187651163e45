"""The shared texts file: what a worker takes from its controller equals what it would make, and a stale or
damaged file is never used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_restore.data import tokens
from pytest_restore.data.dataset import Question, load_dataset
from pytest_restore.data.units import Granularity, build_histories, counts_file_name
from pytest_restore.memory import eviction, kernels, lexical, shared_texts
from pytest_restore.memory.retrieval import LexicalIndex
from pytest_restore.memory.shared_texts import (
    SharedTextsError,
    read_shared,
    share_ahead,
    shared_texts_name,
    unit_texts,
    use_shared,
)
from pytest_restore.synthetic.generator import generate, write_dataset

SHA = "d" * 64


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> list[Question]:
    path = tmp_path_factory.mktemp("shared-texts") / "data.json"
    write_dataset(generate(6, 4, tokens_per_history=4000), path)
    return [q for q in load_dataset(path).questions if not q.is_abstention]


def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has counted and profiled nothing yet (its memos, vocabulary and shared profiles)."""
    monkeypatch.setattr(tokens, "_COUNTER", tokens.TokenCounter())
    for name, value in (("_TABLE", None), ("_VOCABULARY", {}), ("_WORDS", []), ("_PROFILES", {}), ("_SHARED", None)):
        monkeypatch.setattr(lexical, name, value)
    for name in ("_OVERLAPS", "_DENSITY_KEYS"):  # what its policies keep per history
        kept = getattr(eviction, name)
        monkeypatch.setattr(eviction, name, eviction._PerHistory(kept.make, kept.size, kept.max_bytes))
    monkeypatch.setattr(eviction, "_DENSITIES", {})


def _made_here(questions: list[Question]) -> tuple[list[list[int]], list[LexicalIndex], list[np.ndarray], list[list[dict[str, int]]]]:
    """Sizes, lexical indexes, redundancy overlaps and each unit's words as this process makes them."""
    histories = build_histories(questions)
    indexes = [LexicalIndex.build(h) for h in histories]
    overlaps = [eviction._overlaps(h.units)[0] for h in histories]
    profiles = [
        [{lexical.word_of(int(i)): int(c) for i, c in zip(p.ids, p.counts)} for p in lexical.word_profiles([u.content for u in h.units])]
        for h in histories
    ]
    return [h.sizes.tolist() for h in histories], indexes, overlaps, profiles


def _share(questions: list[Question], directory: Path) -> Path:
    counts_file = directory / counts_file_name(SHA, Granularity.TURN)
    assert share_ahead(questions, Granularity.TURN, SHA, directory, counts_file)
    return directory / shared_texts_name(SHA, Granularity.TURN, questions)


def test_a_worker_takes_counts_and_profiles_from_the_file_equal_to_its_own(
    questions: list[Question], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh(monkeypatch)
    sizes, indexes, overlaps, profiles = _made_here(questions)
    contents = unit_texts(questions, Granularity.TURN).contents
    densities = [eviction._fact_density_python(c) for c in contents]
    _fresh(monkeypatch)
    _share(questions, tmp_path)
    assert not share_ahead(questions, Granularity.TURN, SHA, tmp_path, tmp_path / "counts")  # made already: nothing to do
    _fresh(monkeypatch)  # a worker: nothing counted or profiled
    shared = use_shared(questions, Granularity.TURN, SHA, tmp_path)
    assert shared is not None

    def never(*args: object) -> object:
        raise AssertionError("a worker with the shared file encoded, profiled or scanned a unit text")

    monkeypatch.setattr(tokens, "_count_text", never)  # tiktoken's and the Python count alike
    monkeypatch.setattr(kernels, "profile_texts", never)
    monkeypatch.setattr(kernels, "fact_counts", never)
    assert [eviction.fact_density(c) for c in contents] == densities  # the control's scores, not scanned again
    histories = build_histories(questions, sizes=shared)
    assert [h.sizes.tolist() for h in histories] == sizes  # each unit's size read off the file
    for history, index, overlap, words in zip(histories, indexes, overlaps, profiles):
        built = LexicalIndex.build(history)
        assert np.array_equal(built.tf, index.tf) and np.array_equal(built.lengths, index.lengths)
        assert np.array_equal(eviction._overlaps(history.units)[0], overlap)
        mine = lexical.word_profiles([u.content for u in history.units])
        assert [{lexical.word_of(int(i)): int(c) for i, c in zip(p.ids, p.counts)} for p in mine] == words
    assert lexical._PROFILES == {}  # no profile object per text: read off the mapped arrays


def test_session_units_take_their_sizes_from_the_file_too(
    questions: list[Question], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh(monkeypatch)
    made = [h.sizes.tolist() for h in build_histories(questions, Granularity.SESSION)]
    _fresh(monkeypatch)
    assert share_ahead(questions, Granularity.SESSION, SHA, tmp_path, tmp_path / counts_file_name(SHA, Granularity.SESSION))
    _fresh(monkeypatch)
    shared = use_shared(questions, Granularity.SESSION, SHA, tmp_path)
    assert shared is not None

    def never(*args: object) -> object:
        raise AssertionError("a session unit's size was counted again")

    monkeypatch.setattr(tokens, "_count_text", never)
    assert [h.sizes.tolist() for h in build_histories(questions, Granularity.SESSION, sizes=shared)] == made


def test_the_file_is_keyed_by_data_granularity_and_questions(questions: list[Question]) -> None:
    name = shared_texts_name(SHA, Granularity.TURN, questions)
    assert name != shared_texts_name("e" * 64, Granularity.TURN, questions)
    assert name != shared_texts_name(SHA, Granularity.SESSION, questions)
    assert name != shared_texts_name(SHA, Granularity.TURN, questions[1:])


def _damaged(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "flipped":
        raw[-100] ^= 0x40  # a byte of the arrays: the CRC no longer matches
    elif how == "truncated":
        del raw[-64:]
    elif how == "not ours":
        raw[:8] = b"NOTOURS!"
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize(("how", "why"), [("flipped", "damaged"), ("truncated", "bytes, expected"), ("not ours", "not a shared")])
def test_a_damaged_file_is_never_used(
    questions: list[Question], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, why: str
) -> None:
    _fresh(monkeypatch)
    sizes = [h.sizes.tolist() for h in build_histories(questions)]
    _fresh(monkeypatch)
    path = _share(questions, tmp_path)
    _damaged(path, how)
    _fresh(monkeypatch)
    texts = unit_texts(questions, Granularity.TURN)
    with pytest.raises(SharedTextsError, match=why):
        read_shared(path, shared_texts._key(SHA, Granularity.TURN, questions), texts)
    assert use_shared(questions, Granularity.TURN, SHA, tmp_path) is None
    assert lexical._SHARED is None
    assert [h.sizes.tolist() for h in build_histories(questions)] == sizes  # prepared here instead
    # the controller's next run writes it again
    assert share_ahead(questions, Granularity.TURN, SHA, tmp_path, tmp_path / "counts")
    assert use_shared(questions, Granularity.TURN, SHA, tmp_path) is not None


def test_a_stale_file_is_never_used(questions: list[Question], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fresh(monkeypatch)
    path = _share(questions, tmp_path)
    # another run's file under this name (other questions or code): its key says so
    other = tmp_path / "other"
    _fresh(monkeypatch)
    other_path = _share(questions[1:], other)
    path.write_bytes(other_path.read_bytes())
    with pytest.raises(SharedTextsError, match="other data, questions or code"):
        read_shared(path, shared_texts._key(SHA, Granularity.TURN, questions), unit_texts(questions, Granularity.TURN))
    # the right key with rows for other texts (the same questions' texts changed): the rows' lengths say so,
    # and so do the numbers of units and of headers
    key = shared_texts._key(SHA, Granularity.TURN, questions[1:])
    texts = unit_texts(questions[1:], Granularity.TURN)
    for changed in (
        shared_texts.UnitTexts([t + "!" for t in texts.contents], texts.headers, texts.histories),
        shared_texts.UnitTexts(texts.contents, texts.headers, [(k, n + 1) for k, n in texts.histories]),
        shared_texts.UnitTexts(texts.contents, texts.headers[1:], texts.histories),
    ):
        with pytest.raises(SharedTextsError, match="rows for other texts"):
            read_shared(other_path, key, changed)
    _fresh(monkeypatch)
    assert use_shared(questions, Granularity.TURN, SHA, tmp_path) is None


def test_a_process_with_a_vocabulary_of_its_own_profiles_itself(
    questions: list[Question], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fresh(monkeypatch)
    _share(questions, tmp_path)
    _fresh(monkeypatch)
    lexical.word_profiles(["zebra quokka"])  # ids this process handed out first
    shared = use_shared(questions, Granularity.TURN, SHA, tmp_path)  # the sizes and counts still come from the file
    assert shared is not None and lexical._SHARED is None
    history = build_histories(questions, sizes=shared)[0]
    assert LexicalIndex.build(history).lengths.sum() > 0
