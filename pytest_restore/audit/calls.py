"""The audit's model calls: each context read and judged, the oracle, importance scores, a memory system's writer.

Each distinct request is sent once (:class:`~pytest_restore.audit.memo.MemoModel`); a model's usage is
counted from the parts of the prompt where it reported none; a failed call is a
:class:`~pytest_restore.audit.outcomes.Failure`, kept until its record is made, never scored. The calls
that build a store (the scorer's, a writer's) are shared out over the questions they served
(:meth:`ModelCalls.memory_share`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from functools import partial

from pytest_restore.audit.memo import prompt_id_of, request_digest
from pytest_restore.audit.outcomes import Failure, Outcome
from pytest_restore.audit.questions import Prepared
from pytest_restore.audit.records import score_counts
from pytest_restore.audit.state import AuditBase
from pytest_restore.data.units import History, Unit
from pytest_restore.memory.eviction import Policy
from pytest_restore.memory.retrieval import context_parts, render_context
from pytest_restore.memory.systems import MemorySystem, SystemFigures
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.decoding import is_estimated, with_usage
from pytest_restore.models.prompts import parse_score, parse_verdict

#: The kind of call a model-written memory system's writer makes (:class:`SystemFigures`).
WRITER = "writer"


def _requests(system: MemorySystem, units: Sequence[Unit]) -> list[ChatRequest]:
    """``system.requests(units)``, each checked to be a chat request the model layer can send."""
    requests = system.requests(units)
    bad = next((r for r in requests if not isinstance(r, ChatRequest)), None)
    if bad is not None:
        raise TypeError(f"memory system {system.name!r} asked for a {type(bad).__name__}, not a ChatRequest")
    return [r for r in requests if isinstance(r, ChatRequest)]


class ModelCalls(AuditBase):
    """The audit's model calls (a part of :class:`~pytest_restore.audit.run.Audit`)."""

    def evaluate(self, items: Sequence[tuple[History, Sequence[int]]]) -> list[Outcome]:
        """Read and judge each (history, injected positions) context.

        Each distinct context is read and judged once per process: a grid's cells share many (a store no
        budget binds, nothing to restore, the same store under two policies), and the models would give
        them the same outcome (each request is sent once: :class:`MemoModel`). A context of one of the
        audit's own histories is kept for every later cell; one of a memory system's view of a history
        (made per question) for this call.
        """
        keys = [(id(history), tuple(injected)) for history, injected in items]
        fresh: dict[tuple[int, tuple[int, ...]], tuple[History, Sequence[int]]] = {}
        for key, item in zip(keys, items):
            if key not in self._read and key not in fresh:
                fresh[key] = item
        here: dict[tuple[int, tuple[int, ...]], Outcome] = {}
        for key, outcome in zip(fresh, self._read_once(list(fresh.values()))):
            (self._read if key[0] in self._own else here)[key] = outcome
        return [here[key] if key in here else self._read[key] for key in keys]

    def _read_once(self, items: Sequence[tuple[History, Sequence[int]]]) -> list[Outcome]:
        """Read and judge distinct contexts: the reader asked once each, the judge once per distinct
        (question, reference, answer) of the process (a question's contexts get few distinct answers)."""
        requests = [self.reader_request(history, injected) for history, injected in items]
        digests = [request_digest(r) for r in requests]  # the memo's key, and the records' prompt id
        answers = [
            with_usage(result, request, partial(self.reader_tokens, *item))
            for result, request, item in zip(self.reader.run(requests, keys=digests), requests, items)
        ]
        asked: dict[tuple[str, str, str], None] = {}
        for (history, _), answer in zip(items, answers):
            if answer.ok and answer.text is not None:
                graded = (history.question.question, history.question.answer, answer.text)
                if graded not in self._verdicts:
                    asked[graded] = None
        if asked:
            filled = [{"question": q, "answer": a, "prediction": p} for q, a, p in asked]
            judge_requests = [self.prompts.judge(**f) for f in filled]
            for graded, f, r, v in zip(asked, filled, judge_requests, self.judge.run(judge_requests)):
                # its usage is counted from what the request was filled with
                self._verdicts[graded] = with_usage(v, r, partial(self.prompts.judge_tokens, **f))
        outcomes = []
        for (history, injected), answer, digest in zip(items, answers, digests):
            tokens = int(history.sizes[list(injected)].sum()) if injected else 0
            prompt = prompt_id_of(digest)
            if not answer.ok or answer.text is None:
                failed = Failure("reader", str(answer.error))
                outcomes.append(Outcome(None, None, failed, tokens, len(injected), prompt, tuple(injected)))
                continue
            verdict = self._verdicts[(history.question.question, history.question.answer, answer.text)]
            correct = parse_verdict(verdict.text) if verdict.ok and verdict.text is not None else None
            failure = None
            if correct is None:
                failure = Failure("judge", str(verdict.error) if not verdict.ok else f"not a verdict: {verdict.text!r}")
            outcomes.append(Outcome(
                answer.text, correct, failure, tokens, len(injected), prompt, tuple(injected),
                reader_tokens=(answer.input_tokens, answer.output_tokens),
                judge_tokens=(verdict.input_tokens, verdict.output_tokens) if verdict.ok else None,
                tokens_estimated=is_estimated(answer) or (verdict.ok and is_estimated(verdict)),
            ))
        return outcomes

    def oracle(self, questions: Sequence[Prepared]) -> dict[str, Outcome]:
        """Clean-gold outcomes, once per question and reader."""
        todo = [p for p in questions if p.question.question_id not in self._oracle]
        if todo:
            for p, o in zip(todo, self.evaluate([(p.history, p.history.gold) for p in todo])):
                # a failed oracle call stays failed for every cell of the run (the models share it)
                self._oracle[p.question.question_id] = o
        return {p.question.question_id: self._oracle[p.question.question_id] for p in questions}

    def importance(self, questions: Sequence[Prepared]) -> tuple[dict[str, int], dict[str, Failure]]:
        """Importance scores of every unit content, and the questions whose scoring failed."""
        # a shared history is scored once, and a history whose every unit has its score is not read again
        histories = {
            p.question.history_key: p.history for p in questions if p.question.history_key not in self._scored
        }
        contents = list(
            dict.fromkeys(
                u.content for h in histories.values() for u in h.units if u.content not in self._importance
            )
        )
        failed: dict[str, str] = {}
        if contents:
            requests = [self.prompts.scorer(content=c) for c in contents]
            # the scorer's memo knows each request by its content, as the scores are known (the request is the
            # prompt set's scorer template filled with it): no request hashed
            for content, request, answered in zip(contents, requests, self.scorer.run(requests, keys=contents)):
                # one result at a time: the scorer's answers to a full dataset are not held twice
                result = with_usage(answered, request, partial(self.prompts.scorer_tokens, content=content))
                score = parse_score(result.text) if result.ok and result.text is not None else None
                if score is not None:
                    self._importance[content] = score
                    self._build_tokens[content] = (result.input_tokens, result.output_tokens, is_estimated(result))
                else:
                    failed[content] = result.error or f"not a score: {result.text!r}"
        self._scored.update(k for k, h in histories.items() if not failed or not any(u.content in failed for u in h.units))
        bad = {}
        if failed:
            for p in questions:
                for u in p.history.units:
                    if u.content in failed:
                        bad[p.question.question_id] = Failure("scorer", failed[u.content])
                        break
        return self._importance, bad

    def importance_counts(self, prepared: Prepared) -> tuple[int, ...] | None:
        """:func:`~pytest_restore.audit.records.score_counts` of the question's history under the importance
        scores, once per history: every cell of a policy that reads them asks again, and once every unit has
        its score they do not change."""
        key = prepared.question.history_key
        counts = self._score_counts.get(key)
        if counts is None:
            counts = score_counts(prepared, self._importance)
            if counts is not None:
                self._score_counts[key] = counts
        return counts

    def write(self, system: MemorySystem, questions: Sequence[Prepared]) -> tuple[dict[str, Failure], SystemFigures]:
        """Ask the writer model every request ``system`` needs for these questions' histories at once
        (:meth:`MemorySystem.requests`), hand it the replies, and return the questions whose history lost
        a call (their records are excluded, never scored) and the writer's calls and failures (kind
        ``writer``). A system that calls no model asks nothing."""
        needed: dict[str, list[ChatRequest]] = {}
        for p in questions:
            if p.question.history_key not in needed:  # a shared history is written once
                needed[p.question.history_key] = _requests(system, p.history.units)
        distinct = list(dict.fromkeys(r for requests in needed.values() for r in requests))
        figures = SystemFigures()
        if not distinct:
            return {}, figures
        replies: dict[Hashable, str] = {}
        failed: dict[ChatRequest, str] = {}
        for request, result in zip(distinct, self.writer.run(distinct)):
            if result.ok and result.text is not None:
                replies[request] = result.text
                result = with_usage(result, request)
                self._build_tokens[request] = (result.input_tokens, result.output_tokens, is_estimated(result))
            else:
                failed[request] = result.error or "no reply"
        figures.calls[WRITER], figures.failed[WRITER] = len(distinct), len(failed)
        for asked, text in replies.items():  # an answer the system can make nothing of is counted, by cause
            cause = system.unusable(asked, text)
            if cause is not None:
                figures.reject(WRITER, cause)
        system.supply(replies)
        out = {}
        for p in questions:
            lost = next((failed[r] for r in needed[p.question.history_key] if r in failed), None)
            if lost is not None:
                out[p.question.question_id] = Failure("writer", lost)
        return out, figures

    def writer_requests(self, system: Policy) -> list[ChatRequest]:
        """Every request a memory system that writes with a model needs over the audited histories (a dry run's)."""
        if not isinstance(system, MemorySystem):
            return []
        histories = {p.question.history_key: p.history for p in self.questions}
        return list(dict.fromkeys(r for h in histories.values() for r in _requests(system, h.units)))

    def builds_with_a_model(self, policy: Policy) -> bool:
        """Whether ``policy`` calls a model to build its store: the importance scorer, or a memory system's writer."""
        if not (policy.needs_importance or isinstance(policy, MemorySystem)):
            return False
        return any(self._build_keys(policy, p.question.history_key, p.history.units) for p in self.questions)

    def _build_keys(self, policy: Policy, history_key: str, units: Sequence[Unit]) -> list[Hashable]:
        """The calls that build ``policy``'s store of a history, in the history's order (their tokens' keys)."""
        cached = self._keys.get((policy.name, history_key))
        if cached is None:
            keys: dict[Hashable, None] = {}
            if policy.needs_importance:
                keys.update(dict.fromkeys(u.content for u in units))
            if isinstance(policy, MemorySystem):
                keys.update(dict.fromkeys(_requests(policy, units)))
            cached = self._keys[(policy.name, history_key)] = list(keys)
        return cached

    def memory_share(self, policy: Policy, prepared: Prepared) -> tuple[float, float, bool] | None:
        """The question's share of the tokens (in, out) of the model calls that built ``policy``'s store of its
        history (the importance scorer's, a memory system's writer's), and whether any is estimated
        (``None``: a call of it has no tokens: it failed).

        Each call is made once for the whole run; its tokens are split equally over the audited questions
        whose history it served, so a conversation's questions share its store's calls and the shares of
        all questions add up to what the calls cost once.
        """
        qid = prepared.question.question_id
        if (policy.name, qid) not in self._memory_shares:
            holders = self._holders.get(policy.name)
            if holders is None:
                served = Counter(p.question.history_key for p in self.questions)
                histories = {p.question.history_key: p.history for p in self.questions}
                holders = Counter()
                for key, history in histories.items():
                    for call in self._build_keys(policy, key, history.units):
                        holders[call] += served[key]
                self._holders[policy.name] = holders
            tokens_in = tokens_out = 0.0
            estimated = False
            share: tuple[float, float, bool] | None = None
            # in the history's order: a float sum in set order would differ between processes (hash seeds)
            # the calls of the audited history (its keys were listed above), not of a memory system's view of it
            for call in self._build_keys(policy, prepared.question.history_key, prepared.history.units):
                spent = self._build_tokens.get(call)
                if spent is None:
                    break
                tokens_in += spent[0] / max(1, holders[call])
                tokens_out += spent[1] / max(1, holders[call])
                estimated = estimated or spent[2]
            else:
                share = (round(tokens_in, 2) + 0.0, round(tokens_out, 2) + 0.0, estimated)
            self._memory_shares[(policy.name, qid)] = share
        return self._memory_shares[(policy.name, qid)]

    def reader_request(self, history: History, injected: Sequence[int]) -> ChatRequest:
        """The reader's request for one context."""
        q = history.question
        snippets = render_context(history, injected)
        return self.prompts.reader(question=q.question, question_date=q.question_date, snippets=snippets)

    def reader_tokens(self, history: History, injected: Sequence[int]) -> tuple[int, int]:
        """The o200k tokens of :meth:`reader_request`'s messages, from the snippets' sizes (no prompt encoded)."""
        q = history.question
        parts, counts = context_parts(history, injected)
        return self.prompts.reader_tokens(question=q.question, question_date=q.question_date, snippets=parts, counts=counts)

    def scorer_requests(self) -> dict[str, ChatRequest]:
        """The importance scorer's requests, one per distinct unit content, keyed by the content."""
        histories = {p.question.history_key: p.history for p in self.questions}
        contents = dict.fromkeys(u.content for h in histories.values() for u in h.units)
        return {c: self.prompts.scorer(content=c) for c in contents}
