"""The memory libraries the audit knows by name: each policy (and ranker) registered lazily, from one table.

A library's adapter imports the library, which is an optional extra; a run
that does not name it must not pay for it (nor fail for its absence). So
each library is one :class:`Library` row of :data:`LIBRARIES` (its policy's
and ranker's ``module:Class``, its distribution, its import name, its pip
extra), and :func:`register_libraries` registers every row's names in the
run's registries *lazily* (:meth:`~pytest_restore.registry.Registry.register_lazy`):
the adapter's module is imported and its class made only when a run looks
the name up (``--restore-policies mem0``). A library that is not installed
then stops the run with one line: ``pip install 'pytest-restore[mem0]'``.

Library policies are opt-in, as the built-in memory systems are: a grid
runs them only when ``--restore-policies`` names them
(:data:`LIBRARY_POLICIES`). Adding a library is one row here.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_restore.memory.eviction import Policy, PolicyRegistry
from pytest_restore.memory.retrieval import Ranker, RankerRegistry


@dataclass(frozen=True)
class Library:
    """One memory library the audit adapts: its policy's name and class, its ranker's, what to install."""

    #: the policy's name (``--restore-policies``) and its class as ``module:Class``
    name: str
    policy: str
    #: the distribution whose version the report names, and the module it is imported as
    distribution: str
    module: str
    #: the pip extra that installs it (``pip install 'pytest-restore[EXTRA]'``)
    extra: str
    #: the library's own search as a ranker, ``module:Class`` (``None``: none); registered under ``name``
    ranker: str | None = None

    def missing(self) -> str | None:
        """Why the library cannot run here (not installed), in one line; ``None``: it can."""
        if importlib.util.find_spec(self.module) is None:
            return f"memory library {self.name!r} needs {self.distribution}: pip install 'pytest-restore[{self.extra}]'"
        return None


#: Every library the audit adapts (one row each).
LIBRARIES: tuple[Library, ...] = (
    Library("mem0", "pytest_restore.libraries.mem0:Mem0System", "mem0ai", "mem0", "mem0", ranker="pytest_restore.libraries.mem0:Mem0Ranker"),
)

#: langmem and cognee (``libraries/langmem.py``, ``libraries/cognee.py``; cognee is not in the dev extra).
LIBRARIES += (
    Library(
        "langmem", "pytest_restore.libraries.langmem:LangmemSystem", "langmem", "langmem", "langmem",
        ranker="pytest_restore.libraries.langmem:LangmemRanker",
    ),
    Library(
        "cognee", "pytest_restore.libraries.cognee:CogneeSystem", "cognee", "cognee", "cognee",
        ranker="pytest_restore.libraries.cognee:CogneeRanker",
    ),
)

#: graphiti (``libraries/graphiti.py``: graphiti-core on Kuzu in memory).
LIBRARIES += (
    Library(
        "graphiti", "pytest_restore.libraries.graphiti:GraphitiSystem", "graphiti-core", "graphiti_core", "graphiti",
        ranker="pytest_restore.libraries.graphiti:GraphitiRanker",
    ),
)


@dataclass(frozen=True)
class CallEstimate:
    """What a library's store asks its model per turn fed, as measured: the dry run's estimate before any call."""

    #: chat calls per turn fed
    chat_per_turn: float
    #: mean input and output tokens of one chat call (o200k_base, the chat format's overhead included;
    #: ``None``: not measured)
    tokens: tuple[int, int] | None
    #: where the figures come from
    source: str
    #: embeddings requests per turn fed and o200k_base tokens per request (``None``: not measured)
    embeddings: tuple[float, int] | None = None


#: Each library's chat calls per turn and tokens per call, measured through the run's gateway on the LoCoMo
#: fixture (``fixtures/locomo_tiny.json``, 30 turns) with the fake writer: the calls and their inputs are the
#: library's own prompts; the outputs are the fake writer's (a real model may write more). docs/LIBRARIES.md
#: has the table. cognee is not in the dev extra: its calls per turn are the ones docs/LIBRARIES.md measured
#: beside it, its tokens were not (its embeddings were, with cognee 1.6.5 on the whole fixture). An embeddings
#: request's tokens are its texts' o200k_base tokens, as the gateway counts them (the fake writer's texts: a real
#: model's may be longer).
CALL_ESTIMATES: dict[str, CallEstimate] = {
    "mem0": CallEstimate(1.77, (1207, 75), "mem0ai 1.0.11, LoCoMo fixture, fake writer", (0.83, 13)),
    "graphiti": CallEstimate(3.63, (1380, 44), "graphiti-core 0.31.2, LoCoMo fixture, fake writer", (3.57, 8)),
    "langmem": CallEstimate(1.00, (701, 58), "langmem 0.0.30, LoCoMo fixture, fake writer", (2.07, 29)),
    "cognee": CallEstimate(2.00, None, "cognee 1.6, LoCoMo fixture's second conversation, fake writer", (6.00, 34)),
}


#: The library policies' names: opt-in, run only when ``--restore-policies`` names them.
LIBRARY_POLICIES: frozenset[str] = frozenset(library.name for library in LIBRARIES)


def _maker(library: Library, target: str) -> Callable[[], Any]:
    """Import ``target`` (``module:Class``) and make it, once the library is known to be installed."""

    def make() -> Any:
        problem = library.missing()
        if problem is not None:
            raise ImportError(problem)
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)()

    return make


def register_libraries(policies: PolicyRegistry, rankers: RankerRegistry | None = None) -> None:
    """Register every library's policy (and ranker) lazily, beside what the registries hold (a name already
    taken, by a user's conftest or an entry point, is left as it is)."""
    for library in LIBRARIES:
        if library.name not in policies:
            policies.register_lazy(library.name, _maker(library, library.policy))
        if rankers is not None and library.ranker is not None and library.name not in rankers:
            rankers.register_lazy(library.name, _maker(library, library.ranker))


def library_of(policy: Policy | Ranker) -> Library | None:
    """The library row a policy or ranker object is the adapter of (``None``: not a library's)."""
    return next((library for library in LIBRARIES if library.name == policy.name), None)
