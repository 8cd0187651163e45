"""What each answer cost: tokens in and out and dollars per question, per condition.

An answer costs the reader's call that wrote it and the judge's call that
graded it. Each record's conditions carry both calls' tokens
(``reader_tokens``, ``judge_tokens``: as the model reported its usage, or
estimated where it reported none, ``tokens_estimated``). The dollars are
those tokens at the run's prices (``summary.json``'s ``run.settings.model_prices``,
USD per million tokens in and out: ``--restore-price``, else the provider's
declared list price; fake models are free; unknown when neither is known).

Figures are means per answer over the records that are not excluded:

- per condition and reader: the oracle once per question (it is the same in
  every cell), the policy and restored conditions over every regime-(b)
  record (all cells, seeds and rankers);
- per regime-(b) cell: the policy and restored conditions.

They say what one answer costs, whether or not the run shared its call with
another condition or cell (the run sends each distinct request once: its bill
is the model usage in ``summary.json``).

Beside them, per regime-(b) cell, what the memory policy's own model calls
cost per question (``memory``): the importance scorer's, priced as the
record's ``scorer``, and a memory system's writer's (session-summary-model,
fact-extract-model) and a memory library's own chat calls through the run's gateway (mem0, graphiti, ...),
priced as its ``writer`` (``--restore-writer-model``, else the reader), and a library's embeddings through the
gateway, priced as its embedder (``--restore-writer-embedder``: an embedding model's price in, nothing out; the
tokens its stores embedded, from the memory-systems check). A store is built once per history and serves every
question of it, so each record carries its question's share
(``memory_tokens``: each call split over the audited questions whose history
it served); over a cell's questions the shares add up to the calls that built
its stores, once each, as a deployed memory system would pay them.

And one figure per question for each cell (``total``): what answering one
question under the policy costs, its policy answer (the reader's call and the
judge's) plus its memory share. The oracle's and the restored condition's
calls are the audit's own and are not in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_restore.record import CONDITIONS, Condition, Record, ranker_of

__all__ = ["CellCost", "ConditionCost", "CostFigures", "QuestionTotal", "cost_figures"]

#: The conditions a regime-(b) cell's answers differ in (the oracle is the same in every cell).
CELL_CONDITIONS: tuple[str, ...] = ("policy", "restored")


def _price_json(tokens_in: float, tokens_out: float, usd: float | None) -> dict[str, Any]:
    """Mean tokens and dollars as ``summary.json`` keeps them: tokens to 2 places, dollars to 8 (``None``: unknown)."""
    return {"tokens_in": round(tokens_in, 2), "tokens_out": round(tokens_out, 2), "usd": round(usd, 8) if usd is not None else None}


@dataclass(frozen=True)
class ConditionCost:
    """Mean tokens and dollars per answer over some answers of one condition."""

    answers: int
    tokens_in: float
    tokens_out: float
    #: ``None``: a model's price is unknown
    usd: float | None
    #: answers whose tokens are (partly) estimated: a model reported no usage
    estimated: int
    #: a memory library's share: the tokens its stores embedded through the run's gateway per question, priced in
    #: ``usd`` at the embedder's price (``None``: no library embedded; not in ``tokens_in``, the chat calls')
    embedding_tokens: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain values (``summary.json``; ``embedding_tokens`` only where a library embedded)."""
        out = {"answers": self.answers, **_price_json(self.tokens_in, self.tokens_out, self.usd), "estimated": self.estimated}
        if self.embedding_tokens is not None:
            out["embedding_tokens"] = round(self.embedding_tokens, 2)
        return out


@dataclass(frozen=True)
class QuestionTotal:
    """What one question costs under a cell's policy: its policy answer plus its memory share."""

    tokens_in: float
    tokens_out: float
    #: ``None``: a model's price is unknown
    usd: float | None
    #: whether some of the tokens are estimated (a model reported no usage)
    estimated: bool

    def to_json(self) -> dict[str, Any]:
        """Plain values (``summary.json``)."""
        return {**_price_json(self.tokens_in, self.tokens_out, self.usd), "estimated": self.estimated}


@dataclass(frozen=True)
class CellCost:
    """A regime-(b) cell's cost per answer of its policy and restored conditions."""

    policy: str
    budget: int
    reader: str
    ranker: str
    conditions: tuple[tuple[str, ConditionCost], ...]
    #: the memory policy's own calls per question (its share of building the store); ``None``: it makes none
    memory: ConditionCost | None = None

    @property
    def total(self) -> QuestionTotal | None:
        """One question's cost under the policy: the policy answer plus the memory share (``None``: no policy answer)."""
        answer = dict(self.conditions).get("policy")
        if answer is None:
            return None
        parts = [answer] + ([self.memory] if self.memory is not None else [])
        usd = None if any(p.usd is None for p in parts) else sum(p.usd or 0.0 for p in parts)
        return QuestionTotal(
            sum(p.tokens_in for p in parts), sum(p.tokens_out for p in parts), usd, any(p.estimated for p in parts)
        )

    def to_json(self) -> dict[str, Any]:
        """Plain values (``summary.json``)."""
        total = self.total
        return {
            "policy": self.policy,
            "budget": self.budget,
            "reader": self.reader,
            "ranker": self.ranker,
            # nested: the condition "policy" would otherwise overwrite the policy's name
            "conditions": {name: cost.to_json() for name, cost in self.conditions},
            "memory": self.memory.to_json() if self.memory is not None else None,
            "total": total.to_json() if total is not None else None,
        }


@dataclass(frozen=True)
class CostFigures:
    """The run's cost per answer (module docstring)."""

    #: (reader, condition) -> cost, conditions in :data:`CONDITIONS` order
    by_condition: tuple[tuple[tuple[str, str], ConditionCost], ...]
    cells: tuple[CellCost, ...]
    #: the prices the dollars are at: model -> (in, out) USD per million tokens, ``None``: unknown
    prices: tuple[tuple[str, tuple[float, float] | None], ...]

    @property
    def answers(self) -> int:
        """Answers counted over the conditions (the oracle once per question)."""
        return sum(c.answers for _, c in self.by_condition)

    @property
    def estimated(self) -> int:
        """Of :attr:`answers`, those whose tokens are (partly) estimated."""
        return sum(c.estimated for _, c in self.by_condition)

    def to_json(self) -> dict[str, Any]:
        """``summary.json``'s ``cost``."""
        return {
            "per_condition": [
                {"reader": reader, "condition": condition, **cost.to_json()}
                for (reader, condition), cost in self.by_condition
            ],
            "per_cell": [cell.to_json() for cell in self.cells],
            "prices": {model: list(price) if price is not None else None for model, price in self.prices},
            "answers": self.answers,
            "estimated": self.estimated,
        }


def _usd(c: Condition, reader: tuple[float, float] | None, judge: tuple[float, float] | None) -> float | None:
    """One answer's dollars (``None``: a price is unknown)."""
    if reader is None or c.reader_tokens is None:
        return None
    usd = c.reader_tokens[0] * reader[0] + c.reader_tokens[1] * reader[1]
    if c.judge_tokens is not None:
        if judge is None:
            return None
        usd += c.judge_tokens[0] * judge[0] + c.judge_tokens[1] * judge[1]
    return usd / 1e6


def _mean(answers: Sequence[tuple[Record, Condition]], prices: Mapping[str, tuple[float, float] | None]) -> ConditionCost:
    n = len(answers)
    tokens_in = sum(c.reader_tokens[0] + (c.judge_tokens or (0, 0))[0] for _, c in answers if c.reader_tokens)
    tokens_out = sum(c.reader_tokens[1] + (c.judge_tokens or (0, 0))[1] for _, c in answers if c.reader_tokens)
    dollars = [_usd(c, prices.get(r.reader), prices.get(r.judge or "")) for r, c in answers]
    usd = None if any(d is None for d in dollars) else sum(d for d in dollars if d is not None) / n
    return ConditionCost(n, tokens_in / n, tokens_out / n, usd, sum(1 for _, c in answers if c.tokens_estimated))


def _memory_mean(
    records: Sequence[Record], prices: Mapping[str, tuple[float, float] | None], embedded: tuple[str, int] | None = None
) -> ConditionCost:
    """Mean tokens and dollars per question of the memory policy's own calls (records carrying ``memory_tokens``),
    and of a library's embeddings (``embedded``: the embedder and the tokens the cell's stores embedded)."""
    n = len(records)
    tokens = [r.memory_tokens for r in records if r.memory_tokens is not None]
    tokens_in = sum(t[0] for t in tokens)
    tokens_out = sum(t[1] for t in tokens)
    priced = [prices.get(r.scorer or r.writer or r.reader) for r in records]
    usd = None
    if all(p is not None for p in priced):
        usd = sum(t[0] * p[0] + t[1] * p[1] for t, p in zip(tokens, priced) if p is not None) / 1e6 / n
    if embedded is None:
        return ConditionCost(n, tokens_in / n, tokens_out / n, usd, sum(1 for r in records if r.memory_tokens_estimated))
    embedder, embedding_tokens = embedded
    price = prices.get(embedder)
    if usd is not None:
        usd = usd + embedding_tokens * price[0] / 1e6 / n if price is not None else None
    return ConditionCost(
        n, tokens_in / n, tokens_out / n, usd, sum(1 for r in records if r.memory_tokens_estimated), embedding_tokens / n
    )


def cost_figures(
    records: Iterable[Record],
    prices: Mapping[str, Sequence[float] | None],
    embeddings: Mapping[tuple[str, int, str], tuple[str, int]] | None = None,
) -> CostFigures | None:
    """The run's cost per answer; ``None`` when no record carries tokens (written before they were recorded).

    ``embeddings``: by (policy, budget, reader), the embedder a memory library's stores embedded with through the
    run's gateway and the tokens they embedded (the memory-systems check's figures), priced at the embedder's
    price in ``prices`` and split over the cell's questions as its chat calls are."""
    priced = {m: (float(p[0]), float(p[1])) if p is not None else None for m, p in prices.items()}
    oracle: dict[tuple[str, str], tuple[Record, Condition]] = {}
    pooled: dict[tuple[str, str], list[tuple[Record, Condition]]] = {}
    cells: dict[tuple[str, int, str, str], dict[str, list[tuple[Record, Condition]]]] = {}
    memory: dict[tuple[str, int, str, str], list[Record]] = {}
    for r in records:
        if r.excluded is not None or r.regime != "b":
            continue
        conditions = dict(r.conditions.by_name())
        if conditions["oracle"].reader_tokens is not None:
            oracle.setdefault((r.reader, r.question_id), (r, conditions["oracle"]))
        key = (r.policy, r.budget, r.reader, ranker_of(r))
        if r.memory_tokens is not None:
            memory.setdefault(key, []).append(r)
        cell = cells.setdefault(key, {})
        for name in CELL_CONDITIONS:
            c = conditions[name]
            if c.reader_tokens is not None:
                pooled.setdefault((r.reader, name), []).append((r, c))
                cell.setdefault(name, []).append((r, c))
    for (reader, _qid), answer in oracle.items():
        pooled.setdefault((reader, "oracle"), []).append(answer)
    if not pooled:
        return None
    order = {name: i for i, name in enumerate(CONDITIONS)}
    by_condition = tuple(
        (key, _mean(answers, priced)) for key, answers in sorted(pooled.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))
    )
    return CostFigures(
        by_condition=by_condition,
        cells=tuple(
            CellCost(
                *key,
                tuple((name, _mean(found[name], priced)) for name in CELL_CONDITIONS if name in found),
                _memory_mean(memory[key], priced, (embeddings or {}).get(key[:3])) if key in memory else None,
            )
            for key, found in cells.items()
            if found
        ),
        prices=tuple(sorted(priced.items())),
    )
