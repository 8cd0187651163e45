"""Under ``-n auto``: a small audit grid runs on one xdist worker.

Each worker that runs grid items prepares every history of the dataset (its
memory units, token counts and lexical index: ~2 s of CPU on the embedded
100 questions) before its first cell, and the cells themselves take well
under a second each with the fake models. On a small grid a second worker
therefore repeats more work than it takes over: measured on two cores, the
embedded default took longer with ``-n auto`` than serially. So with ``-n
auto`` (and xdist's default ``--dist load``) the grid items of a small grid
all go to the first worker; the other tests of the session are shared out as
usual. An explicit ``-n N`` is left as asked.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]  # xdist ships no type hints

from pytest_restore.plugin.options import SESSION_KEY


class SmallGridOnOneWorker(LoadScheduling):  # type: ignore[misc]
    """xdist's load scheduling, except that a small grid's items all go to one worker."""

    # xdist's attributes this class uses (set by LoadScheduling.__init__ and add_node_collection)
    collection: list[str] | None
    maxschedchunk: int | None
    pending: list[int]
    nodes: list[Any]
    node2pending: dict[Any, list[int]]
    node2collection: dict[Any, list[str]]

    def schedule(self) -> None:
        """The first distribution: the grid first, whole, to one worker; then as xdist does."""
        if self.collection is None and len(self.nodes) > 1 and self._check_nodes_have_same_collection():
            collection = next(iter(self.node2collection.values()))
            session = self.config.stash.get(SESSION_KEY, None)
            grid = [i for i, nodeid in enumerate(collection) if session is not None and nodeid in (session.selected or ())]
            if session is not None and grid and session.small_grid():
                self.collection = collection
                if self.maxschedchunk is None:
                    self.maxschedchunk = len(collection)
                chosen = set(grid)
                self.pending[:] = [i for i in range(len(collection)) if i not in chosen]
                first = self.nodes[0]
                self.node2pending[first].extend(grid)
                first.send_runtest_some(grid)
                session.say(
                    f"small grid ({len(grid)} items): all on one xdist worker "
                    "(a second one would prepare the same data again and finish later)"
                )
                for node in self.nodes:
                    self.check_schedule(node)
                return
        super().schedule()
