"""The embedded default dataset: a synthetic LongMemEval-S generated on first use.

It is deterministic from its settings and cached under the project's cache
directory (never committed). Several xdist workers may ask for it at once:
the first takes a file lock and generates it, writing to a temporary file
that is renamed into place, and the others wait for the lock and find it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from pytest_restore.synthetic.generator import generate, write_dataset

#: Size of the embedded default, chosen so that the full default grid with the
#: fake models runs in about two minutes on two cores.
EMBEDDED_QUESTIONS = 100
EMBEDDED_SEED = 0
EMBEDDED_TOKENS = 102_000


def generator_version() -> str:
    """A fingerprint of the generator's code: a changed generator never reuses an old cached file.

    The generator spans several modules (its logic, prose, questions, knobs and
    word lists); a change to any of them changes the fingerprint.
    """
    from pytest_restore.synthetic import generator, prose, questions, settings, vocabulary

    digest = hashlib.sha256()
    for module in (generator, prose, questions, settings, vocabulary):
        digest.update(Path(module.__file__ or "").read_bytes())
    return digest.hexdigest()[:12]


def embedded_path(cache_dir: Path, *, questions: int = EMBEDDED_QUESTIONS, seed: int = EMBEDDED_SEED) -> Path:
    """Where the embedded dataset of these parameters is (or will be) generated."""
    return cache_dir / f"synthetic-longmemeval-s-q{questions}-s{seed}-t{EMBEDDED_TOKENS}-g{generator_version()}.json"


def embedded_dataset(cache_dir: Path, *, questions: int = EMBEDDED_QUESTIONS, seed: int = EMBEDDED_SEED) -> Path:
    """The path of the embedded dataset, generating it if this is its first use."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = embedded_path(cache_dir, questions=questions, seed=seed)
    if path.exists():
        return path
    with open(cache_dir / (path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            write_dataset(generate(questions, seed, tokens_per_history=EMBEDDED_TOKENS), tmp)
            os.replace(tmp, path)
    return path
