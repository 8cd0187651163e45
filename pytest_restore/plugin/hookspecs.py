"""Hooks pytest-restore adds to pytest."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_restore.data.errata import ErrataRegistry
    from pytest_restore.data.loaders import DatasetRegistry
    from pytest_restore.memory.eviction import PolicyRegistry
    from pytest_restore.memory.retrieval import RankerRegistry
    from pytest_restore.models.providers import ProviderRegistry
    from pytest_restore.stats.families import FamilyRegistry


@pytest.hookspec
def pytest_restore_register_policies(registry: PolicyRegistry, config: pytest.Config) -> None:
    """Add eviction policies (or memory-store adapters) to the audit.

    Implement it in a ``conftest.py`` (the root one, or the one beside the
    grid you run) or in a plugin, and call ``registry.register(MyPolicy())``.
    A registered policy joins the grid unless ``--restore-policies`` names
    the policies to run. A :class:`pytest_restore.memory.eviction.MemoryStore`
    subclass is registered the same way.
    """


@pytest.hookspec
def pytest_restore_register_rankers(registry: RankerRegistry, config: pytest.Config) -> None:
    """Add read-time rankers (retrievers) to the audit.

    Call ``registry.register(MyRanker())`` with a
    :class:`pytest_restore.memory.retrieval.Ranker` instance; select it with
    ``--restore-ranker NAME``. One ranker serves a whole run.
    """


@pytest.hookspec
def pytest_restore_register_providers(registry: ProviderRegistry, config: pytest.Config) -> None:
    """Add model providers: ``registry.register(MyProvider())``.

    A :class:`pytest_restore.models.providers.ModelProvider` named ``NAME`` serves
    every model spelled ``NAME:MODEL`` in ``--restore-reader``, ``--restore-judge``,
    ``--restore-scorer`` and the other model options. Called before the
    options are checked, so the names are validated against it.
    """


@pytest.hookspec
def pytest_restore_register_families(registry: FamilyRegistry, config: pytest.Config) -> None:
    """Add hypothesis families to the statistics pass: ``registry.register(Family(...))``.

    A :class:`pytest_restore.stats.families.Family` builds its tests from the
    engine; they are Holm-adjusted and decided as the built-ins are, land in
    ``hypotheses.json`` and ``summary.json`` under its name and get a section
    of ``report.md`` after the built-ins'. An unmet expectation fails the
    session and the grid items its ``cells`` name. The report CLI has no
    ``conftest.py``: it runs the built-ins and the ``pytest_restore.families``
    entry points only.
    """


@pytest.hookspec
def pytest_restore_register_datasets(registry: DatasetRegistry, config: pytest.Config) -> None:
    """Add dataset loaders: ``registry.register(MyLoader())``.

    A :class:`pytest_restore.data.loaders.DatasetLoader` reads one benchmark's
    file into questions, dates, answers, types, histories and gold. ``--restore-data``
    picks the first registered loader whose ``fits`` accepts the file (the
    built-ins ``longmemeval`` and ``locomo`` first); ``--restore-dataset NAME``
    forces one. Its ``budgets`` are the run's unless ``--restore-budgets`` names some.
    """


@pytest.hookspec
def pytest_restore_register_errata(registry: ErrataRegistry, config: pytest.Config) -> None:
    """Add corrections-file formats: ``registry.register(MyFormat())``.

    A :class:`pytest_restore.data.errata.ErrataFormat` reads one layout of
    corrections into the dataset's question ids and gold turns.
    ``--restore-errata FILE`` picks the first registered format whose ``fits``
    accepts the file (the built-in ``locomo-audit`` first);
    ``--restore-errata-format NAME`` forces one.
    """
