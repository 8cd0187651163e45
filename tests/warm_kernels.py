"""Compile the package's numba kernels into their disk cache: ``python tests/warm_kernels.py CACHE_DIR``.

On a clean checkout numba's cache is empty, and the suite starts some ten
processes at once (the xdist workers and the shared child runs), each of
which would compile the same kernels for itself: about 10 s of the suite's
CPU, measured in paired clean-clone runs. The xdist controller runs this
once, in the background, while its workers start (``conftest.py``), and they
wait for it before their first test. It runs the run core, without pytest, over the tiny fixture: every
built-in policy, a lexical and the dense and hybrid rankers, the ablations
and the control; whatever it misses is compiled by the process that needs it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grid_helpers import TINY  # this file's directory is on sys.path when it runs as a script

from pytest_restore.data.dataset import load_dataset
from pytest_restore.data.units import build_history
from pytest_restore.memory.eviction import EvictionContext, default_registry
from pytest_restore.memory.lexical import word_profiles
from pytest_restore.run.cells import grid_records
from pytest_restore.run.checks import embed_ahead
from pytest_restore.run.options import parse_args
from pytest_restore.run.parts import RunParts
from pytest_restore.run.plan import build_plan, default_registries


def warm(cache: Path) -> None:
    """Run a small grid of every built-in policy and ranker through the run core; the kernels are compiled as it goes."""
    registry = default_registry()
    policies = ",".join(registry)
    raw, _ = parse_args([
        f"--restore-data={TINY}", "--restore-budgets=300", f"--restore-policies={policies}",
        "--restore-rankers=bm25-lite,dense:fake,hybrid:fake", "--restore-seeds=0", "--restore-ablations",
        f"--restore-cache={cache}",
    ])
    parts = RunParts(build_plan(raw, default_registries(), "warm", cache, lambda _line: None), lambda _line: None)
    for vectors in parts.ranker_vectors():
        failed = embed_ahead(vectors, parts.dataset(), parts.audit_config())
        assert failed is None, failed
    grid_records(parts)
    # the kernels a grid's cells do not call: a policy's store alone (the checks, the memory systems)
    # and the vocabulary's table outgrowing its first size (the larger data files)
    history = build_history(load_dataset(TINY).questions[0])
    ctx = EvictionContext(history.question.question_id, importance={u.content: 5 for u in history.units})
    for name in registry:
        registry[name].retain(history.units, history.sizes, 300, ctx)
    word_profiles([" ".join(f"warm{i}word" for i in range(20_000))])


if __name__ == "__main__":
    warm(Path(sys.argv[1]))
