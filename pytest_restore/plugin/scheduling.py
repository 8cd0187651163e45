"""How xdist hands out the grid's items: work a process shares stays in one process.

Each worker that runs grid items prepares every history of the dataset (its
memory units, token counts and lexical index) before its first cell, and
keeps what it computed for the cells after. Two rules follow, both on top of
xdist's own ``--dist load``:

- **Cells that share a scorer go to one worker.** A policy that ranks units by
  an importance score (``needs_importance``) scores every distinct unit
  content once per process, whatever the budget; spread over two workers, the
  scoring (model calls, or the fake scorer's pass over every unit) would be
  done twice. Those cells are sent first, together, to the first worker; the
  other cells are shared out as xdist's load scheduling shares them, so the
  second worker takes the rest of the grid meanwhile.
- **Under ``-n auto`` a small grid goes to one worker.** On a small grid a
  second worker repeats more preparation than it takes over cells (measured
  on two cores, the embedded default took longer with two workers than with
  one), so all its items go to the first worker; the other tests of the
  session are shared out as usual. An explicit ``-n N`` is left as asked.

:class:`GridScheduling` implements xdist's scheduling protocol
(``xdist.scheduler.protocol.Scheduling``) itself, with xdist's load
scheduling's rules for chunks, refills, crashed workers and shutdown; it
holds its own state rather than reaching into ``LoadScheduling``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import cycle
from typing import TYPE_CHECKING, Any

import pytest
from xdist.report import report_collection_diff  # type: ignore[import-untyped]  # xdist ships no type hints
from xdist.workermanage import parse_tx_spec_config  # type: ignore[import-untyped]

from pytest_restore.plugin.options import AUTO_KEY, SESSION_KEY

if TYPE_CHECKING:
    from pytest_restore.plugin.controller import ControllerSession

#: A worker as xdist's ``WorkerController`` (untyped): ``send_runtest_some``, ``shutdown``, ``shutting_down``, ``gateway``.
Node = Any


class GridScheduling:
    """xdist's scheduling protocol under ``--dist load``, with the grid's shared work kept in one worker."""

    def __init__(self, config: pytest.Config, log: Any) -> None:
        self.config = config
        self.log = log.loadsched
        #: how many workers are expected to send a collection (``-n``)
        self.numnodes = len(parse_tx_spec_config(config))
        self.node2collection: dict[Node, list[str]] = {}
        #: each worker's items sent and not yet reported done (indexes into ``collection``)
        self.node2pending: dict[Node, list[int]] = {}
        #: the items no worker was sent yet
        self.pending: list[int] = []
        #: the one collection, once every worker sent the same
        self.collection: list[str] | None = None
        self.maxschedchunk: int | None = config.getoption("maxschedchunk")

    # -- the protocol's state --------------------------------------------------------------

    @property
    def nodes(self) -> list[Node]:
        """The workers taking part."""
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        """Whether every expected worker sent its collection."""
        return len(self.node2collection) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        """Whether every item ran (a worker's last item is still running when it is its only one)."""
        if not self.collection_is_completed or self.pending:
            return False
        return all(len(pending) < 2 for pending in self.node2pending.values())

    @property
    def has_pending(self) -> bool:
        """Whether an item is still to be sent or to finish."""
        return bool(self.pending) or any(self.node2pending.values())

    # -- workers and their collections -------------------------------------------------------

    def add_node(self, node: Node) -> None:
        """A worker is up: it will be sent items."""
        assert node not in self.node2pending
        self.node2pending[node] = []

    def add_node_collection(self, node: Node, collection: Sequence[str]) -> None:
        """A worker's collection (one that differs from the scheduled collection is logged and ignored)."""
        assert node in self.node2pending
        if self.collection_is_completed and self.collection is not None and list(collection) != self.collection:
            first = next(iter(self.node2collection))
            self.log(report_collection_diff(self.collection, collection, first.gateway.id, node.gateway.id))
            return
        self.node2collection[node] = list(collection)

    def remove_node(self, node: Node) -> str | None:
        """A worker is gone: its unfinished items go back to the others; the item it crashed in, if any."""
        pending = self.node2pending.pop(node)
        if not pending:
            return None
        assert self.collection is not None
        crashed = self.collection[pending.pop(0)]
        self.pending.extend(pending)
        for other in self.node2pending:
            self.check_schedule(other)
        return crashed

    # -- items ----------------------------------------------------------------------------

    def mark_test_complete(self, node: Node, item_index: int, duration: float = 0) -> None:
        """A worker finished an item: send it more when it runs low."""
        self.node2pending[node].remove(item_index)
        self.check_schedule(node, duration=duration)

    def mark_test_pending(self, item: str) -> None:
        """An item to run again (first)."""
        assert self.collection is not None
        self.pending.insert(0, self.collection.index(item))
        for node in self.node2pending:
            self.check_schedule(node)

    def remove_pending_tests_from_node(self, node: Node, indices: Sequence[int]) -> None:
        """Not asked under ``--dist load`` (xdist's load scheduling does not take it either)."""
        raise NotImplementedError

    def check_schedule(self, node: Node, duration: float = 0) -> None:
        """Send a worker more items when it runs low, as xdist's load scheduling does; none left: shut it down."""
        if node.shutting_down:
            return
        if not self.pending:
            node.shutdown()
            return
        per_node = len(self.pending) // len(self.node2pending)
        low, high = max(2, per_node // 4), max(2, per_node // 2)
        pending = self.node2pending[node]
        if len(pending) < low and not (duration >= 0.1 and len(pending) >= 2):
            assert self.maxschedchunk is not None
            self._send(node, min(high - len(pending), max(2 - len(pending), self.maxschedchunk)))

    def schedule(self) -> None:
        """The first distribution (a group of grid items to the first worker, the rest in chunks); later, refills."""
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        collections = list(self.node2collection.items())
        first_node, first = collections[0]
        differ = [
            diff for node, other in collections[1:]
            if (diff := report_collection_diff(first, other, first_node.gateway.id, node.gateway.id))
        ]
        if differ:
            for diff in differ:
                self.log(diff)
                self.config.hook.pytest_collectreport(
                    report=pytest.CollectReport(nodeid=first_node.gateway.id, outcome="failed", longrepr=diff, result=[])
                )
            return
        self.collection = first
        if self.maxschedchunk is None:
            self.maxschedchunk = len(first)
        group, why = self._first_group(first) if len(self.nodes) > 1 else ([], "")
        chosen = set(group) if len(group) > 1 else set()
        self.pending[:] = [i for i in range(len(first)) if i not in chosen]
        if chosen:
            lead, *others = self.nodes
            self.node2pending[lead].extend(group)
            lead.send_runtest_some(group)
            session: ControllerSession = self.config.stash[SESSION_KEY]  # the scheduler runs on the controller
            session.say(f"{why}: {len(group)} grid items on one xdist worker")
            chunk = max(2, min(len(self.pending) // (4 * len(self.nodes)), self.maxschedchunk))
            for node in others:
                self._send(node, chunk)
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not first:
            return
        if len(self.pending) < 2 * len(self.nodes):
            nodes = cycle(self.nodes)
            for _ in range(len(self.pending)):
                self._send(next(nodes), 1)
        else:
            chunk = max(min(len(first) // len(self.node2pending) // 4, self.maxschedchunk), 2)
            for node in self.nodes:
                self._send(node, chunk)
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def _first_group(self, collection: list[str]) -> tuple[list[int], str]:
        """Indexes of the items the first worker takes, and why; empty when xdist's own order is as good."""
        session: ControllerSession | None = self.config.stash.get(SESSION_KEY, None)
        if session is None or not session.gathered.selected:
            return [], ""
        grid = [i for i, nodeid in enumerate(collection) if nodeid in session.gathered.selected]
        if self.config.stash.get(AUTO_KEY, False) and session.small_grid():
            return grid, "small grid (a second worker would prepare the same data again and finish later)"
        plan = session.parts.plan
        scored = {c.id for c in plan.cells if plan.registries.policies[c.policy].needs_importance}
        group = [i for i in grid if collection[i].rsplit("[", 1)[-1][:-1] in scored]
        return group, "cells that share the importance scorer (each unit scored once)"

    def _send(self, node: Node, count: int) -> None:
        """Send a worker the next ``count`` pending items."""
        items = self.pending[:count]
        if items:
            del self.pending[:count]
            self.node2pending[node].extend(items)
            node.send_runtest_some(items)
