"""A judge with no model call: ``--restore-judge f1:THRESHOLD`` grades by LoCoMo's token F1.

The answer is CORRECT when its token F1 against the reference (LoCoMo's
normalisation and Porter stemming, :func:`pytest_restore.data.answer_metrics.token_f1`)
is at least THRESHOLD (a number in (0, 1], e.g. ``f1:0.5``). Deterministic,
free and offline; its verdicts are not an LLM judge's, and its limits are
those of token overlap:

- **numbers**: one wrong number among shared words still scores high. At
  0.5, "18 years ago" against the reference "10 years ago" scores 0.67 and
  is CORRECT; so is a wrong date sharing its month and year. A threshold of
  1.0 refuses it, and refuses every paraphrase with it.
- **paraphrase and length**: "Yes, she did" against "yes" scores 0.5 (F1
  counts the extra words); a correct answer in other words scores 0.
- **categories**: it sees what an LLM judge sees (the question, the
  reference, the answer), not the question's LoCoMo category, so it grades
  every question by the plain rule; the report's per-category F1 applies
  LoCoMo's per-category rules.

It reads the reference and the answer off the default judge prompt (the
``Reference answer:`` and ``Candidate answer:`` lines); a ``--restore-prompts``
judge template without those lines makes every grade INCORRECT.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_restore.data.answer_metrics import token_f1
from pytest_restore.models.api import ModelOptions, ModelProvider
from pytest_restore.models.base import ChatModel, ChatRequest, ChatResult

__all__ = ["F1Judge", "F1Provider", "parse_threshold"]

_REFERENCE = "\nReference answer: "
_CANDIDATE = "\nCandidate answer: "
_END = "\n\nVerdict"


def parse_threshold(text: str) -> float:
    """``THRESHOLD`` of ``f1:THRESHOLD``: a number in (0, 1]; anything else raises ``ValueError`` in words."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"f1:{text}: the threshold must be a number in (0, 1], e.g. f1:0.5") from None
    if not 0 < value <= 1:
        raise ValueError(f"f1:{text}: the threshold must be in (0, 1], e.g. f1:0.5")
    return value


class F1Judge:
    """CORRECT when the candidate's token F1 against the reference reaches the threshold."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    @property
    def name(self) -> str:
        """``f1:THRESHOLD``, as the judge is named in the records."""
        return f"f1:{self.threshold:g}"

    def grade(self, prompt: str) -> str:
        """The verdict for one judge prompt."""
        start, middle = prompt.find(_REFERENCE), prompt.rfind(_CANDIDATE)
        if start < 0 or middle < start:
            return "INCORRECT"
        end = prompt.rfind(_END)
        reference = prompt[start + len(_REFERENCE) : middle]
        candidate = prompt[middle + len(_CANDIDATE) : end if end > middle else len(prompt)]
        return "CORRECT" if token_f1(candidate, reference) >= self.threshold else "INCORRECT"

    def run(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Grade each judge request (the user message holds the reference and the candidate)."""
        return [ChatResult(self.grade("\n".join(c for role, c in r.messages if role == "user"))) for r in requests]


class F1Provider(ModelProvider):
    """``f1:THRESHOLD``: the token-F1 judge; no model, nothing priced or sent."""

    name = "f1"
    real = False
    spelled = "THRESHOLD"

    def serves(self, option: str) -> bool:
        """A judge option only (``--restore-judge``, ``--restore-audit-judge`` or their ini keys)."""
        return "judge" in option

    def check(self, model: str, option: str) -> str | None:
        """A threshold in (0, 1], for a judge option only."""
        if not self.serves(option):
            return f"{option}: f1:{model} is a judge only (token F1 against the reference)"
        try:
            parse_threshold(model)
        except ValueError as err:
            return f"{option}: {err}"
        return None

    def make(self, model: str, role: str, options: ModelOptions, *, use_cache: bool = True) -> ChatModel:
        """The judge at the threshold ``model`` names (checked by :meth:`check` with the options)."""
        problem = self.check(model, f"--restore-{role}")
        if problem is not None:
            raise ValueError(problem)
        return F1Judge(parse_threshold(model))
