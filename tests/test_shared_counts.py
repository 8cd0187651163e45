"""Processes that prepare the same file at once split its token counting, and never get a wrong count."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pytest_restore.data import tokens, units
from pytest_restore.data.dataset import Question, load_dataset
from pytest_restore.data.units import Granularity, build_histories, counts_file_name
from pytest_restore.models.cache import is_flocked, try_flock
from pytest_restore.synthetic.generator import generate, write_dataset

# One preparing process: waits for the go file, then builds the histories with an
# encoder that is slow (so that two processes overlap) and counts what it encodes.
WORKER = """
import json, sys, time
from pathlib import Path
from pytest_restore.data import tokens
from pytest_restore.data.dataset import Question, load_dataset
from pytest_restore.data.units import build_histories

data, counts_file, go, out = sys.argv[1:5]
real = tokens.encoding()
encoded = []

class Slow:
    def encode_ordinary(self, text):
        encoded.append(text)
        time.sleep(0.002)
        return real.encode_ordinary(text)

tokens.encoding = lambda: Slow()
questions = [q for q in load_dataset(data).questions if not q.is_abstention]
while not Path(go).exists():
    time.sleep(0.002)
histories = build_histories(questions, counts_file=counts_file)
Path(out).write_text(json.dumps({"encoded": len(encoded), "sizes": [h.sizes.tolist() for h in histories]}))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("shared") / "data.json"
    write_dataset(generate(8, 5, tokens_per_history=5000), path)
    return path


def _fresh_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_COUNTER", tokens.TokenCounter())


def _reference(data: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    _fresh_memo(monkeypatch)
    questions = _evidence(data)
    sizes = [h.sizes.tolist() for h in build_histories(questions)]
    _fresh_memo(monkeypatch)
    return sizes


def _evidence(data: Path) -> list[Question]:
    return [q for q in load_dataset(data).questions if not q.is_abstention]


def test_two_processes_split_the_counting_and_agree(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = _reference(data, monkeypatch)
    counts_file = tmp_path / "prepared" / counts_file_name("x" * 64, Granularity.TURN)
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(data), str(counts_file), str(go), str(tmp_path / f"out{i}.json")], env=env)
        for i in range(2)
    ]
    time.sleep(1.5)  # both have imported and loaded the data by now (the go file holds them back)
    go.touch()
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    outs = [json.loads((tmp_path / f"out{i}.json").read_text()) for i in range(2)]
    assert [o["sizes"] for o in outs] == [reference, reference]
    encoded = [o["encoded"] for o in outs]
    total = len(units.distinct_texts(_evidence(data)))
    assert all(0 < n < total for n in encoded), (encoded, total)  # each counted a part, neither all
    assert sum(encoded) >= total
    # what is left: the whole counts file, no shard or lock files
    assert sorted(p.name for p in counts_file.parent.iterdir()) == [counts_file.name]


def test_a_shard_whose_holder_lets_go_unwritten_is_counted_by_the_waiter(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _reference(data, monkeypatch)
    counts_file = tmp_path / counts_file_name("y" * 64, Granularity.TURN)
    held = try_flock(counts_file.with_name(f"{counts_file.name}.shard03.lock"))  # a peer counting shard 3
    assert held is not None
    questions = _evidence(data)
    result: list[list[list[int]]] = []
    worker = threading.Thread(target=lambda: result.append([h.sizes.tolist() for h in build_histories(questions, counts_file=counts_file)]))
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive()  # it waits for the peer's shard rather than counting it too
    held.release()  # the peer dies without writing its shard (the kernel drops a dead process's flock alike)
    worker.join(timeout=60)
    assert result == [reference]
    assert not list(tmp_path.glob("*.shard*"))


def test_a_damaged_counts_or_shard_file_costs_time_not_counts(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = _reference(data, monkeypatch)
    counts_file = tmp_path / counts_file_name("z" * 64, Granularity.TURN)
    counts_file.write_bytes(b"not marshal")
    counts_file.with_name(f"{counts_file.name}.shard00").write_bytes(b"\x00garbage")
    questions = _evidence(data)
    # a well-formed shard file written for as many other texts (a different subset under the same name)
    texts = units.distinct_texts(questions)
    n = len(texts) * 2 // units.COUNT_SHARDS - len(texts) // units.COUNT_SHARDS  # shard 1's size
    other = [f"another text {i}" for i in range(n)]
    counts_file.with_name(f"{counts_file.name}.shard01").write_bytes(marshal.dumps((units._fingerprint(other), [999] * n)))
    assert [h.sizes.tolist() for h in build_histories(questions, counts_file=counts_file)] == reference
    assert units._read_counts(counts_file) is not None  # rewritten whole


def test_is_flocked_sees_a_held_lock_and_not_a_released_one(tmp_path: Path) -> None:
    path = tmp_path / "a.lock"
    assert not is_flocked(path)  # no file
    lock = try_flock(path)
    assert lock is not None
    assert is_flocked(path)
    assert try_flock(path) is None
    lock.release()
    assert not is_flocked(path)
    assert not path.exists()
