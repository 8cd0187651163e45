"""A deterministic synthetic LongMemEval-S generator.

The output has the exact layout of ``longmemeval_s_cleaned.json``: a JSON list
of question records, each with a history of about ``tokens_per_history``
o200k_base tokens spread over about 50 dated sessions. It exists so the audit
can be developed and tested without the official file; it makes no claim to
reproduce the paper's figures.

How a history is assembled (the rates are knobs of :class:`GeneratorSettings`;
their defaults aim at what real assistant conversations look like, not at
any policy's outcome):

- **Filler sessions** come from a pool shared by every question of one call
  (ids ``sharegpt_<hex>_<k>`` and ``ultrachat_<n>``; one id, one content). The
  pool holds ``pool_factor`` times the sessions one history needs, so
  histories overlap but differ. Filler is advice prose, lexically diverse
  like the ShareGPT/UltraChat text of the real file: each session is about
  one of ``filler_topics`` invented topics with their own words
  (pseudo-words drawn from the seed), set in English frames whose content
  words are few and varied. Like real chat text it carries concrete details:
  a share of turns holds a number (``filler_digit_rate``), a name or place
  (``filler_name_rate``) or a date (``filler_date_rate``); users state things
  about themselves in the first person (``user_first_person_rate``) and now
  and then write long messages (``long_user_share``); some user turns are
  short stock turns ("Thanks!") that recur across sessions.
- **Answer sessions** (``answer_<hex>_<k>``, listed in ``answer_session_ids``)
  each hold one evidence turn with ``has_answer: true``; every turn of an
  answer session carries the ``has_answer`` key, other sessions omit it (as in
  the real file). An evidence turn states its fact (numbers, names, dates,
  "I bought", "my") in passing, inside an ordinary turn about something else,
  and its size is drawn like a turn of the history, mostly a long one
  (``gold_long_share``, within ``gold_tokens``), padded with plain words: its
  length and fact density sit where real evidence's do (LoCoMo: longer than
  most turns, denser in facts than about two thirds of them), not at the top.
  Now and then (``echo_share``) the next turn restates part of the evidence
  (the assistant's reply to a user's evidence turn; the user's follow-up to an
  assistant's): each evidence sentence with a per-question probability drawn
  from ``echo_strength``, without numbers or the answer's words. Real replies
  mostly move on: in LoCoMo the turn after the evidence is its most similar
  unit for 4-15% of evidence turns. The subject comes up again elsewhere
  instead (``mention_share``): a session of its own, placed like any other
  session (before or after the evidence, as often), restates part of it, so
  the evidence is neither the most unique unit of its history nor a
  near-duplicate of its neighbour (``memory/profile.py`` measures all three).
- **Distractor sessions** hold turns that reuse the question's content words
  (same topic, no answer) so a lexical ranker over the question can rank them
  above the evidence. Their number per question is drawn from ``distractors``.

The generator is tested on the statistics of its data (where the evidence's
length and fact density fall within its history, the filler's rates), never on
what an audit of it finds.

Everything is drawn from one ``random.Random(seed)``: the same arguments give
a byte-identical file. Token sizes use :func:`pytest_restore.data.tokens.count_tokens`
(each distinct text is encoded once), so the full 500-question file takes
seconds, not minutes.
"""


from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import itertools
import json
import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_restore.data.tokens import count_tokens
from pytest_restore.data.words import words
from pytest_restore.synthetic.prose import DATE_MARK, Writer
from pytest_restore.synthetic.questions import (
    BUILDERS,
    Plan,
    abstention_mix,
    days_between,
    type_mix,
)
from pytest_restore.synthetic.settings import GeneratorSettings
from pytest_restore.synthetic.vocabulary import (
    ABSTENTION_MIX_500,
    ECHO_LEADS,
    FOLLOW_UPS,
    MONTHS,
    QUESTION_TYPES,
    TYPE_MIX_500,
    WEEKDAYS,
)

__all__ = [
    "ABSTENTION_MIX_500",
    "QUESTION_TYPES",
    "TYPE_MIX_500",
    "abstention_mix",
    "generate",
    "history_tokens",
    "type_mix",
    "write_dataset",
]

Record = dict[str, Any]

# --------------------------------------------------------------------------- sessions and histories


Pair = tuple[str, str]  # (user content, assistant content)


class _Draws:
    """Distinct indices of ``range(n)`` in random order, drawn one at a time (a lazy permutation)."""

    def __init__(self, rng: random.Random, n: int) -> None:
        self.rng, self.n = rng, n
        self.taken: set[int] = set()

    def __bool__(self) -> bool:
        return len(self.taken) < self.n

    def pop(self) -> int:
        while True:
            index = self.rng.randrange(self.n)
            if index not in self.taken:
                self.taken.add(index)
                return index

    def __iter__(self) -> Iterator[int]:
        while self:
            yield self.pop()


@dataclass
class _Session:
    sid: str
    turns: list[tuple[str, str, bool | None]]  # (role, content, has_answer or None)
    tokens: int = 0
    gold: int = -1  # index of the gold in the plan, -1 for non-answer sessions


def _mentions(record: Record, phrases: Sequence[str]) -> bool:
    """Whether any phrase occurs as whole words in the record's history."""
    pattern = re.compile("|".join(rf"\b{re.escape(p)}\b" for p in phrases), re.IGNORECASE)
    return any(
        pattern.search(turn["content"]) for session in record["haystack_sessions"] for turn in session
    )


def _format_date(moment: dt.datetime) -> str:
    return (f"{moment.year:04d}/{moment.month:02d}/{moment.day:02d} "
            f"({WEEKDAYS[moment.weekday()][:3]}) {moment.hour:02d}:{moment.minute:02d}")


def _short_date(moment: dt.datetime) -> str:
    return f"{MONTHS[moment.month - 1]} {moment.day}"


class _Generator:
    def __init__(self, seed: int, settings: GeneratorSettings) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.s = settings
        self.w = Writer(self.rng, settings)
        self.used_ids: set[str] = set()
        self.questions: set[str] = set()
        self.session_tokens_target = settings.tokens_per_history / max(1, settings.sessions_per_history)
        self.pairs_mean = max(1, round(self.session_tokens_target / 340))
        self._build_pool()

    # -- ids
    def _fresh(self, make: Callable[[], str]) -> str:
        while True:
            sid = make()
            if sid not in self.used_ids:
                self.used_ids.add(sid)
                return sid

    def filler_id(self, rng: random.Random | None = None) -> str:
        r = rng or self.rng
        if r.random() < 0.6:
            return self._fresh(lambda: f"sharegpt_{r.getrandbits(28):07x}_{r.randrange(4)}")
        return self._fresh(lambda: f"ultrachat_{r.randrange(10_000, 600_000)}")

    def _pair_count(self, rng: random.Random | None = None) -> int:
        """Exchanges in a new session: log-normal around the mean (``session_size_spread``), as
        chat sessions run from a quick question to a long working session."""
        m, spread = self.pairs_mean, self.s.session_size_spread
        factor = math.exp((rng or self.rng).gauss(-spread * spread / 2, spread))
        return max(1, min(4 * m, round(m * factor)))

    # -- the shared pool
    def _build_pool(self) -> None:
        size = max(4, round(self.s.pool_factor * self.s.sessions_per_history))
        self.pool_size, self.pairs_size = size, max(16, size * 2)
        self.pool: list[_Session] = []
        self.pairs: list[Pair] = []
        self._lazy_sessions: dict[int, _Session] = {}
        self._lazy_pairs: dict[int, Pair] = {}
        if self.s.lazy_pool:
            return
        for _ in range(size):
            turns = self._filler_turns()
            self.pool.append(_Session(self.filler_id(), turns))
        # Loose pairs for answer and distractor sessions, kept apart from the pool sessions
        # so a history never holds the same turn twice.
        self.pairs.extend(self._loose_pair() for _ in range(self.pairs_size))
        texts = [t[1] for s in self.pool for t in s.turns] + [x for p in self.pairs for x in p]
        counts = dict(zip(texts, count_tokens(texts)))
        for session in self.pool:
            session.tokens = sum(counts[t[1]] for t in session.turns)

    def _filler_turns(self) -> list[tuple[str, str, bool | None]]:
        """The turns of a new filler session on one topic, from the writer's stream."""
        w = self.w
        topic = w.topic()
        turns: list[tuple[str, str, bool | None]] = []
        for _ in range(self._pair_count(w.rng)):
            turns.append(("user", w.user_filler(topic), None))
            turns.append(("assistant", w.assistant_filler(topic), None))
        return turns

    def _loose_pair(self) -> Pair:
        """A new loose (user, assistant) filler pair on one topic, from the writer's stream."""
        topic = self.w.topic()
        return self.w.user_filler(topic), self.w.assistant_filler(topic)

    @contextlib.contextmanager
    def _own_stream(self, kind: str, index: int) -> Iterator[random.Random]:
        """The writer draws from the stream of one lazily built pool entry (fixed by the
        seed, the kind and the index) inside the block."""
        rng = random.Random(f"{self.seed}/{kind}/{index}")
        main, self.w.rng = self.w.rng, rng
        try:
            yield rng
        finally:
            self.w.rng = main

    def _pool_session(self, index: int) -> _Session:
        """Pool session ``index`` (built on first use with ``lazy_pool``)."""
        if not self.s.lazy_pool:
            return self.pool[index]
        session = self._lazy_sessions.get(index)
        if session is None:
            with self._own_stream("session", index) as rng:
                turns = self._filler_turns()
            session = _Session(self.filler_id(rng), turns)
            session.tokens = sum(count_tokens([t[1] for t in turns]))
            self._lazy_sessions[index] = session
        return session

    def _pair(self, index: int) -> Pair:
        """Loose pair ``index`` (built on first use with ``lazy_pool``)."""
        if not self.s.lazy_pool:
            return self.pairs[index]
        pair = self._lazy_pairs.get(index)
        if pair is None:
            with self._own_stream("pair", index):
                pair = self._loose_pair()
            self._lazy_pairs[index] = pair
        return pair

    def _order(self, n: int) -> list[int] | _Draws:
        """Indices of range(n) in random order: a whole permutation, or drawn on demand."""
        return _Draws(self.rng, n) if self.s.lazy_pool else self.rng.sample(range(n), n)

    # -- per-question sessions
    def _with_pairs(self, inserts: list[list[tuple[str, str, bool | None, bool | None]]],
                    flagged: bool, available: list[int] | _Draws) -> list[tuple[str, str, bool | None]]:
        """Filler pairs with the given groups of (user, assistant, user flag, assistant flag) pairs
        mixed in, each group kept together."""
        n_filler = max(0, self._pair_count() - sum(len(g) for g in inserts))
        chosen: list[tuple[str, str, bool | None, bool | None]] = []
        flag: bool | None = False if flagged else None
        for _ in range(n_filler):
            if not available:
                break
            u, a = self._pair(available.pop())
            chosen.append((u, a, flag, flag))
        for group in inserts:
            at = self.rng.randint(0, len(chosen))
            chosen[at:at] = group
        turns: list[tuple[str, str, bool | None]] = []
        for u, a, fu, fa in chosen:
            turns.append(("user", u, fu))
            turns.append(("assistant", a, fa))
        return turns

    def _plan(self, qtype: str, abstain: bool) -> Plan:
        plan = BUILDERS[qtype](self.w, abstain)
        tries = 0
        while plan.question in self.questions:
            tries += 1
            if tries < 40:
                plan = BUILDERS[qtype](self.w, abstain)
            else:
                plan.question = plan.question.rstrip("?") + f" (as of question {len(self.questions)})?"
        self.questions.add(plan.question)
        return plan

    def question(self, qtype: str, abstain: bool) -> Record:
        """One record; an abstention whose unstated subject turns up in the history is redrawn."""
        for _ in range(20):
            record, plan = self._attempt(qtype, abstain)
            if not plan.forbidden or not _mentions(record, plan.forbidden):
                return record
            self.questions.discard(plan.question)
        raise RuntimeError(f"could not build an abstention question of type {qtype}")

    def _attempt(self, qtype: str, abstain: bool) -> tuple[Record, Plan]:
        r, s = self.rng, self.s
        plan = self._plan(qtype, abstain)
        available = self._order(self.pairs_size)
        hexid = self._fresh(lambda: f"answer_{r.getrandbits(32):08x}")
        qid = self._fresh(lambda: f"{r.getrandbits(32):08x}") + ("_abs" if abstain else "")
        answer_sessions: list[_Session] = []
        # Evidence sessions stay on topic: a turn after the evidence restates part of it
        # (never the answer), more or less of it depending on the question.
        strength = r.uniform(*s.echo_strength)
        exclude = set(words(plan.answer)) if isinstance(plan.answer, str) else set()
        mentions: list[tuple[str, str, bool | None, bool | None]] = []
        for k, gold in enumerate(plan.golds):
            group: list[tuple[str, str, bool | None, bool | None]]
            # only some evidence turns get a restating reply (real replies mostly move on)
            echoed = r.random() < s.echo_share
            if gold.role == "user":
                echo = self.w.echo(gold.text, exclude, strength) if echoed else ""
                lead = self.w.pick(ECHO_LEADS)
                partner = f"{lead} {echo}.\n\n{gold.partner}" if echo else gold.partner
                group = [(gold.text, partner, True, False)]
            else:
                group = [(gold.partner, gold.text, False, True)]
                echo = self.w.echo(gold.text, exclude, strength, swap=False) if echoed else ""
                if echo:
                    follow = f"{self.w.pick(FOLLOW_UPS)} {echo}?"
                    group.append((follow, self.w.reply(plan.terms[0]), False, False))
            sid = f"{hexid}_{k + 1}"
            answer_sessions.append(_Session(sid, self._with_pairs([group], True, available), gold=k))
            if r.random() < s.mention_share:
                # the subject comes up again in a session of its own, before or after the evidence;
                # without the question's words, so that it is similar to the evidence, not an answer
                # to the question a lexical ranker would prefer
                unasked = exclude | set(words(plan.question))
                mention = self.w.mention(gold.text, unasked, r.uniform(*s.mention_strength))
                if len(words(mention)) >= 2:
                    reply = self.w.prose(self.w.topic(), r.randint(90, 220))
                    mentions.append((f"{self.w.pick(FOLLOW_UPS)} {mention}?", reply, None, None))
        lo, hi = s.distractors
        n_distractors = r.randint(lo, hi)
        distractor_sessions: list[_Session] = []
        per = max(1, s.distractors_per_session)
        made = 0
        seen: set[str] = set()
        while made < n_distractors:
            inserts: list[tuple[str, str, bool | None, bool | None]] = []
            for _ in range(min(per, n_distractors - made)):
                long_assistant = r.random() < s.distractor_assistant_share
                for _ in range(8):  # no two distractors of one history alike
                    u, a = self.w.distractor_pair(
                        plan.terms, long_assistant, lambda: self.w.assistant_filler(self.w.topic())
                    )
                    if u not in seen:
                        break
                seen.add(u)
                inserts.append((u, a, None, None))
                made += 1
            distractor_sessions.append(
                _Session(self.filler_id(), self._with_pairs([[x] for x in inserts], False, available)))
        for mention_pair in mentions:
            distractor_sessions.append(_Session(self.filler_id(), self._with_pairs([[mention_pair]], False, available)))
        own = answer_sessions + distractor_sessions
        texts = [t[1] for ses in own for t in ses.turns]
        counts = dict(zip(texts, count_tokens(texts)))
        total = 0
        for ses in own:
            ses.tokens = sum(counts[t[1]] for t in ses.turns)
            total += ses.tokens
        fillers: list[_Session] = []
        for index in self._order(self.pool_size):
            session = self._pool_session(index)
            if total + session.tokens / 2 > s.tokens_per_history:
                break
            fillers.append(session)
            total += session.tokens
        others: list[_Session] = fillers + distractor_sessions
        r.shuffle(others)
        n_sessions = len(others) + len(answer_sessions)
        moments, qdate, positions = self._timeline(n_sessions, len(answer_sessions), plan.min_day_gap)
        ordered: list[_Session] = []
        gold_at = dict(zip(positions, answer_sessions))
        rest = iter(others)
        for pos in range(n_sessions):
            ordered.append(gold_at[pos] if pos in gold_at else next(rest))
        gold_moments = [moments[p] for p in positions]
        sessions_json: list[list[dict[str, Any]]] = []
        for pos, ses in enumerate(ordered):
            turns_json = []
            for role, content, flag in ses.turns:
                if flag and DATE_MARK in content:
                    content = content.replace(DATE_MARK, _short_date(moments[pos]))
                turn: dict[str, Any] = {"role": role, "content": content}
                if flag is not None:
                    turn["has_answer"] = flag
                turns_json.append(turn)
            sessions_json.append(turns_json)
        answer = plan.answer if isinstance(plan.answer, str) else plan.answer(gold_moments, qdate)
        record = {
            "question_id": qid,
            "question_type": qtype,
            "question": plan.question,
            "answer": answer,
            "question_date": _format_date(qdate),
            "haystack_session_ids": [ses.sid for ses in ordered],
            "haystack_dates": [_format_date(m) for m in moments],
            "haystack_sessions": sessions_json,
            "answer_session_ids": [ses.sid for ses in ordered if ses.gold >= 0],
        }
        return record, plan

    def _timeline(self, n: int, k: int, day_gap: bool
                  ) -> tuple[list[dt.datetime], dt.datetime, list[int]]:
        """Session moments (chronological), the question date, and the gold positions."""
        r = self.rng
        start = dt.datetime.combine(self.s.start + dt.timedelta(days=r.randrange(self.s.start_span_days)),
                                    dt.time(r.randrange(24), r.randrange(60)))
        moments = [start]
        for _ in range(n - 1):
            moments.append(moments[-1] + dt.timedelta(minutes=r.randint(6 * 60, 7 * 24 * 60)))
        qdate = moments[-1] + dt.timedelta(minutes=r.randint(24 * 60, 10 * 24 * 60))
        recent = r.random() < self.s.recent_evidence
        first = max(0, min(n - k, int(n * (1.0 - self.s.recent_window)))) if recent else 0
        for _ in range(200):
            positions = sorted(r.sample(range(first, n), k))
            if not day_gap or all(
                days_between(moments[b], moments[a]) >= 1 for a, b in itertools.pairwise(positions)
            ):
                break
        return moments, qdate, positions


# --------------------------------------------------------------------------- public API


def generate(
    questions: int,
    seed: int,
    tokens_per_history: int = 102_000,
    *,
    progress: Callable[[int, int], None] | None = None,
    **knobs: Any,
) -> list[Record]:
    """A synthetic LongMemEval-S dataset of ``questions`` records, deterministic in ``seed``.

    Knobs (defaults in brackets):

    - ``tokens_per_history`` [102,000]: target o200k tokens of each history
      (sum of the turn contents; the realised mean is within ~1%).
    - ``sessions_per_history`` [56]: sets the session size
      (``tokens_per_history / sessions_per_history``) and hence the session count.
    - ``session_size_spread`` [0.7]: sigma of the log of a session's exchange count
      (log-normal, mean kept): many short sessions and a few long ones.
    - ``pool_factor`` [2.5]: shared filler pool size in histories' worth of sessions.
    - ``lazy_pool`` [False]: build each pool session (and each loose filler pair)
      on first use, from its own stream fixed by the seed and its index, and
      draw histories' filler without shuffling the whole pool. A large pool then
      costs only what the histories use: ``pool_factor=1.6 * questions`` makes
      about three quarters of the session slots distinct, as in the official
      file (the bench's main dataset). Another stream than the eager pool's: the
      same seed gives another file.
    - ``distractors`` [(0, 6)]: inclusive range of distractor pairs per question,
      drawn uniformly. Each distractor pair has a user turn with the question's
      content words.
    - ``distractor_assistant_share`` [0.3]: chance that the distractor's assistant
      turn is a long on-topic answer repeating the question's words (else generic filler).
    - ``distractors_per_session`` [2]: distractor pairs per distractor session.
    - ``distractor_mentions`` [(4, 10)]: how many sentences of a long distractor
      answer name the question's topic.
    - ``filler_assistant_tokens`` [(150, 450)]: size range of filler assistant turns
      (and of long user turns).
    - ``gold_tokens`` [(40, 600)]: bounds of an evidence turn's size; within them it
      is the size of a filler turn drawn for it (user or assistant, short or long).
    - ``gold_long_share`` [0.9]: chance that that filler turn is an assistant-sized
      (long) one: evidence turns are longer than most and, padded with plain words,
      not the densest in facts of their history (before: 0.5, and the gold sat at the
      85th fact-density percentile against LoCoMo's 50th-71st).
    - ``long_user_share`` [0.12]: share of user turns that are long messages.
    - ``filler_digit_rate`` [0.45], ``filler_name_rate`` [0.25], ``filler_date_rate``
      [0.12]: chance that a filler assistant turn (or long user turn) holds a
      sentence with a number, a name or place, a date.
    - ``user_first_person_rate`` [0.65]: chance that a filler user turn opens with a
      first-person statement about the user (non-gold turns with a first-person word:
      about 0.55, LoCoMo's 0.51-0.60).
    - ``filler_topics`` [400]: invented filler topics, each with its own words;
      more topics make unrelated filler turns share fewer words.
    - ``echo_share`` [0.1]: chance that an evidence turn's next turn restates it
      (before: always, and that turn was the gold's most similar unit for about half
      of the gold turns, which ``redundancy`` keeps while evicting the gold; LoCoMo: 4-15%).
    - ``echo_strength`` [(0.0, 0.7)]: range of the per-question share of evidence
      sentences that a restating turn repeats (without numbers or the answer's words).
    - ``mention_share`` [0.9] and ``mention_strength`` [(0.02, 0.26)]: chance that an
      evidence turn's subject comes up again in a session of its own elsewhere in the
      history, and the range of the chance that each of its words (numbers, the
      question's and the answer's words aside) is said again there: the evidence's
      best similarity then spreads over its history's range (LoCoMo: 10th/50th/90th
      percentiles 0.06/0.33/0.75; with the adjacent echo alone the median sat at the
      3rd percentile, so ``redundancy`` never chose it).
    - ``recent_evidence`` [0.25] and ``recent_window`` [0.15]: the share of
      questions whose evidence sessions all fall in the last ``recent_window`` of
      the history (recent facts), so budgets bind unevenly, as in real use.
    - ``progress``: called as ``progress(done, total)`` after each question.

    Every knob but ``progress`` is a field of :class:`GeneratorSettings`, where
    its default lives.

    The question types follow :func:`type_mix`, abstention per :func:`abstention_mix`;
    the record order is shuffled so every prefix mixes the types.
    """
    if questions < 0:
        raise ValueError(f"questions must be >= 0, got {questions}")
    if tokens_per_history < 1000:
        raise ValueError(f"tokens_per_history must be >= 1000, got {tokens_per_history}")
    try:
        settings = GeneratorSettings(tokens_per_history=tokens_per_history, **knobs)
    except TypeError as exc:
        raise TypeError(f"generate(): {exc}") from None
    gen = _Generator(seed, settings)
    types, abstentions = type_mix(questions), abstention_mix(questions)
    slots: list[tuple[str, bool]] = []
    for qtype in QUESTION_TYPES:
        slots += [(qtype, True)] * abstentions[qtype]
        slots += [(qtype, False)] * (types[qtype] - abstentions[qtype])
    gen.rng.shuffle(slots)
    records: list[Record] = []
    for qtype, abstain in slots:
        records.append(gen.question(qtype, abstain))
        if progress is not None:
            progress(len(records), questions)
    return records


def history_tokens(record: Record) -> int:
    """o200k tokens of a record's history: the sum of its turns' content token counts."""
    texts = [turn["content"] for session in record["haystack_sessions"] for turn in session]
    return sum(count_tokens(texts))


def write_dataset(records: Sequence[Record], path: str | Path) -> str:
    """Write ``records`` as one compact JSON list (UTF-8); return the file's sha256."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "w", encoding="utf-8") as handle:
        json.dump(list(records), handle, ensure_ascii=False)
    digest = hashlib.sha256()
    with open(target, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()

