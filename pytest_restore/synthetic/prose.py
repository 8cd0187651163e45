"""Prose for the synthetic histories: invented topics and the text writer.

:class:`Writer` turns the vocabulary's banks into filler turns, evidence turns
with their facts, and distractors, all through one ``random.Random``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_restore.data.tokens import count_tokens
from pytest_restore.data.words import STOPWORDS, words
from pytest_restore.synthetic import vocabulary
from pytest_restore.synthetic.settings import GeneratorSettings
from pytest_restore.synthetic.vocabulary import (
    BOOK_ADJ,
    BOOK_NOUN,
    BRAND_A,
    CITIES,
    CLOSERS,
    CODAS,
    COMMON,
    COMPANY_B,
    FILLER_DATES,
    FILLER_NAMES,
    FILLER_NUMBERS,
    FRAMES,
    HOTEL_B,
    LIST_LEADS,
    MENTIONING,
    MONTHS,
    NAMES,
    NUCLEI,
    ONSETS,
    OPENERS,
    RELATIONS,
    SECOND_PERSON,
    STOCK_USER,
    STORE_B,
    STREET_KINDS,
    STREETS,
    SUFFIXES,
    SURNAMES,
    USER_DISTRACTORS,
    USER_FILLER,
    USER_STATEMENTS,
    WEEKDAYS,
)

DATE_MARK = "\x00DATE\x00"
#: o200k tokens per whitespace word of filler prose (pseudo-words split into several tokens).
_TOKENS_PER_WORD = 1.6
#: Share of filler user turns that are a short stock turn ("Thanks!").
_STOCK_SHARE = 0.12
#: Words of one invented topic, and how strongly a turn favours the topic's first words.
_TOPIC_WORDS = 150
_TOPIC_SKEW = 1.4


@dataclass(frozen=True)
class Topic:
    """An invented filler topic: its name and its own words."""

    name: str
    nouns: tuple[str, ...]
    verbs: tuple[str, ...]
    adjs: tuple[str, ...]


def reserved_words() -> set[str]:
    """Every content word of the vocabulary's English banks: pseudo-words must not collide with them."""
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.update(words(value))
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k)
                walk(v)

    for name, value in vars(vocabulary).items():
        if name[:1].isupper():
            walk(value)
    walk(DATE_MARK)
    return found | STOPWORDS



class Writer:
    """Cheap text generation from the banks, all through one ``random.Random``."""

    def __init__(self, rng: random.Random, settings: GeneratorSettings) -> None:
        self.rng = rng
        self.s = settings
        self.topics = self._make_topics(settings.filler_topics)

    # -- small pickers
    def pick(self, seq: Sequence[str]) -> str:
        return seq[self.rng.randrange(len(seq))]

    def store(self) -> str:
        return f"{self.pick(BRAND_A)} {self.pick(STORE_B)}"

    def hotel(self) -> str:
        return f"The {self.pick(BRAND_A)} {self.pick(HOTEL_B)}"

    def company(self) -> str:
        return f"{self.pick(BRAND_A)} {self.pick(COMPANY_B)}"

    def street(self) -> str:
        return f"{self.rng.randint(12, 980)} {self.pick(STREETS)} {self.pick(STREET_KINDS)}"

    def book(self) -> str:
        return f"The {self.pick(BOOK_ADJ)} {self.pick(BOOK_NOUN)}"

    def clock(self) -> str:
        hour = self.rng.randint(5, 21)
        minute = self.rng.choice((0, 10, 15, 20, 30, 40, 45, 50))
        suffix = "am" if hour < 12 else "pm"
        return f"{(hour - 1) % 12 + 1}:{minute:02d} {suffix}"

    def money(self, lo: int, hi: int) -> str:
        return f"${self.rng.randint(lo, hi):,}"

    def slots(self) -> dict[str, Any]:
        r = self.rng
        return {
            "rel": self.pick(RELATIONS), "name": self.pick(NAMES), "weekday": self.pick(WEEKDAYS),
            "clock": self.clock(), "n": r.randint(3, 19), "month": self.pick(MONTHS),
            "city": self.pick(CITIES), "day": r.randint(2, 28), "street": self.street(),
            "age": r.randint(21, 70),
        }

    # -- filler vocabulary
    def _pseudo_word(self, reserved: set[str]) -> str:
        r = self.rng
        while True:
            syllables = r.choice((1, 2, 2, 2, 2, 3))
            word = "".join(r.choice(ONSETS) + r.choice(NUCLEI) + r.choice(CODAS) for _ in range(syllables))
            if syllables < 3:
                word += r.choice(SUFFIXES)
            if len(word) >= 4 and word not in reserved:
                reserved.add(word)
                return word

    def _make_topics(self, count: int) -> list[Topic]:
        """``count`` invented topics; each draws its words from a shared pseudo-word pool."""
        reserved = set(reserved_words())
        pool = [self._pseudo_word(reserved) for _ in range(max(400, count * _TOPIC_WORDS // 3))]
        topics = []
        for _ in range(count):
            words_ = self.rng.sample(pool, _TOPIC_WORDS)
            third = _TOPIC_WORDS // 5
            nouns, verbs, adjs = tuple(words_[2 * third:]), tuple(words_[:third]), tuple(words_[third:2 * third])
            name = f"{adjs[0]} {nouns[0]}" if self.rng.random() < 0.5 else f"{nouns[0]} {nouns[1]}"
            topics.append(Topic(name, nouns, verbs, adjs))
        return topics

    def topic(self) -> Topic:
        """A random filler topic."""
        return self.topics[self.rng.randrange(len(self.topics))]

    def zipf(self, seq: Sequence[str], skew: float = 2.0) -> str:
        """An element of ``seq``, the earlier ones far more often (a rough Zipf law)."""
        return seq[int(len(seq) * self.rng.random() ** skew)]

    # -- filler prose
    def _slots(self, topic: Topic, phrase: str | None) -> dict[str, str]:
        k = _TOPIC_SKEW
        n = self.zipf(topic.nouns, k)
        n2 = self.zipf(topic.nouns, k)
        while n2 == n:
            n2 = self.zipf(topic.nouns, k)
        v, a = self.zipf(topic.verbs, k), self.zipf(topic.adjs, k)
        return {
            "t": phrase or topic.name, "n": n, "n2": n2, "v": v, "a": a, "a2": self.zipf(topic.adjs, k),
            "v2": self.zipf(topic.verbs, k), "v3": self.zipf(topic.verbs, k),
            "g": self.zipf(COMMON, 2.0), "g2": self.zipf(COMMON, 2.0),
            "A": a.capitalize(), "V": v.capitalize(),
        }

    def sentence(self, topic: Topic, phrase: str | None = None, mention: bool = False) -> str:
        """One advice sentence on ``topic``; with ``mention`` it is sure to name ``phrase`` (or the topic)."""
        frame = self.pick(MENTIONING if mention else FRAMES)
        return frame.format(**self._slots(topic, phrase))

    def prose(self, topic: Topic, target_tokens: int, opener: bool = True,
              phrases: Sequence[str] = ()) -> str:
        """Advice on ``topic`` of about ``target_tokens`` tokens (estimate: _TOKENS_PER_WORD)."""
        first = self.pick(OPENERS) if opener else ""
        parts = [first] if first else []
        words_ = 4
        goal = target_tokens / _TOKENS_PER_WORD

        def phrase() -> str | None:
            return self.pick(phrases) if phrases else None

        paragraph: list[str] = []
        while words_ < goal:
            if self.rng.random() < 0.15 and words_ + 60 < goal:
                if paragraph:
                    parts.append(" ".join(paragraph))
                    paragraph = []
                bullets = []
                for _ in range(self.rng.randint(3, 5)):
                    label = f"{self.zipf(topic.adjs).capitalize()} {self.zipf(topic.nouns)}"
                    body = self.sentence(topic, phrase())
                    bullets.append(f"- **{label}**: {body}")
                    words_ += len(body.split()) + 3
                parts.append(self.pick(LIST_LEADS) + "\n\n" + "\n".join(bullets))
                continue
            text = self.sentence(topic, phrase())
            paragraph.append(text)
            words_ += len(text.split())
            if len(paragraph) >= self.rng.randint(3, 5):
                parts.append(" ".join(paragraph))
                paragraph = []
        if paragraph:
            parts.append(" ".join(paragraph))
        closer = self.pick(CLOSERS)
        if closer:
            parts.append(closer)
        return "\n\n".join(parts)

    def concrete(self, topic: Topic, bank: Sequence[str]) -> str:
        """One concrete filler sentence from ``bank`` (numbers, names, places or dates)."""
        r = self.rng
        return self.pick(bank).format(
            n=r.randint(2, 30), m=r.randint(31, 60), k=r.randint(2, 9), money=r.choice((20, 50, 100, 200, 500)),
            pct=r.randint(10, 80), name=self.pick(NAMES), surname=self.pick(SURNAMES), city=self.pick(CITIES),
            month=self.pick(MONTHS), day=r.randint(2, 28), weekday=self.pick(WEEKDAYS), t=topic.name,
        )

    def with_facts(self, text: str, topic: Topic) -> str:
        """``text`` with concrete sentences inserted at the filler rates (one draw per kind)."""
        s = self.s
        extra = [self.concrete(topic, bank) for rate, bank in (
            (s.filler_digit_rate, FILLER_NUMBERS), (s.filler_name_rate, FILLER_NAMES),
            (s.filler_date_rate, FILLER_DATES)) if self.rng.random() < rate]
        if not extra:
            return text
        parts = text.split("\n\n")
        for sentence in extra:
            at = self.rng.randrange(len(parts))
            parts[at] = f"{parts[at]} {sentence}"
        return "\n\n".join(parts)

    def assistant_filler(self, topic: Topic) -> str:
        lo, hi = self.s.filler_assistant_tokens
        return self.with_facts(self.prose(topic, self.rng.randint(lo, hi - 40)), topic)

    def statement(self, topic: Topic) -> str:
        """A first-person statement about the user, in passing."""
        slots = self._slots(topic, None)
        return self.pick(USER_STATEMENTS).format(
            t=topic.name, rel=self.pick(RELATIONS), n=slots["n"], weekday=self.pick(WEEKDAYS),
            k=self.rng.randint(2, 9))

    def user_filler(self, topic: Topic) -> str:
        r = self.rng
        if r.random() < _STOCK_SHARE:
            return self.pick(STOCK_USER)
        text = self.pick(USER_FILLER).format(**self._slots(topic, None))
        if r.random() < self.s.user_first_person_rate:
            text = f"{self.statement(topic)} {text}"
        if r.random() < self.s.long_user_share:
            lo, hi = self.s.filler_assistant_tokens
            return self.with_facts(f"{text}\n\n{self.prose(topic, r.randint(lo, hi - 40), opener=False)}", topic)
        if r.random() < 0.4:
            text += " " + self.sentence(topic)
        return text

    def echo(self, text: str, exclude: set[str], strength: float, swap: bool = True) -> str:
        """The restated part of ``text``: each sentence kept with probability ``strength``,
        without numbers or the ``exclude`` words (with ``swap``, in the second person);
        empty when nothing is kept."""
        kept: list[str] = []
        for sentence in re.split(r"(?<=[.!?])\s+", text.replace(DATE_MARK, "")):
            if self.rng.random() >= strength:
                continue
            tokens = []
            for tok in sentence.split():
                if any(c.isdigit() for c in tok) or set(words(tok)) & exclude:
                    continue
                bare = tok.strip(".,;:!?()").lower()
                tokens.append(SECOND_PERSON.get(bare, tok.strip(".,;:!?()")) if swap else tok.strip(".,;:!?()"))
            if len(words(" ".join(tokens))) >= 2:
                kept.append(" ".join(tokens))
        return "; ".join(kept)

    def mention(self, text: str, exclude: set[str], share: float) -> str:
        """Words of ``text`` said again in passing: each word kept with probability ``share``, in order,
        without numbers or the ``exclude`` words (how much a later turn shares with it varies smoothly)."""
        kept = []
        for tok in text.replace(DATE_MARK, "").split():
            bare = tok.strip(".,;:!?()\"'")
            if not bare or any(c.isdigit() for c in bare) or set(words(bare)) & exclude:
                continue
            if self.rng.random() < share:
                kept.append(bare)
        return " ".join(kept)

    # -- evidence: a fact in an ordinary turn
    def gold_size(self) -> int:
        """An evidence turn's target size: the size of a filler turn drawn here, within ``gold_tokens``.

        Half the turns of a history are the assistant's, half the user's, so the
        turn is either, whatever the evidence turn's role: its size is ordinary
        within its history, long ones included.
        """
        topic = self.topic()
        turn = self.assistant_filler(topic) if self.rng.random() < self.s.gold_long_share else self.user_filler(topic)
        lo, hi = self.s.gold_tokens
        return min(max(count_tokens([turn])[0], lo), hi)

    def evidence(self, core: str) -> str:
        """A user turn that states ``core`` in passing, among ordinary words about something else."""
        lead = self.pick(("", "Oh, by the way: ", "Quick update: ", "Side note, ", "Also, "))
        body = core[0].upper() + core[1:] if not lead else core
        topic = self.topic()

        def more(tokens: int) -> str:
            ask = self.pick(USER_FILLER).format(**self._slots(topic, None))
            if tokens < 60:
                return ask
            return f"{ask}\n\n{self.prose(topic, tokens - 15, opener=False)}"

        return self._pad(lead + body, self.gold_size(), more)

    def assistant_evidence(self, core: str) -> str:
        """An assistant turn with the recommendation ``core`` inside ordinary advice prose."""
        topic = self.topic()
        return self._pad(core, self.gold_size(),
                         lambda tokens: self.prose(topic, max(20, tokens), opener=False))

    def _pad(self, core: str, target: int, more: Callable[[int], str]) -> str:
        """``core`` followed by ``more(tokens)`` to reach about ``target`` tokens (at most 10% over it)."""
        have = count_tokens([core])[0]
        if target - have < 12:
            return core
        text = f"{core} {more(target - have)}"
        limit = min(self.s.gold_tokens[1], int(target * 1.1) + 10)
        while count_tokens([text])[0] > limit:  # the prose's size is an estimate: trim whole paragraphs
            head, sep, _tail = text.rpartition("\n\n")
            text = head if sep and head.startswith(core) and len(head) > len(core) else core
        return text

    def reply(self, phrase: str) -> str:
        """A short assistant reply to an evidence turn, on a filler topic, naming ``phrase``."""
        return self.prose(self.topic(), self.rng.randint(90, 220), phrases=(phrase,))

    # -- distractors
    def distractor_pair(self, terms: tuple[str, str], long_assistant: bool,
                        filler: Callable[[], str]) -> tuple[str, str]:
        a, b = terms
        user = self.pick(USER_DISTRACTORS).format(a=a, b=b, **self.slots())
        if not long_assistant:
            return user, filler()
        lo, hi = self.s.distractor_mentions
        mentions = self.rng.randint(lo, hi)
        lo_t, hi_t = self.s.filler_assistant_tokens
        target = self.rng.randint(lo_t, hi_t - 40)
        topic = self.topic()
        paragraphs = [self.pick(OPENERS)]
        for i in range(mentions):
            paragraphs.append(self.sentence(topic, a if i % 2 == 0 else b, mention=True))
        body = self.prose(topic, max(60, target - 25 * mentions), opener=False,
                          phrases=("this", "the decision", "the whole process"))
        return user, " ".join(p for p in paragraphs if p) + "\n\n" + body

