"""A policy's store of one history: one pass of its eviction loop, or a memory system's view of what it holds.

:meth:`Stores.evict` runs a policy over a question's history once (the store, and when each unit left);
:meth:`Stores.held` feeds a memory system each history once per budget and seed and reads what it holds
as units (:meth:`Stores.held_each`: a library's histories fed side by side, up to the run's concurrency); :meth:`Stores.score_ties` counts a scored policy's ties.
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace

import numpy as np

from pytest_restore.audit.calls import ModelCalls
from pytest_restore.audit.outcomes import StoreView
from pytest_restore.audit.questions import Prepared
from pytest_restore.data.units import History
from pytest_restore.libraries.guest import CallTally, library_version
from pytest_restore.libraries.registry import library_of
from pytest_restore.memory.eviction import Eviction, EvictionContext, Mask, Policy, ScoredPolicy
from pytest_restore.memory.memories import memory_view
from pytest_restore.memory.systems import MemorySystem, SystemFigures


class Stores(ModelCalls):
    """A policy's store of each history (a part of :class:`~pytest_restore.audit.run.Audit`)."""

    def retain(self, policy: Policy, prepared: Prepared, budget: int, seed: int, importance: Mapping[str, int]) -> Mask:
        """``S_P`` of one question's history, checked for shape and budget (:meth:`evict`'s store)."""
        return self.evict(policy, prepared, budget, seed, importance).mask

    def evict(
        self, policy: Policy, prepared: Prepared, budget: int, seed: int, importance: Mapping[str, int]
    ) -> Eviction:
        """One pass of ``policy`` over a question's history: ``S_P``, checked for shape and budget, and
        when each unit left where the pass records it (:meth:`Policy.evict`).

        The policy sees the history's id (the question's own, or the
        conversation it shares): every question of one history gets the same store.
        """
        history = prepared.history
        ctx = EvictionContext(question_id=history.question.history_key, seed=seed, importance=importance)
        eviction = policy.evict(history.units, history.sizes, budget, ctx)
        mask = np.asarray(eviction.mask)
        if mask.shape != (len(history.units),) or mask.dtype != np.bool_:
            raise TypeError(
                f"policy {policy.name!r} returned a store of shape {mask.shape} and dtype {mask.dtype}; "
                f"expected a boolean mask over {len(history.units)} units"
            )
        if policy.budgeted and int(history.sizes[mask].sum()) > budget:
            raise ValueError(
                f"policy {policy.name!r} kept {int(history.sizes[mask].sum())} tokens of "
                f"{history.question.question_id} under a budget of {budget}"
            )
        return replace(eviction, mask=mask)

    def held(
        self, policy: Policy, prepared: Prepared, budget: int, seed: int, importance: Mapping[str, int]
    ) -> tuple[Prepared, Mask]:
        """A memory system's store of one question: the history extended by its derived memories, and the held mask.

        The system is fed each history once per (budget, seed) in this
        process (questions sharing a history share what it holds); each
        question gets its own view of it (its gold, its rankers' states).
        """
        history = prepared.history
        key = _view_key(policy, budget, history, seed)
        failed = self._view_failures.pop(key, None)
        if failed is not None:  # fed beside others (held_each): its failure is raised where it would have been
            raise failed
        entry = self._views.get(key)
        if entry is None or entry.policy is not policy:
            entry = self._views[key] = self._feed(policy, policy, history, budget, seed, importance)
        own = History(history.question, history.granularity, entry.view.units, entry.view.sizes, history.gold)
        for ranker in self.rankers.values():
            ranker.prepare_all([own])  # a dense ranker embeds the derived memories' texts here
        return replace(self._prepare(own, entry.sources), lost=entry.lost), entry.mask

    def library_share(self, policy: Policy, prepared: Prepared, budget: int, seed: int, served: int) -> tuple[float, float, bool] | None:
        """The question's share of the tokens (in, out) a memory library's store of its history spent on chat calls
        through the run's gateway, and whether some are estimated (``None``: no library's store).

        A store is built per budget and seed and serves the ``served`` audited questions of its history: each
        gets an equal share, so a cell's shares add up to what its stores cost once each.
        """
        entry = self._views.get((id(policy), budget, prepared.question.history_key, seed))
        if entry is None or entry.tokens is None:
            return None
        tokens_in, tokens_out, estimated = entry.tokens
        return round(tokens_in / max(1, served), 2) + 0.0, round(tokens_out / max(1, served), 2) + 0.0, estimated

    def held_each(
        self, policy: Policy, questions: Sequence[Prepared], budget: int, seed: int, importance: Mapping[str, int]
    ) -> Iterator[tuple[Prepared, Mask]]:
        """:meth:`held` for each question in turn, the histories fed up to ``width`` at once.

        Feeding a history is sequential (each unit after the last), but
        histories are independent: a system that says its stores may be
        built side by side (:attr:`MemorySystem.parallel_stores`, a library
        whose stores wait on model calls) is fed the next ``width`` histories
        not yet held, each by its own copy on a thread of its own, where
        ``width`` is the lesser of that and the run's concurrency
        (:attr:`AuditConfig.concurrency`); the questions then read them in
        order, as they would one at a time. A history that failed raises at
        its first question, as it would have fed alone.
        """
        width = min(policy.parallel_stores, self.config.concurrency) if isinstance(policy, MemorySystem) else 1
        for i, p in enumerate(questions):
            key = _view_key(policy, budget, p.history, seed)
            entry = self._views.get(key)
            if width > 1 and key not in self._view_failures and (entry is None or entry.policy is not policy):
                self._feed_side_by_side(policy, questions[i:], budget, seed, importance, width)
            yield self.held(policy, p, budget, seed, importance)

    def _feed_side_by_side(
        self, policy: Policy, questions: Sequence[Prepared], budget: int, seed: int, importance: Mapping[str, int],
        width: int,
    ) -> None:
        """Feed the first ``width`` histories of ``questions`` not yet held, each by a copy of ``policy`` on its own
        thread (their views are kept in order; a failure is kept for :meth:`held` to raise)."""
        pending: dict[tuple[int, int, str, int], History] = {}
        for p in questions:
            key = _view_key(policy, budget, p.history, seed)
            entry = self._views.get(key)
            if key in pending or key in self._view_failures or (entry is not None and entry.policy is policy):
                continue
            pending[key] = p.history
            if len(pending) == width:
                break
        done: dict[tuple[int, int, str, int], StoreView | BaseException] = {}

        def feed(key: tuple[int, int, str, int], history: History) -> None:
            try:
                done[key] = self._feed(copy.copy(policy), policy, history, budget, seed, importance, alone=False)
            except BaseException as err:  # noqa: BLE001 - kept, and raised by held() at its first question
                done[key] = err

        # daemon threads: after Ctrl-C the run ends without waiting for a store still being built (the run's
        # interrupt ends its calls: models.interrupt); joined in short waits, so Ctrl-C reaches the main thread
        threads = [
            threading.Thread(target=feed, args=(key, history), name=f"restore-{policy.name}-store", daemon=True)
            for key, history in pending.items()
        ]
        window = CallTally()  # the gateway's calls are the window's stores', not one store's
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():
                thread.join(0.25)
        built = [r for r in done.values() if isinstance(r, StoreView)]
        chat = {id(r): sum(n for kind, n in r.figures.calls.items() if kind != "embeddings") for r in built}
        priced = library_of(policy) is not None and (window.calls() or not any(sum(r.figures.calls.values()) for r in built))
        tokens_in, tokens_out, estimated = window.tokens()
        embedded = window.embeddings()
        asked = {id(r): r.figures.calls.get("embeddings", 0) for r in built}
        for key in pending:
            result = done[key]
            if isinstance(result, StoreView):
                if priced:  # each store's share of the window's tokens by its own chat calls (its adapter counts them)
                    part = chat[id(result)] / max(1, sum(chat.values()))
                    if embedded is not None and asked[id(result)]:  # and of its embedded tokens by its requests
                        result.figures.embedder = embedded[0]
                        result.figures.embedding_tokens = round(embedded[1] * asked[id(result)] / sum(asked.values()))
                    result = result._replace(tokens=(round(tokens_in * part), round(tokens_out * part), estimated > 0))
                self._views[key] = result
            elif isinstance(result, Exception):
                self._view_failures[key] = result
            else:
                raise result

    def _feed(
        self, system: Policy, policy: Policy, history: History, budget: int, seed: int, importance: Mapping[str, int],
        *, alone: bool = True,
    ) -> StoreView:
        """Feed ``history`` to ``system`` (``policy`` itself, or a copy of it) once and read what it holds.

        Touches nothing of the audit's but what it reads: it may run on a thread beside others (``alone=False``:
        the gateway's calls are then not this store's alone, and its tokens are the caller's to set).
        """
        ctx = EvictionContext(question_id=history.question.history_key, seed=seed, importance=importance)
        lost: Mapping[int, int | None] | None = None
        figures = SystemFigures(stores=1, units=len(history.units))
        tokens: tuple[int, int, bool] | None = None
        if isinstance(system, MemorySystem):  # traced as it is fed: when each unit lost its last citing memory
            library = library_of(policy)
            tally, started = CallTally(), time.monotonic()
            held = system.trace(history.units, history.sizes, budget, ctx)
            seconds = time.monotonic() - started
            memories, lost = held.memories, held.lost
            account = system.figures()
            if account is not None:  # the system's own: its calls, what it rejected (stores and units are ours)
                figures = figures + replace(account, stores=0, units=0, held=0, held_tokens=0, ingest_seconds=0.0)
            if library is not None:  # the same three figures for every library, measured here, not by its adapter
                figures.ingest_seconds = seconds  # the store made and fed, its model calls among it
                figures.library = figures.library or f"{library.distribution} {library_version(library.distribution)}"
                if alone and (tally.calls() or not sum(figures.calls.values())):  # else its calls went elsewhere
                    tokens_in, tokens_out, estimated = tally.tokens()
                    tokens = (tokens_in, tokens_out, estimated > 0)
                    embedded = tally.embeddings()
                    if embedded is not None and figures.calls.get("embeddings"):
                        figures.embedder, figures.embedding_tokens = embedded
        else:
            memories = system.hold(history.units, history.sizes, budget, ctx)
        view, mask, sources = memory_view(history, memories)
        figures.held, figures.held_tokens = len(memories), int(view.sizes[mask].sum())
        return StoreView(policy, view, mask, sources, lost, figures, tokens)

    def score_ties(self, policy: Policy, prepared: Prepared, seed: int) -> tuple[int, int] | None:
        """A scored policy's ties on the question's history: its units, and those at its two most common scores.

        ``None`` for a policy that exposes no scores (:class:`ScoredPolicy`) and
        for one reading importance scores (their distribution is reported whole:
        ``record.importance_scores``). Once per history and seed.
        """
        history = prepared.history
        key = (policy.name, history.question.history_key, seed)
        if key not in self._ties:  # a policy without scores too: the protocol's check is slow, asked once
            if policy.needs_importance or policy.derived or not isinstance(policy, ScoredPolicy):
                self._ties[key] = None
            else:
                ctx = EvictionContext(question_id=history.question.history_key, seed=seed)
                scores = [float(s) for s in policy.unit_scores(history.units, ctx)]
                self._ties[key] = (len(scores), sum(n for _, n in Counter(scores).most_common(2)))
        return self._ties[key]


def _view_key(policy: Policy, budget: int, history: History, seed: int) -> tuple[int, int, str, int]:
    """Where a memory system's store of ``history`` is kept (:attr:`AuditBase._views`)."""
    return (id(policy), budget, history.question.history_key, seed)
