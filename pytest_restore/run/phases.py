"""The run's phases around the grid, as functions over its parts: what the controller does, in order.

Before the grid: the dry run's count (:func:`dry_run_phase`, which ends the
run), or the checks that run before it (``run/checks.py``: the embeddings,
the calibration gate, the batch rounds); the data prepared once for other
processes (:func:`prepare_data`). After it: the checks over the gathered
records (the judge audit, grid coverage, real model calls) and the report
(``run/report.py``). The plugin calls them from pytest's hooks, the
command line (``batch export``) calls the dry run directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pytest_restore.audit.run import count_tokens_ahead
from pytest_restore.memory.kernel_cache import cached_on_disk as kernels_cached_on_disk
from pytest_restore.models.providers import missing_key_problem
from pytest_restore.run.calls import dry_run, export_batch_round
from pytest_restore.run.embeddings import embedding_dry_run
from pytest_restore.run.parts import COMPILING, RunParts
from pytest_restore.timeline import phase


@dataclass(frozen=True)
class DryRun:
    """What a dry run says (its table), and the batch input files it wrote (``--restore-batch-export``)."""

    lines: list[str]
    written: list[Path]


def dry_run_phase(parts: RunParts) -> DryRun:
    """The dry run: the model calls the grid needs, what is cached, tokens and cost; no model is called.

    With ``--restore-batch-export`` the round's uncached requests are written as batch input files.
    """
    s = parts.settings
    problem = missing_key_problem(s.all_models(), s.base_url, parts.plan.registries.providers)
    lines = ([f"warning: {problem}"] if problem else []) + dry_run(parts)
    written: list[Path] = []
    if s.batch_export and s.batch_round:
        said, written = export_batch_round(parts)
        lines += said
    for vectors in parts.ranker_vectors():
        lines += embedding_dry_run(vectors, parts.dataset(), parts.audit_config())
    return DryRun(lines, written)


def prepare_data(parts: RunParts, workers: int) -> None:
    """Before other processes run the grid: the data generated and validated, its token counts made, once.

    The token counts are the same for every process: counted here into the
    prepared cache each one then reads, shared out over ``workers`` processes
    (they wait for their first items meanwhile).
    """
    if parts.settings.data is None:
        ready = f"{len(parts.dataset().questions)} questions ready"
    else:
        ready = f"{parts.plan.data.path().name} validated"  # as the plan was checked
    parts.say(ready)
    counting = f"counting the o200k tokens of {{:,}} distinct texts once, for every xdist worker (in up to {workers} processes) ...".format
    with phase("tokens counted and words profiled for the workers"):
        shared = count_tokens_ahead(parts.dataset(), parts.audit_config(), lambda n: parts.say(counting(n)), workers)
    if shared:
        parts.say("token counts ready in the prepared cache")
    if not kernels_cached_on_disk():
        parts.say(f"the xdist workers start by {COMPILING}")
    parts.say("the xdist workers prepare their histories ...")
