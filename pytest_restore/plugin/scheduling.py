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
  other cells are shared out as xdist does, so the second worker takes the
  rest of the grid meanwhile.
- **Under ``-n auto`` a small grid goes to one worker.** On a small grid a
  second worker repeats more preparation than it takes over cells (measured
  on two cores, the embedded default took longer with two workers than with
  one), so all its items go to the first worker; the other tests of the
  session are shared out as usual. An explicit ``-n N`` is left as asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]  # xdist ships no type hints

from pytest_restore.plugin.options import AUTO_KEY, SESSION_KEY

if TYPE_CHECKING:
    from pytest_restore.plugin.controller import ControllerSession


class GridScheduling(LoadScheduling):  # type: ignore[misc]
    """xdist's load scheduling, with the grid's shared work kept in one worker (module docstring)."""

    # xdist's attributes this class uses (set by LoadScheduling.__init__ and add_node_collection)
    collection: list[str] | None
    maxschedchunk: int | None
    pending: list[int]
    nodes: list[Any]
    node2pending: dict[Any, list[int]]
    node2collection: dict[Any, list[str]]

    def schedule(self) -> None:
        """The first distribution: a group of grid items to the first worker, the rest as xdist does."""
        if self.collection is None and len(self.nodes) > 1 and self._check_nodes_have_same_collection():
            collection: list[str] = next(iter(self.node2collection.values()))
            group, why = self._first_group(collection)
            if len(group) > 1:
                self._start_with(collection, group)
                session: ControllerSession = self.config.stash[SESSION_KEY]  # the scheduler runs on the controller
                session.say(f"{why}: {len(group)} grid items on one xdist worker")
                return
        super().schedule()

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

    def _start_with(self, collection: list[str], group: list[int]) -> None:
        """Send ``group`` to the first worker, then give every other worker a first chunk of the rest."""
        self.collection = collection
        if self.maxschedchunk is None:
            self.maxschedchunk = len(collection)
        chosen = set(group)
        self.pending[:] = [i for i in range(len(collection)) if i not in chosen]
        first, *others = self.nodes
        self.node2pending[first].extend(group)
        first.send_runtest_some(group)
        chunk = max(2, min(len(self.pending) // (4 * len(self.nodes)), self.maxschedchunk))
        for node in others:
            self._send_tests(node, chunk)
        for node in self.nodes:
            self.check_schedule(node)
