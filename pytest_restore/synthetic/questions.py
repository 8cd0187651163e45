"""The questions of a synthetic history: the type mix and one builder per question type.

A builder plans a question: its text, its answer (or the abstention), the
evidence turns that hold the answer and the terms its distractors mention.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.synthetic.prose import DATE_MARK, Writer
from pytest_restore.synthetic.vocabulary import (
    ABSTENTION_MIX_500,
    ACTIVITIES,
    BOOK_NOUN,
    BRAND_A,
    CATEGORIES,
    CITIES,
    COLLECTIONS,
    COMMUTES,
    CUISINES,
    DEVICES,
    DIETS,
    DISHES,
    EVENTS,
    EXERCISES,
    FUNDS,
    GENRES,
    INGREDIENTS,
    ITEMS,
    KEYBOARDS,
    MEALS,
    MONTHS,
    NAMES,
    NATIONALITIES,
    PETS,
    PODCAST_TOPICS,
    PROJECTS,
    QUESTION_TYPES,
    RACES,
    RELATIONS,
    ROLES,
    ROOMS,
    SEASONS,
    SKILLS,
    STREETS,
    TERRAINS,
    TYPE_MIX_500,
    UPDATES,
    WEEKDAYS,
    WINDOWS,
    WORKOUTS,
)

# --------------------------------------------------------------------------- mix


def _largest_remainder(total: int, weights: dict[str, int]) -> dict[str, int]:
    """Split ``total`` in proportion to ``weights``; ties go to the earlier key."""
    weight_sum = sum(weights.values())
    if weight_sum == 0 or total <= 0:
        return {k: 0 for k in weights}
    quotas = {k: total * w / weight_sum for k, w in weights.items()}
    counts = {k: math.floor(q) for k, q in quotas.items()}
    order = list(weights)
    left = total - sum(counts.values())
    by_remainder = sorted(order, key=lambda k: (-(quotas[k] - counts[k]), order.index(k)))
    for k in by_remainder[:left]:
        counts[k] += 1
    return counts


def type_mix(n: int) -> dict[str, int]:
    """Questions per type for ``n`` questions: the benchmark's mix scaled by largest remainder.

    When ``n >= 6`` every type gets at least one question (a missing type takes
    one from the largest), so every type is present for ``n >= 12`` as promised.
    """
    if n < 0:
        raise ValueError(f"questions must be >= 0, got {n}")
    counts = _largest_remainder(n, TYPE_MIX_500)
    if n >= len(QUESTION_TYPES):
        for qtype in QUESTION_TYPES:
            if counts[qtype] == 0:
                largest = max(QUESTION_TYPES, key=lambda k: (counts[k], -QUESTION_TYPES.index(k)))
                counts[largest] -= 1
                counts[qtype] += 1
    return counts


def abstention_mix(n: int) -> dict[str, int]:
    """Abstention questions per type for ``n`` questions (30 of 500, scaled).

    The total is ``round(30 n / 500)``, split over the types that have
    abstention questions by largest remainder; each type keeps at least one
    question that is not an abstention.
    """
    types = type_mix(n)
    total = math.floor(sum(ABSTENTION_MIX_500.values()) * n / 500 + 0.5)
    split = _largest_remainder(total, ABSTENTION_MIX_500)
    result = {qtype: 0 for qtype in QUESTION_TYPES}
    for qtype, count in split.items():
        result[qtype] = max(0, min(count, types[qtype] - 1))
    return result


@dataclass
class Gold:
    """One evidence pair: the ``has_answer`` turn and its partner turn."""

    role: str  # role of the evidence turn
    text: str  # may hold DATE_MARK, filled with the session's date
    partner: str  # the other turn of the pair


@dataclass
class Plan:
    question: str
    answer: str | Callable[[list[dt.datetime], dt.datetime], str]
    golds: list[Gold]
    terms: tuple[str, str]
    forbidden: tuple[str, ...] = ()
    min_day_gap: bool = False  # gold sessions (and question date) on distinct days
    subtype: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _a(noun: str) -> str:
    """``noun`` with an indefinite article; plural nouns go bare."""
    if noun.endswith("s") and not noun.endswith(("ss", "us")):
        return noun
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _abstain_answer(what: str) -> str:
    return f"The information provided is not enough: you did not mention {what}."



# --------------------------------------------------------------------------- question builders


def _plan_ssu(w: Writer, abstain: bool) -> Plan:
    r = w.rng
    kind = r.randrange(6)
    item = w.pick(ITEMS)
    alt_item = w.pick([x for x in ITEMS if x != item])
    if kind == 0:
        store = w.store()
        core = f"I finally bought my {item} at {store} last {w.pick(WEEKDAYS)}."
        q = "Where did I buy my {x}?"
        ans, terms = store, (_a(item), f"where to buy {_a(item)}")
    elif kind == 1:
        price = w.money(40, 2400)
        core = f"I paid {price} for my {item} at {w.store()}, which felt like a lot."
        q = "How much did I pay for my {x}?"
        ans, terms = price, (_a(item), f"how much to pay for {_a(item)}")
    elif kind == 2:
        name, rel = w.pick(NAMES), w.pick(RELATIONS)
        core = f"My {rel} {name} gave me {_a(item)} for my birthday on {w.pick(MONTHS)} {r.randint(2, 28)}."
        q = "Who gave me the {x} for my birthday?"
        ans, terms = name, (_a(item), f"{_a(item)} as a birthday gift")
    elif kind == 3:
        rel, name, city = w.pick(RELATIONS), w.pick(NAMES), w.pick(CITIES)
        item, alt_item = f"{rel} {name}", f"{rel} {w.pick([x for x in NAMES if x != name])}"
        core = f"My {rel} {name} just moved to {city} for a new job, {r.randint(2, 9)} hours from me."
        q = "Which city did my {x} move to?"
        ans, terms = city, (f"my {rel} moving", "moving to a new city")
    elif kind == 4:
        pet, name = w.pick(PETS), w.pick(NAMES)
        item = pet
        alt_item = w.pick([x for x in PETS if x != pet])
        core = f"I adopted {_a(pet)} from the shelter on {w.pick(WEEKDAYS)} and named her {name}."
        q = "What did I name my new {x}?"
        ans, terms = name, (f"a new {pet}", f"naming {_a(pet)}")
    else:
        act = w.pick(ACTIVITIES)
        item, alt_item = act, w.pick([x for x in ACTIVITIES if x != act])
        clock, day = w.clock(), w.pick(WEEKDAYS)
        core = f"My {act} class starts at {clock} on {day}s now, with {w.pick(NAMES)} teaching."
        q = "What time does my {x} class start?"
        ans, terms = clock, (_a(f"{act} class"), f"{act} class schedules")
    question = q.format(x=alt_item if abstain else item)
    text = w.evidence(core)
    return Plan(
        question=question,
        answer=_abstain_answer(alt_item) if abstain else ans,
        golds=[Gold("user", text, w.reply(terms[0]))],
        terms=terms,
        forbidden=(alt_item,) if abstain else (),
        subtype=f"ssu{kind}",
    )


def _plan_ssa(w: Writer, abstain: bool) -> Plan:
    r = w.rng
    kind = r.randrange(5)
    if kind == 0:
        city = w.pick(CITIES)
        hotel = w.hotel()
        prompt = f"I'm planning a trip to {city} in {w.pick(MONTHS)}. Any hotel suggestions?"
        text = (f"For {city}, I'd book {hotel} on {w.street()}: rooms run about {w.money(120, 420)} "
                f"a night, it is {r.randint(5, 25)} minutes on foot from the old town, and breakfast "
                f"starts at {w.clock()}. A quieter backup is {w.hotel()} near the station.")
        q, ans, terms = f"What hotel did you recommend first for my trip to {city}?", hotel, (
            f"a trip to {city}", f"hotels in {city}")
    elif kind == 1:
        skill = w.pick(SKILLS)
        title, author = w.book(), f"{w.pick(NAMES)} {w.pick(STREETS)}"
        prompt = f"I want to learn {skill} this year. Is there one book you'd start with?"
        text = (f"For {skill}, start with {title} by {author} ({r.randint(1995, 2022)}, "
                f"{r.randint(180, 420)} pages). Read chapters {r.randint(1, 3)} to {r.randint(4, 7)} "
                f"first, then practice for {r.randint(15, 45)} minutes a day.")
        q, ans, terms = f"Which book did you suggest for learning {skill}?", title, (
            f"learning {skill}", f"books about {skill}")
    elif kind == 2:
        dish, ing = w.pick(DISHES), w.pick(INGREDIENTS)
        prompt = f"My {dish} always tastes flat. How can I fix it for {w.pick(WEEKDAYS)}?"
        text = (f"Add {ing} to your {dish}: about {r.randint(1, 3)} teaspoons, stirred in "
                f"{r.randint(5, 15)} minutes before the end, and salt in {r.randint(2, 4)} stages. "
                f"Cook it at {r.choice((325, 350, 375, 400))} degrees Fahrenheit if it goes in the oven.")
        q, ans, terms = f"What ingredient did you tell me to add to my {dish}?", ing, (
            f"my {dish}", f"making {dish}")
    elif kind == 3:
        ex = w.pick(EXERCISES)
        sets, reps = r.randint(3, 6), r.randint(6, 15)
        prompt = f"How should I program {ex} for my {w.pick(WEEKDAYS)} workouts?"
        text = (f"Do {sets} sets of {reps} {ex}, resting {r.choice((60, 90, 120))} seconds between "
                f"sets, {r.randint(2, 3)} times a week. Add {r.randint(1, 2)} reps each week until "
                f"you reach {reps + 5}, then add weight.")
        q, ans, terms = f"How many sets of {ex} did you suggest per workout?", f"{sets} sets", (
            f"{ex} workouts", f"programming {ex}")
    else:
        proj = w.pick(PROJECTS)
        names = [f"{w.pick(BRAND_A)} {w.pick(BOOK_NOUN)}" for _ in range(3)]
        prompt = f"I'm starting a {proj} with my {w.pick(RELATIONS)} {w.pick(NAMES)}. Name ideas?"
        text = (f"Three names for your {proj}: 1. {names[0]}, 2. {names[1]}, 3. {names[2]}. "
                f"I'd check the domain and register by {w.pick(MONTHS)} {r.randint(2, 28)}.")
        q, ans, terms = f"What was the first name you suggested for my {proj}?", names[0], (
            f"my {proj}", f"names for a {proj}")
    return Plan(question=q, answer=ans, golds=[Gold("assistant", w.assistant_evidence(text), prompt)],
                 terms=terms, subtype=f"ssa{kind}")


def _plan_pref(w: Writer, abstain: bool) -> Plan:
    r = w.rng
    kind = r.randrange(5)
    if kind == 0:
        pref = f"{w.pick(DIETS)} {w.pick(CUISINES)} dishes with {w.pick(INGREDIENTS)}"
        meal = w.pick(MEALS)
        core = (f"whenever I look for a {meal} recipe, I stick to {pref}, ever since "
                f"{w.pick(MONTHS)} {r.randint(2019, 2022)}.")
        q = f"Can you suggest a {meal} recipe for this {w.pick(WEEKDAYS)}?"
        terms = ("a recipe", "cooking ideas")
    elif kind == 1:
        pref = f"{w.pick(PODCAST_TOPICS)} podcasts under {r.choice((20, 30, 40, 45))} minutes"
        commute = w.pick(COMMUTES)
        core = f"for my {commute} I only listen to {pref}, {r.randint(4, 6)} days a week."
        q = f"Any podcast recommendations for my {commute} in {w.pick(MONTHS)}?"
        terms = ("podcast recommendations", "podcasts")
    elif kind == 2:
        pref = f"quiet {w.pick(TERRAINS)} towns within {r.randint(2, 5)} hours by train"
        core = f"for a weekend trip I always pick {pref} of {w.pick(CITIES)}."
        q = f"Where should I go for a weekend trip in {w.pick(MONTHS)} with my {w.pick(RELATIONS)}?"
        terms = ("a weekend trip", "weekend trips")
    elif kind == 3:
        pref = f"{w.pick(GENRES)} novels by {w.pick(NATIONALITIES)} authors"
        device = w.pick(DEVICES)
        core = f"lately I read almost only {pref} on my {device}, about {r.randint(2, 6)} a month."
        q = f"What should I read next on my {device} this {w.pick(SEASONS)}?"
        terms = ("what to read next", "reading")
    else:
        pref = f"low-impact {w.pick(WORKOUTS)} routines of about {r.choice((20, 30, 40))} minutes"
        core = f"since my knee injury in {w.pick(MONTHS)}, any workout plan I follow has to be {pref}."
        q = f"Can you put together a workout plan for {w.pick(SEASONS)} {w.pick(WEEKDAYS)}s?"
        terms = ("a workout plan", "workouts")
    return Plan(question=q, answer=f"The user would prefer {pref}.",
                 golds=[Gold("user", w.evidence(core), w.reply(terms[1]))], terms=terms,
                 subtype=f"pref{kind}")


def _join_list(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plan_multi(w: Writer, abstain: bool) -> Plan:
    r = w.rng
    cat_index = r.randrange(len(CATEGORIES))
    plural, _past, perfect, phrase, instances = CATEGORIES[cat_index]
    k = r.randint(2, 4)
    chosen = r.sample(instances, k)
    form = r.randrange(3)
    window = w.pick(WINDOWS)
    golds = []
    prices = [r.randint(12, 240) for _ in chosen]
    for x, price in zip(chosen, prices):
        when = w.pick(("today", "this morning", "yesterday", f"on {w.pick(WEEKDAYS)}"))
        cost = f" It was ${price}." if form == 2 else f" It cost me ${price}." if r.random() < 0.5 else ""
        # users tend to say what kind of thing it was ("another one for my ... list")
        tag = f" That's one more for my {plural} list." if r.random() < 0.7 else ""
        core = f"I {phrase.format(x=x)} {when}.{cost}{tag}"
        golds.append(Gold("user", w.evidence(core), w.reply(plural)))
    ask_plural, ask_perfect = plural, perfect
    if abstain:
        other = CATEGORIES[(cat_index + r.randint(1, len(CATEGORIES) - 1)) % len(CATEGORIES)]
        ask_plural, ask_perfect = other[0], other[2]
    if form == 0:
        q = f"How many {ask_plural} have I {ask_perfect} {window}?"
        ans = str(k)
    elif form == 1:
        q = f"Which {ask_plural} have I {ask_perfect} {window}?"
        ans = _join_list([x.removeprefix("a ").removeprefix("an ") for x in chosen])
    else:
        q = f"How much have I spent on {ask_plural} {window}?"
        ans = f"${sum(prices):,}"
    return Plan(
        question=q,
        answer=_abstain_answer(f"any {ask_plural}") if abstain else ans,
        golds=golds,
        terms=(plural, f"what people spend on {plural}" if form == 2 else f"which {plural} are worth it"),
        forbidden=(ask_plural,) if abstain else (),
        subtype=f"multi{form}",
    )


def _fill_event(w: Writer, pair: tuple[str, str]) -> tuple[str, str]:
    values = {
        "pet": w.pick(PETS), "name": w.pick(NAMES), "company": w.company(),
        "city": w.pick(CITIES), "street": w.street().split(" ", 1)[1], "skill": w.pick(SKILLS),
        "item": w.pick(ITEMS), "activity": w.pick(ACTIVITIES), "room": w.pick(ROOMS),
        "project": w.pick(PROJECTS),
    }
    return pair[0].format(**values), pair[1].format(**values)


def days_between(later: dt.datetime, earlier: dt.datetime) -> int:
    return (later.date() - earlier.date()).days


def _plan_temporal(w: Writer, abstain: bool) -> Plan:
    r = w.rng
    form = 0 if abstain else r.randrange(3)
    e1, e2, e3 = (_fill_event(w, p) for p in r.sample(EVENTS, 3))

    def gold(event: str) -> Gold:
        core = w.pick((
            f"big news, I {event} today ({DATE_MARK})!",
            f"today, {DATE_MARK}, I {event}.",
            f"I {event} this morning, {DATE_MARK}.",
        ))
        return Gold("user", w.evidence(core), w.reply("the news"))

    answer: str | Callable[[list[dt.datetime], dt.datetime], str]
    if form == 0:
        second = e3 if abstain else e2
        q = f"How many days passed between the day I {e1[0]} and the day I {second[0]}?"
        golds = [gold(e1[0]), gold(e2[0])]
        if abstain:
            answer = _abstain_answer(f"that you {e3[0]}")
        else:
            def answer(dates: list[dt.datetime], qdate: dt.datetime) -> str:
                return f"{days_between(dates[1], dates[0])} days"
    elif form == 1:
        q = f"How many days ago did I {e1[1]}?"
        golds = [gold(e1[0])]

        def answer(dates: list[dt.datetime], qdate: dt.datetime) -> str:
            return f"{days_between(qdate, dates[0])} days ago"
    else:
        first, later = e1, e2
        shown = (first, later) if r.random() < 0.5 else (later, first)
        q = f"Which did I do first: {shown[0][1]}, or {shown[1][1]}?"
        golds = [gold(first[0]), gold(later[0])]
        answer = first[0]
    words = e1[1].split()
    return Plan(
        question=q, answer=answer, golds=golds,
        terms=(" ".join(words[-3:]), e1[1]),
        forbidden=(e3[0],) if abstain else (),
        min_day_gap=True,
        subtype=f"temporal{form}",
    )


def _update_value(w: Writer, kind: str) -> str:
    r = w.rng
    if kind == "time":
        return f"{r.randint(18, 240)}:{r.randint(0, 59):02d}"
    if kind == "count":
        return str(r.randint(3, 60))
    if kind == "money":
        return w.money(600, 4200)
    if kind == "name":
        return f"{w.pick(NAMES)} {w.pick(STREETS)}"
    if kind == "city":
        return w.pick(CITIES)
    if kind == "days":
        return f"{r.randint(1, 6)} days a week"
    if kind == "steps":
        return f"{r.randint(5, 18) * 1000:,} steps"
    if kind == "place":
        return f"{w.pick(BRAND_A)} Fitness"
    if kind == "pages":
        return f"{r.randint(20, 600)} pages"
    if kind == "clock":
        return w.clock()
    if kind == "wpm":
        return f"{r.randint(40, 140)} words per minute"
    raise ValueError(kind)


def _plan_update(w: Writer, abstain: bool) -> Plan:
    r = w.rng
    index = r.randrange(len(UPDATES))
    question, statement, kind = UPDATES[index]
    slot = {
        "race": w.pick(RACES), "collection": w.pick(COLLECTIONS), "street": w.pick(STREETS) + " Street",
        "role": w.pick(ROLES), "rel": w.pick(RELATIONS), "name": w.pick(NAMES),
        "activity": w.pick(ACTIVITIES), "device": w.pick(("phone", "smartwatch", "fitness band")),
        "book": w.book(), "weekday": w.pick(WEEKDAYS), "fund": w.pick(FUNDS),
        "keyboard": w.pick(KEYBOARDS),
    }
    old = _update_value(w, kind)
    new = _update_value(w, kind)
    while new == old:
        new = _update_value(w, kind)
    fact = statement.format(v="{v}", **slot)
    old_text = w.evidence(fact.format(v=old) + ".")
    new_text = w.evidence(w.pick((
        f"update: {fact.format(v=new)} now, not {old} anymore.",
        f"things changed, {fact.format(v=new)} as of this week.",
        f"small milestone: {fact.format(v=new)} now.",
    )))
    asked = original = question.format(**slot)
    forbidden: tuple[str, ...] = ()
    if abstain:
        key = next(k for k in slot if "{" + k + "}" in question)
        bank = {"race": RACES, "collection": COLLECTIONS, "role": ROLES, "rel": RELATIONS,
                "name": NAMES, "activity": ACTIVITIES, "fund": FUNDS, "keyboard": KEYBOARDS,
                "weekday": WEEKDAYS, "device": ("tablet", "treadmill")}
        if key in bank:
            alt = w.pick([x for x in bank[key] if x != slot[key]])
        elif key == "book":
            alt = w.book()
            while alt == slot["book"]:
                alt = w.book()
        else:
            alt = w.pick(STREETS) + " Road"
        asked = question.format(**{**slot, key: alt})
        forbidden = (statement.format(**{**slot, key: alt, "v": "{v}"}).split("{v}")[0].strip(),)
        what = asked.rstrip("?")
        answer = _abstain_answer(f"anything about this ({what.lower()})")
    else:
        answer = new
    first_word = statement.split("{")[0].strip()
    key_phrase = original.rstrip("?").split(" ", 3)[-1]
    return Plan(
        question=asked, answer=answer,
        golds=[Gold("user", old_text, w.reply(first_word or "that")),
               Gold("user", new_text, w.reply(first_word or "that"))],
        terms=(key_phrase, fact.split("{v}")[0].strip()),
        forbidden=forbidden,
        subtype=f"update{index}",
    )


BUILDERS: dict[str, Callable[[Writer, bool], Plan]] = {
    "multi-session": _plan_multi,
    "temporal-reasoning": _plan_temporal,
    "knowledge-update": _plan_update,
    "single-session-user": _plan_ssu,
    "single-session-assistant": _plan_ssa,
    "single-session-preference": _plan_pref,
}
