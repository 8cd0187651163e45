"""The grid: one cell (a policy at a budget, under a reader, with a ranker) per item, in the items' order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pytest_restore.memory.eviction import Policy
from pytest_restore.run.settings import RestoreSettings
from pytest_restore.stats.results import budget_label


@dataclass(frozen=True)
class CellSpec:
    """One grid item: a policy at a budget."""

    policy: str
    budget: int
    reader: str
    primary: bool = True
    #: the ranker the cell reads with (``None``: the run's one ranker)
    ranker: str | None = None
    #: how the item id names the ranker (``dense`` for ``dense:fake``; empty with one ranker)
    ranker_label: str = ""

    @property
    def id(self) -> str:
        """The item id in the report's words, e.g. ``fifo-80k`` (``fifo-80k-openai:gpt-5.4-mini`` for the
        robustness reader, ``fifo-80k-dense`` for a ranker of ``--restore-rankers``), so ``-k 8k``
        selects the 8k cells and not the 80k ones."""
        label = f"{self.policy}-{budget_label(self.budget)}"
        label += f"-{self.ranker_label}" if self.ranker_label else ""
        return label + ("" if self.primary else f"-{self.reader}")


def ranker_labels(rankers: Sequence[str]) -> dict[str, str]:
    """Each ranker's word in item ids: its family (``dense`` for ``dense:fake``) unless two share it, then its name."""
    families = [name.partition(":")[0] for name in rankers]
    return {name: family if families.count(family) == 1 else name for name, family in zip(rankers, families)}


def grid(settings: RestoreSettings, policies: Sequence[Policy]) -> list[CellSpec]:
    """The grid: every selected policy at every budget, under each ranker of ``--restore-rankers``.

    A cell's rankers are adjacent items, so xdist tends to hand them to one
    worker, which evicts the cell's stores once for all of them.
    """
    labels = ranker_labels(settings.rankers)
    return [
        CellSpec(p.name, b, reader, reader == settings.reader, ranker, labels.get(ranker or "", ""))
        for reader in settings.readers
        for p in policies
        for b in settings.budgets
        for ranker in (settings.rankers or (None,))
    ]
