"""The knobs of the synthetic generator (:class:`GeneratorSettings`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


@dataclass(frozen=True)
class GeneratorSettings:
    """Knobs of :func:`generate`, with their defaults (see its docstring)."""

    tokens_per_history: int = 102_000
    sessions_per_history: int = 56
    pool_factor: float = 2.5
    #: spread (sigma of the log) of the exchanges per session: sessions vary from short to long
    session_size_spread: float = 0.7
    #: build each pool session and loose pair on first use (see ``generate``)
    lazy_pool: bool = False
    #: distractor pairs per question and the share with a long on-topic answer: set with the
    #: reader's knobs on the no-evict baseline (how often top-k retrieval misses the evidence)
    distractors: tuple[int, int] = (0, 6)
    distractor_assistant_share: float = 0.3
    distractors_per_session: int = 2
    distractor_mentions: tuple[int, int] = (4, 10)
    #: bounds of an evidence turn's size; within them it is drawn like a filler turn of its role
    gold_tokens: tuple[int, int] = (40, 600)
    #: share of evidence turns sized like an assistant turn (long) rather than a user turn (short):
    #: real evidence turns are longer than most turns of their history and not its densest in facts
    #: (LoCoMo: length percentile 0.69-0.79, fact-density percentile 0.50-0.71 per conversation)
    gold_long_share: float = 0.9
    #: share of user turns (filler and evidence alike) that are long messages, sized like assistant turns
    long_user_share: float = 0.12
    #: shares of filler turns holding a number, a name or place, a date (one concrete sentence each)
    filler_digit_rate: float = 0.45
    filler_name_rate: float = 0.25
    filler_date_rate: float = 0.12
    #: share of filler user turns with a first-person statement about the user
    user_first_person_rate: float = 0.65
    filler_assistant_tokens: tuple[int, int] = (150, 450)
    filler_topics: int = 400
    echo_strength: tuple[float, float] = (0.0, 0.7)
    #: share of evidence turns whose next turn restates part of them (at a strength from ``echo_strength``):
    #: in LoCoMo the turn after the evidence is its most similar unit for 4-15% of evidence turns
    echo_share: float = 0.1
    #: share of evidence turns whose subject comes up again in a session of its own elsewhere in
    #: the history (before or after the evidence, as often), a turn that says some of its words
    #: again (each with a probability drawn from ``mention_strength``): real evidence has similar
    #: turns, mostly in other sessions, more or less similar
    mention_share: float = 0.9
    mention_strength: tuple[float, float] = (0.02, 0.26)
    #: share of questions whose evidence all falls in the last ``recent_window``
    #: of the history (recent facts), so that budgets bind unevenly as in real use
    recent_evidence: float = 0.25
    recent_window: float = 0.15
    start: dt.date = dt.date(2022, 1, 1)
    start_span_days: int = 540
