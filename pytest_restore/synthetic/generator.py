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
  and its size is drawn like any turn of the history (within ``gold_tokens``):
  its length and its fact density sit inside its history's range, not at an
  end of it. As in real chats, the next turn restates part of the evidence
  (the assistant's reply to a user's evidence turn; the user's follow-up to an
  assistant's): each evidence sentence with a per-question probability drawn
  from ``echo_strength``, without numbers or the answer's words.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_restore.data.tokens import count_tokens
from pytest_restore.data.words import STOPWORDS, words

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

#: The six LongMemEval question types, in the order the mix lists them.
QUESTION_TYPES: tuple[str, ...] = (
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
)

#: Questions per type in the 500-question benchmark (abstention included).
TYPE_MIX_500: dict[str, int] = {
    "multi-session": 133,
    "temporal-reasoning": 133,
    "knowledge-update": 78,
    "single-session-user": 70,
    "single-session-assistant": 56,
    "single-session-preference": 30,
}

#: Abstention questions per type among the 500 (30 in all).
ABSTENTION_MIX_500: dict[str, int] = {
    "multi-session": 12,
    "temporal-reasoning": 6,
    "knowledge-update": 6,
    "single-session-user": 6,
}


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


# --------------------------------------------------------------------------- word banks
# Filler: lowercase, no digits, no proper names. Real chat filler (ShareGPT,
# UltraChat) is lexically diverse: two unrelated turns share few content words,
# while turns of one conversation share its topic's words. The generator builds
# that from invented topic vocabularies (pseudo-words, drawn per call from the
# seed) set in English frames whose own content words are few and varied.

_ONSETS = (
    "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
    "br", "cr", "dr", "fl", "gr", "pl", "pr", "sk", "st", "tr", "sh", "ch", "th", "sp", "bl", "gl",
)
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ou", "ie", "oa")
_CODAS = ("", "", "", "", "n", "r", "l", "s", "t", "m", "nd", "st", "rk", "ng")
_SUFFIXES = ("", "", "", "", "", "", "ing", "er", "ion", "al", "ment", "ic")

#: Common English content words: the shared background of all prose (Zipf-weighted, first = commonest).
_COMMON = (
    "make", "time", "use", "way", "need", "help", "good", "work", "first", "keep", "find", "start",
    "try", "different", "important", "part", "change", "thing", "look", "often", "people", "sure",
    "right", "small", "best", "each", "give", "example", "point", "next", "want", "usually",
    "later", "quick", "easy", "clear", "simple", "likely", "enough", "several", "along", "rather",
    "whole", "early", "common", "useful", "step", "idea", "place", "kind", "sense", "choice",
    "approach", "option", "detail", "result", "reason", "case", "order", "level", "basis", "area",
    "shape", "effect", "factor", "feature", "range", "rule", "role", "source", "stage", "standard",
    "method", "pattern", "balance", "context", "effort", "habit", "limit", "practice", "process",
    "routine", "schedule", "structure", "system", "target", "version", "window", "budget", "draft",
    "outline", "summary", "overview", "review", "feedback", "progress", "priority", "resource",
    "strategy", "framework", "setting", "environment", "checklist", "reminder", "boundary",
    "consistent", "flexible", "practical", "realistic", "gentle", "focused", "reliable",
    "manageable", "balanced", "thoughtful", "careful", "broad", "specific", "modest",
    "sustainable", "honest", "calm", "steady", "gradually", "regularly", "carefully", "weekly",
    "daily", "patient", "notice", "adjust", "track", "organize", "simplify", "revisit", "compare",
    "measure", "refine", "share", "explore", "protect", "prepare", "improve", "avoid", "plan",
    "goal", "task", "question", "challenge", "outcome", "tool", "project", "energy", "mistake",
)
_OPENERS = (
    "Great question!", "Sure, here are a few thoughts.", "That is a common concern.",
    "Happy to help with that.", "Good thinking.", "Of course.", "That makes sense.",
    "There are a few ways to look at this.", "Absolutely.", "Here is how I would think about it.",
    "Let's break it down.", "Nice, this is a fun one.", "Good point.", "Certainly.",
    "It depends a little on your situation, but here goes.", "",
)
_CLOSERS = (
    "I hope this helps, and let me know if you want more detail on any of these points.",
    "Feel free to ask if you would like to go deeper on any part of this.",
    "Let me know how it goes, and we can adjust the plan from there.",
    "If you share a little more about your situation, I can tailor these suggestions.",
    "Good luck!", "Want me to turn this into a checklist?", "Does that answer your question?",
    "Happy to expand on any of it.", "", "", "",
)
#: Frames of assistant prose, mostly stopwords and slots: {t} topic phrase, {n} {n2} topic
#: nouns, {v} {v2} {v3} topic verbs, {a} {a2} topic adjectives, {g} {g2} common words.
_FRAMES = (
    "When it comes to {t}, {v} the {n} before the {n2}.",
    "A {a} {n} is {g} for the {n2}.",
    "Most of the {n} is about how you {v} it.",
    "{V} one {n} at a time, not all of them at once.",
    "It is {g} to keep the {n} {a}, because the {n2} will follow.",
    "If the {n} is too much, {v} it into {a} {n2}.",
    "There is no single {g} here; the {a} {n} is the one you can keep.",
    "How does your {n} fit with the {n2}?",
    "With {t}, the {n} is rarely {a} at first.",
    "Another {g} is to {v} your {n} with the {n2}.",
    "Your {n} and your {n2} should {v} each other.",
    "{V} the {n} before you {v2} the {n2}.",
    "{A} {n} tends to {v} the {n2}.",
    "Which {n} gives you the most {g}? {V} around that.",
    "Over time, a {a} {n} will {v} on its own.",
    "Think of {t} as a {g} you {v}, not a {n}.",
    "You can also {v} the {n} with a {n2}.",
    "The most {g} {n} is to {v} too many {n2} at once.",
    "Once the {n} is {a}, {v} the {n2} as well.",
    "For {t}, the {n} and the {n2} matter more than the {g}.",
    "People who {v} their {n} early get a {a} {n2}.",
    "Keep a {a} {n}; a {g} will show up.",
    "Why does the {n} matter? Because the {n2} is built on it.",
    "{V} the {n}, then see whether the {n2} still makes {g}.",
    "If you only do one thing, {v} the {n}.",
    "The {n2} is where most of the {g} goes, so {v} it.",
    "Some prefer a {a} {n}; others {v} the {n2} instead.",
    "It is fine to skip the {n} and come back to it.",
    "What is the {n} for? Would a {a} {n2} do?",
    "Pair the {n} with a {a} {n2}.",
    "A {a} {n} takes a while to {v}.",
    "Start with the {n}, since the rest of {t} depends on it.",
    "{V} the {n} and {v2} it again after a {g}.",
    "You do not need a {a} {n}; a {a2} one is {g}.",
    "Once you can {v} the {n}, move on to the {n2}.",
    "A {a} {n} and a {a2} {n2} {v} well together.",
    "The {n} of the {n2} is {a}, so {v} it {g}.",
    "Is your {n} {a} or {a2}? It {g2} the {n2}.",
    "{V} your {n}, {v2} your {n2}, and {v3} the rest.",
    "Between the {n} and the {n2}, {v} the {a} one.",
    "In {t}, a {n} is only as {a} as its {n2}.",
    "Do not {v} the {n} until the {n2} is {a}.",
    "The {a} {n} is what most people {v} first.",
    "{V} and {v2}: that is most of the {n}.",
)
_MENTIONING = tuple(f for f in _FRAMES if "{t}" in f)
_USER_FILLER = (
    "Can you give me some tips on {t}?",
    "What is a good way to get started with {t}?",
    "How do people stay motivated with {t} when things get busy?",
    "Could you explain the basics of {t} in plain terms?",
    "What are common mistakes people make with {t}?",
    "I'm trying to get better at {t}. What should I focus on first?",
    "What would a realistic weekly plan for {t} look like?",
    "Is there anything I should avoid when it comes to {t}?",
    "How do I know whether my approach to {t} is working?",
    "Should I {v} the {n} first or the {n2}?",
    "What is the difference between a {a} {n} and a {n2}?",
    "How would you {v} a {n} for {t}?",
    "Is a {a} {n} really necessary?",
    "Can you explain the {n} part again?",
    "Why does the {n} matter so much for {t}?",
    "What if I {v} the {n2} instead?",
)
#: Short stock user turns that recur across conversations, as in real chat logs.
_STOCK_USER = (
    "Thanks!", "Thank you, that helps.", "Got it, thanks.", "Could you summarize that as a shorter list?",
    "Can you expand on the second point?", "That makes sense. What else should I keep in mind?",
    "Perfect.", "Interesting, tell me more.", "Can you give an example?", "Ok, thanks a lot!",
)

# Fact banks: proper names, places, items. Evidence and distractors draw from these.
_NAMES = (
    "Priya", "Marcus", "Elena", "Tomas", "Aisha", "Jonah", "Mei", "Rafael", "Ingrid", "Kofi",
    "Leila", "Dmitri", "Hana", "Oscar", "Nadia", "Felix", "Yuki", "Samir", "Clara", "Mateo",
    "Zara", "Henrik", "Amara", "Luca", "Sofia", "Darius", "Imani", "Theo", "Rosa", "Kenji",
    "Freya", "Omar", "Lena", "Caleb", "Anika", "Bruno", "Noor", "Elliot", "Maya", "Ravi",
)
_RELATIONS = (
    "sister", "brother", "cousin", "coworker", "neighbor", "roommate", "manager", "best friend",
    "aunt", "uncle", "mom", "dad", "mentor", "college friend", "landlord",
)
_CITIES = (
    "Lisbon", "Denver", "Osaka", "Toronto", "Austin", "Edinburgh", "Seattle", "Melbourne",
    "Portland", "Chicago", "Vancouver", "Dublin", "Boston", "Prague", "Nashville", "Montreal",
    "Copenhagen", "San Diego", "Atlanta", "Vienna", "Minneapolis", "Barcelona", "Kyoto",
    "Pittsburgh", "Oslo", "Phoenix", "Amsterdam", "Savannah", "Helsinki", "Santa Fe",
    "Quebec City", "Raleigh", "Budapest", "Tucson", "Valencia", "Madison", "Porto", "Boise",
    "Reykjavik", "Charleston",
)
_BRAND_A = (
    "Copper", "Harbor", "Juniper", "Maple", "Cedar", "Silver", "Northgate", "Willow", "Granite",
    "Blue Heron", "Lantern", "Orchard", "Summit", "Riverside", "Old Mill", "Brightwater", "Red Fox",
    "Ember", "Kestrel", "Tidewater", "Ironwood", "Saltmarsh", "Bluebird", "Hollow Oak",
)
_STORE_B = (
    "Outfitters", "Supply Co.", "Market", "Goods", "Emporium", "Trading Post", "Home Store",
    "Depot", "Workshop", "Exchange",
)
_HOTEL_B = ("Inn", "Hotel", "Lodge", "Suites", "House")
_COMPANY_B = ("Labs", "Analytics", "Health", "Logistics", "Studios", "Partners", "Systems", "Foods")
_STREETS = (
    "Elm", "Larkspur", "Fulton", "Beacon", "Alder", "Prospect", "Mercer", "Hawthorne",
    "Delancey", "Orchard", "Juniper", "Chestnut", "Linden", "Bayview",
)
_STREET_KINDS = ("Street", "Avenue", "Lane", "Road")
_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ITEMS = (
    "road bike", "espresso machine", "standing desk", "air purifier", "hiking boots",
    "film camera", "electric kettle", "rowing machine", "winter coat", "robot vacuum",
    "noise-cancelling headphones", "sewing machine", "telescope", "yoga mat", "e-reader",
    "cast-iron pan", "tent", "office chair", "mechanical keyboard", "stand mixer",
    "drone", "record player", "sleeping bag", "smartwatch", "pressure cooker", "guitar amp",
    "kayak paddle", "paddleboard", "bread machine", "projector", "gaming monitor",
    "dehumidifier", "weighted blanket", "electric scooter", "ski jacket", "blender",
    "bookshelf", "drawing tablet", "camping stove", "space heater", "suitcase", "desk lamp",
    "rain jacket", "label printer", "portable speaker", "microphone", "handheld vacuum",
    "mattress topper", "bike helmet", "trail running shoes",
)
_PETS = (
    "kitten", "puppy", "rabbit", "parakeet", "hamster", "tortoise", "goldfish", "beagle",
    "tabby cat", "corgi", "guinea pig", "gecko",
)
_ACTIVITIES = (
    "pottery", "salsa", "spin", "watercolor", "improv", "rock climbing", "Spanish", "yoga",
    "kickboxing", "jazz piano", "woodworking", "swim", "barre", "photography", "ceramics",
    "tango", "Pilates", "calligraphy", "fencing", "choir",
)
_SKILLS = (
    "woodworking", "bread baking", "Python", "public speaking", "watercolor painting",
    "negotiation", "bookkeeping", "film photography", "knitting", "chess strategy",
    "Japanese", "data visualization", "home brewing", "guitar", "interior design",
    "rock climbing", "birdwatching", "screenwriting", "gardening", "statistics",
    "bike repair", "sign language", "meditation", "sourdough", "calligraphy",
)
_BOOK_ADJ = (
    "Quiet", "Patient", "Curious", "Practical", "Honest", "Hidden", "Steady", "Open", "Careful",
    "Wandering", "Small", "Bright", "Second", "Long",
)
_BOOK_NOUN = (
    "Workshop", "Harbor", "Apprentice", "Compass", "Garden", "Ledger", "Lantern", "Orchard",
    "Atlas", "Kitchen", "Notebook", "Bridge", "Field", "Method",
)
_DISHES = (
    "lentil soup", "mushroom risotto", "chicken curry", "black bean chili", "banana bread",
    "shakshuka", "pad thai", "ramen broth", "vegetable lasagna", "roast chicken",
    "potato gratin", "fish tacos", "minestrone", "chocolate cake", "pancake batter",
    "tomato sauce", "guacamole", "granola", "fried rice", "butternut squash soup",
)
_INGREDIENTS = (
    "smoked paprika", "miso paste", "fish sauce", "lemon zest", "tahini", "anchovies",
    "brown butter", "sumac", "fresh thyme", "chipotle", "star anise", "maple syrup",
    "capers", "nutmeg", "sherry vinegar", "ginger", "saffron", "toasted sesame oil",
)
_EXERCISES = (
    "squats", "push-ups", "lunges", "deadlifts", "planks", "pull-ups", "kettlebell swings",
    "burpees", "rows", "step-ups", "bench presses", "glute bridges",
)
_PROJECTS = (
    "bakery", "podcast", "newsletter", "bike repair shop", "candle business", "book club",
    "food truck", "tutoring service", "photography studio", "plant shop", "running group",
    "board game cafe", "dog-walking business", "YouTube channel", "craft brewery",
)
_DIETS = ("vegetarian", "vegan", "pescatarian", "gluten-free", "dairy-free", "low-sodium")
_CUISINES = ("Thai", "Mexican", "Italian", "Korean", "Ethiopian", "Greek", "Indian", "Japanese")
_PODCAST_TOPICS = (
    "history", "science", "true crime", "economics", "design", "sports", "comedy", "philosophy",
)
_GENRES = ("mystery", "science fiction", "historical fiction", "fantasy", "literary", "thriller")
_NATIONALITIES = ("Nigerian", "Japanese", "Irish", "Chilean", "Korean", "Canadian", "Indian")
_TERRAINS = ("coastal", "mountain", "lakeside", "wine-country", "desert", "forest")
_WORKOUTS = ("swimming", "cycling", "yoga", "rowing", "walking", "Pilates")
_SEASONS = ("spring", "summer", "autumn", "winter")
_MEALS = ("breakfast", "lunch", "dinner", "brunch")
_DEVICES = ("e-reader", "tablet", "phone", "library card")
_COMMUTES = ("drive to work", "morning walk", "train ride", "bus commute", "long run")

#: Multi-session categories: plural, past tense, present perfect, evidence verb phrase, instances.
_CATEGORIES: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    ("magazines", "subscribed to", "subscribed to", "subscribed to {x}",
     ("The New Yorker", "Architectural Digest", "National Geographic", "The Economist", "Wired",
      "Bon Appetit", "Runner's World", "Smithsonian", "The Atlantic", "Popular Science")),
    ("houseplants", "bought", "bought", "bought a {x}",
     ("fiddle-leaf fig", "snake plant", "monstera", "pothos", "ZZ plant", "peace lily",
      "rubber plant", "calathea", "string of pearls", "bird of paradise")),
    ("museums", "visited", "visited", "visited {x}",
     ("the Museum of Flight", "the Natural History Museum", "the Modern Art Museum",
      "the Science Center", "the Maritime Museum", "the Photography Museum",
      "the Textile Museum", "the Railway Museum", "the Glass Museum")),
    ("concerts", "went to", "gone to", "went to the {x} concert",
     ("Copper Tides", "Juniper Lane", "Night Orchard", "Silver Static", "The Kestrels",
      "Paper Lanterns", "Harbor Lights", "Velvet Compass", "Blue Ember")),
    ("online courses", "signed up for", "signed up for", "signed up for an online course called {x}",
     ("Intro to Data Visualization", "Beginner Watercolor", "Conversational Italian",
      "Home Electrical Basics", "Creative Writing Fundamentals", "Statistics for Everyone",
      "Digital Photography 101", "Sourdough Baking", "Financial Planning Basics")),
    ("board games", "bought", "bought", "bought a copy of {x}",
     ("Catan", "Wingspan", "Azul", "Ticket to Ride", "Carcassonne", "Pandemic", "Codenames",
      "Splendor", "Everdell", "Root")),
    ("kitchen gadgets", "bought", "bought", "bought {x}",
     ("an air fryer", "a stand mixer", "a sous vide cooker", "a rice cooker", "a milk frother",
      "a mandoline slicer", "a pasta maker", "a waffle iron", "a spice grinder")),
    ("hiking trails", "hiked", "hiked", "hiked {x}",
     ("the Eagle Ridge Trail", "the Cedar Falls Loop", "the Granite Peak Trail",
      "the Willow Creek Path", "the Summit Lake Trail", "the Fox Hollow Loop",
      "the Heron Point Trail", "the Old Mill Trail")),
    ("restaurants", "tried", "tried", "tried {x} for the first time",
     ("Saltmarsh Kitchen", "Red Fox Noodle Bar", "Ember Taqueria", "Lantern Bistro",
      "Orchard Cafe", "Ironwood Grill", "Bluebird Dumpling House", "Tidewater Oyster Bar")),
    ("streaming services", "subscribed to", "subscribed to", "subscribed to {x}",
     ("Netflix", "Hulu", "Disney+", "Max", "Peacock", "Apple TV+", "Paramount+", "Crunchyroll")),
    ("volunteer events", "volunteered at", "volunteered at", "volunteered at {x}",
     ("the food bank", "the animal shelter", "the community garden", "the library book sale",
      "the beach cleanup", "the senior center", "the blood drive", "the park restoration day")),
    ("musical instruments", "bought", "bought", "bought {x}",
     ("a ukulele", "a keyboard", "an acoustic guitar", "a violin", "a cajon", "a harmonica",
      "a mandolin", "a bass guitar")),
    ("races", "ran", "run", "ran {x}",
     ("the Harbor 10K", "the Maple Leaf Half Marathon", "the Turkey Trot 5K",
      "the Riverside Relay", "the Summit Trail Run", "the Midnight 8K", "the Bridge Run")),
    ("cooking classes", "took", "taken", "took a cooking class on {x}",
     ("knife skills", "fresh pasta", "Thai curries", "French pastry", "dumplings",
      "sushi rolling", "bread shaping", "Mexican moles")),
)
_WINDOWS = (
    "so far", "recently", "this year", "in total", "over the last few months",
    "since we started chatting", "lately", "up to now",
)

#: Temporal events: (past-tense phrase, base-form phrase); slots filled per question.
_EVENTS = (
    ("adopted my {pet} {name}", "adopt my {pet} {name}"),
    ("started my new job at {company}", "start my new job at {company}"),
    ("ran the {city} half marathon", "run the {city} half marathon"),
    ("moved into my apartment on {street}", "move into my apartment on {street}"),
    ("got my wisdom teeth removed", "get my wisdom teeth removed"),
    ("finished my {skill} certificate", "finish my {skill} certificate"),
    ("booked my flights to {city}", "book my flights to {city}"),
    ("bought my {item}", "buy my {item}"),
    ("joined the {activity} club", "join the {activity} club"),
    ("went to {name}'s wedding in {city}", "go to {name}'s wedding in {city}"),
    ("sold my old {item}", "sell my old {item}"),
    ("repainted my {room}", "repaint my {room}"),
    ("had my first {activity} lesson", "have my first {activity} lesson"),
    ("got back from my trip to {city}", "get back from my trip to {city}"),
    ("signed up for the {city} marathon", "sign up for the {city} marathon"),
    ("launched my {project} website", "launch my {project} website"),
)
_ROOMS = ("bedroom", "kitchen", "home office", "living room", "bathroom", "hallway")

#: Knowledge-update attributes: (question, statement template, kind of value).
_UPDATES = (
    ("What is my current personal best in the {race}?", "my personal best in the {race} is {v}", "time"),
    ("How many {collection} do I own now?", "I own {v} {collection}", "count"),
    ("What is my monthly rent at the place on {street}?", "my monthly rent at the place on {street} is {v}", "money"),
    ("Who is my {role} these days?", "my {role} is {v}", "name"),
    ("Which city does my {rel} {name} live in now?", "my {rel} {name} lives in {v}", "city"),
    ("How many days a week do I go to {activity} class now?", "I go to {activity} class {v}", "days"),
    ("What is my current daily step goal on my {device}?", "my daily step goal on my {device} is {v}", "steps"),
    ("Which gym am I a member of at the moment, the one for {activity}?", "for {activity}, my gym membership is at {v}", "place"),
    ("How many pages of {book} have I read so far?", "I have read {v} of {book}", "pages"),
    ("What time do I wake up on {weekday}s now?", "on {weekday}s I wake up at {v}", "clock"),
    ("How much do I have saved in my {fund} fund now?", "my {fund} fund is at {v}", "money"),
    ("What is my current typing speed on my {keyboard}?", "my typing speed on my {keyboard} is {v}", "wpm"),
)
_RACES = ("5K", "10K", "half marathon", "marathon", "400m swim", "mile", "40K bike time trial")
_COLLECTIONS = (
    "vinyl records", "succulents", "pairs of sneakers", "coffee mugs", "board games",
    "film cameras", "fountain pens", "houseplants", "guitars", "jigsaw puzzles", "cookbooks",
    "bikes", "watches", "tote bags",
)
_ROLES = (
    "dentist", "manager", "personal trainer", "tennis partner", "mentor", "therapist",
    "piano teacher", "accountant", "team lead", "hairdresser", "doctor", "running coach",
)
_FUNDS = ("vacation", "emergency", "wedding", "house", "new car", "travel", "rainy day")
_KEYBOARDS = ("laptop", "mechanical keyboard", "work keyboard", "split keyboard", "tablet keyboard")

_USER_DISTRACTORS = (
    (
        "I keep going back and forth about {a}. My {rel} says it's not worth the hassle, "
        "but I think I'd use it at least {n} times a week. What would you weigh?"
    ),
    (
        "Random question about {a}: how do people usually decide about {b}? "
        "I want to think it through before {month}."
    ),
    (
        "My {rel} {name} asked me about {a} yesterday and I didn't really know what to say. "
        "What are the basics of {b}?"
    ),
    "Is it normal to spend ages researching {a}? I have {n} browser tabs open about {b} right now.",
    "Can you help me make a checklist for {a}? I'd like to sort out {b} before the weekend.",
    "I read an article about {a} on the train this morning. Is the advice on {b} any good in general?",
    "What questions should I ask myself about {a}? {name} says {b} is mostly about patience.",
    "I was chatting with my {rel} about {a} over lunch on {weekday}. How do most people handle {b}?",
    "Do you have a rule of thumb for {a}? I've been stuck on {b} for about {n} days.",
    "Before {month} I want a plan for {a}. Where would you start with {b}?",
    "{name} keeps sending me links about {a}. Is there anything to {b} I should actually read?",
    "Honest opinion: am I overthinking {a}? My {rel} thinks {b} is simple.",
)


#: Concrete sentences real assistant prose carries now and then: quantities, names, places, dates.
_FILLER_NUMBERS = (
    "Aim for about {n} minutes at a time, {k} times a week.",
    "Most people see a difference within {n} to {m} weeks.",
    "A budget of around ${money} is plenty to start with.",
    "Give it {n} days before you judge the result.",
    "About {pct}% of beginners drop this in the first month, so go easy.",
    "Set a timer for {n} minutes and stop when it rings.",
    "Step {k} is where most people get stuck.",
    "Try a ratio of {k} to {n} and adjust from there.",
)
_FILLER_NAMES = (
    "{name} {surname}'s book on {t} is a good place to start.",
    "If you are near {city}, there are groups that meet every week.",
    "Many people follow the approach {name} {surname} describes.",
    "The {city} public library often runs free sessions on this.",
)
_FILLER_DATES = (
    "Registration for most courses opens in {month}.",
    "A deadline around {month} {day} is common for this kind of thing.",
    "Aim to have a first version by {weekday}.",
    "Things tend to get busier after {month}, so start early.",
)
#: First-person statements users make about themselves in passing.
_USER_STATEMENTS = (
    "I've been trying {t} for a while now.",
    "My {rel} got me into {t}.",
    "I'm not sure I'm doing the {n} part right.",
    "I tried this last {weekday} and it didn't go well.",
    "I have about {k} hours a week for this.",
    "We talked about {t} at work and I got curious.",
    "My schedule is a mess lately, so I need something simple.",
    "I started {k} weeks ago and I'm already losing steam.",
)
_SURNAMES = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Alvarez", "Brennan", "Kowalski", "Haddad", "Nguyen", "Silva")


# --------------------------------------------------------------------------- knobs


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
    #: share of user turns (filler and evidence alike) that are long messages, sized like assistant turns
    long_user_share: float = 0.12
    #: shares of filler turns holding a number, a name or place, a date (one concrete sentence each)
    filler_digit_rate: float = 0.45
    filler_name_rate: float = 0.25
    filler_date_rate: float = 0.12
    #: share of filler user turns with a first-person statement about the user
    user_first_person_rate: float = 0.5
    filler_assistant_tokens: tuple[int, int] = (150, 450)
    filler_topics: int = 400
    echo_strength: tuple[float, float] = (0.0, 0.7)
    #: share of questions whose evidence all falls in the last ``recent_window``
    #: of the history (recent facts), so that budgets bind unevenly as in real use
    recent_evidence: float = 0.25
    recent_window: float = 0.15
    start: dt.date = dt.date(2022, 1, 1)
    start_span_days: int = 540


# --------------------------------------------------------------------------- plans


_DATE_MARK = "\x00DATE\x00"
#: o200k tokens per whitespace word of filler prose (pseudo-words split into several tokens).
_TOKENS_PER_WORD = 1.6
#: Share of filler user turns that are a short stock turn ("Thanks!").
_STOCK_SHARE = 0.12
#: Words of one invented topic, and how strongly a turn favours the topic's first words.
_TOPIC_WORDS = 150
_TOPIC_SKEW = 1.4
_ECHO_LEADS = ("So", "Noted:", "Good to know that", "Thanks for sharing that", "Okay, so", "Sounds like")
_FOLLOW_UPS = ("Just to check I got it:", "Going back to your suggestion:", "So, to be sure:",
               "Quick follow-up on that:")
_LIST_LEADS = ("Here are a few ideas:", "A few options:", "Some things to try:", "In short:", "Key points:")
_SECOND_PERSON = {"i": "you", "i'm": "you're", "i've": "you've", "i'd": "you'd", "my": "your", "me": "you",
                  "mine": "yours", "we": "you", "our": "your"}


@dataclass(frozen=True)
class _Topic:
    """An invented filler topic: its name and its own words."""

    name: str
    nouns: tuple[str, ...]
    verbs: tuple[str, ...]
    adjs: tuple[str, ...]


def _reserved_words() -> set[str]:
    """Every content word of this module's English banks: pseudo-words must not collide with them."""
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

    for name, value in globals().items():
        if name.startswith("_") and name[1:2].isupper():
            walk(value)
    return found | STOPWORDS


@dataclass
class _Gold:
    """One evidence pair: the ``has_answer`` turn and its partner turn."""

    role: str  # role of the evidence turn
    text: str  # may hold _DATE_MARK, filled with the session's date
    partner: str  # the other turn of the pair


@dataclass
class _Plan:
    question: str
    answer: str | Callable[[list[dt.datetime], dt.datetime], str]
    golds: list[_Gold]
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


class _Writer:
    """Cheap text generation from the banks, all through one ``random.Random``."""

    def __init__(self, rng: random.Random, settings: GeneratorSettings) -> None:
        self.rng = rng
        self.s = settings
        self.topics = self._make_topics(settings.filler_topics)

    # -- small pickers
    def pick(self, seq: Sequence[str]) -> str:
        return seq[self.rng.randrange(len(seq))]

    def store(self) -> str:
        return f"{self.pick(_BRAND_A)} {self.pick(_STORE_B)}"

    def hotel(self) -> str:
        return f"The {self.pick(_BRAND_A)} {self.pick(_HOTEL_B)}"

    def company(self) -> str:
        return f"{self.pick(_BRAND_A)} {self.pick(_COMPANY_B)}"

    def street(self) -> str:
        return f"{self.rng.randint(12, 980)} {self.pick(_STREETS)} {self.pick(_STREET_KINDS)}"

    def book(self) -> str:
        return f"The {self.pick(_BOOK_ADJ)} {self.pick(_BOOK_NOUN)}"

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
            "rel": self.pick(_RELATIONS), "name": self.pick(_NAMES), "weekday": self.pick(_WEEKDAYS),
            "clock": self.clock(), "n": r.randint(3, 19), "month": self.pick(_MONTHS),
            "city": self.pick(_CITIES), "day": r.randint(2, 28), "street": self.street(),
            "age": r.randint(21, 70),
        }

    # -- filler vocabulary
    def _pseudo_word(self, reserved: set[str]) -> str:
        r = self.rng
        while True:
            syllables = r.choice((1, 2, 2, 2, 2, 3))
            word = "".join(r.choice(_ONSETS) + r.choice(_NUCLEI) + r.choice(_CODAS) for _ in range(syllables))
            if syllables < 3:
                word += r.choice(_SUFFIXES)
            if len(word) >= 4 and word not in reserved:
                reserved.add(word)
                return word

    def _make_topics(self, count: int) -> list[_Topic]:
        """``count`` invented topics; each draws its words from a shared pseudo-word pool."""
        reserved = set(_reserved_words())
        pool = [self._pseudo_word(reserved) for _ in range(max(400, count * _TOPIC_WORDS // 3))]
        topics = []
        for _ in range(count):
            words_ = self.rng.sample(pool, _TOPIC_WORDS)
            third = _TOPIC_WORDS // 5
            nouns, verbs, adjs = tuple(words_[2 * third:]), tuple(words_[:third]), tuple(words_[third:2 * third])
            name = f"{adjs[0]} {nouns[0]}" if self.rng.random() < 0.5 else f"{nouns[0]} {nouns[1]}"
            topics.append(_Topic(name, nouns, verbs, adjs))
        return topics

    def topic(self) -> _Topic:
        """A random filler topic."""
        return self.topics[self.rng.randrange(len(self.topics))]

    def zipf(self, seq: Sequence[str], skew: float = 2.0) -> str:
        """An element of ``seq``, the earlier ones far more often (a rough Zipf law)."""
        return seq[int(len(seq) * self.rng.random() ** skew)]

    # -- filler prose
    def _slots(self, topic: _Topic, phrase: str | None) -> dict[str, str]:
        k = _TOPIC_SKEW
        n = self.zipf(topic.nouns, k)
        n2 = self.zipf(topic.nouns, k)
        while n2 == n:
            n2 = self.zipf(topic.nouns, k)
        v, a = self.zipf(topic.verbs, k), self.zipf(topic.adjs, k)
        return {
            "t": phrase or topic.name, "n": n, "n2": n2, "v": v, "a": a, "a2": self.zipf(topic.adjs, k),
            "v2": self.zipf(topic.verbs, k), "v3": self.zipf(topic.verbs, k),
            "g": self.zipf(_COMMON, 2.0), "g2": self.zipf(_COMMON, 2.0),
            "A": a.capitalize(), "V": v.capitalize(),
        }

    def sentence(self, topic: _Topic, phrase: str | None = None, mention: bool = False) -> str:
        """One advice sentence on ``topic``; with ``mention`` it is sure to name ``phrase`` (or the topic)."""
        frame = self.pick(_MENTIONING if mention else _FRAMES)
        return frame.format(**self._slots(topic, phrase))

    def prose(self, topic: _Topic, target_tokens: int, opener: bool = True,
              phrases: Sequence[str] = ()) -> str:
        """Advice on ``topic`` of about ``target_tokens`` tokens (estimate: _TOKENS_PER_WORD)."""
        first = self.pick(_OPENERS) if opener else ""
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
                parts.append(self.pick(_LIST_LEADS) + "\n\n" + "\n".join(bullets))
                continue
            text = self.sentence(topic, phrase())
            paragraph.append(text)
            words_ += len(text.split())
            if len(paragraph) >= self.rng.randint(3, 5):
                parts.append(" ".join(paragraph))
                paragraph = []
        if paragraph:
            parts.append(" ".join(paragraph))
        closer = self.pick(_CLOSERS)
        if closer:
            parts.append(closer)
        return "\n\n".join(parts)

    def concrete(self, topic: _Topic, bank: Sequence[str]) -> str:
        """One concrete filler sentence from ``bank`` (numbers, names, places or dates)."""
        r = self.rng
        return self.pick(bank).format(
            n=r.randint(2, 30), m=r.randint(31, 60), k=r.randint(2, 9), money=r.choice((20, 50, 100, 200, 500)),
            pct=r.randint(10, 80), name=self.pick(_NAMES), surname=self.pick(_SURNAMES), city=self.pick(_CITIES),
            month=self.pick(_MONTHS), day=r.randint(2, 28), weekday=self.pick(_WEEKDAYS), t=topic.name,
        )

    def with_facts(self, text: str, topic: _Topic) -> str:
        """``text`` with concrete sentences inserted at the filler rates (one draw per kind)."""
        s = self.s
        extra = [self.concrete(topic, bank) for rate, bank in (
            (s.filler_digit_rate, _FILLER_NUMBERS), (s.filler_name_rate, _FILLER_NAMES),
            (s.filler_date_rate, _FILLER_DATES)) if self.rng.random() < rate]
        if not extra:
            return text
        parts = text.split("\n\n")
        for sentence in extra:
            at = self.rng.randrange(len(parts))
            parts[at] = f"{parts[at]} {sentence}"
        return "\n\n".join(parts)

    def assistant_filler(self, topic: _Topic) -> str:
        lo, hi = self.s.filler_assistant_tokens
        return self.with_facts(self.prose(topic, self.rng.randint(lo, hi - 40)), topic)

    def statement(self, topic: _Topic) -> str:
        """A first-person statement about the user, in passing."""
        slots = self._slots(topic, None)
        return self.pick(_USER_STATEMENTS).format(
            t=topic.name, rel=self.pick(_RELATIONS), n=slots["n"], weekday=self.pick(_WEEKDAYS),
            k=self.rng.randint(2, 9))

    def user_filler(self, topic: _Topic) -> str:
        r = self.rng
        if r.random() < _STOCK_SHARE:
            return self.pick(_STOCK_USER)
        text = self.pick(_USER_FILLER).format(**self._slots(topic, None))
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
        for sentence in re.split(r"(?<=[.!?])\s+", text.replace(_DATE_MARK, "")):
            if self.rng.random() >= strength:
                continue
            tokens = []
            for tok in sentence.split():
                if any(c.isdigit() for c in tok) or set(words(tok)) & exclude:
                    continue
                bare = tok.strip(".,;:!?()").lower()
                tokens.append(_SECOND_PERSON.get(bare, tok.strip(".,;:!?()")) if swap else tok.strip(".,;:!?()"))
            if len(words(" ".join(tokens))) >= 2:
                kept.append(" ".join(tokens))
        return "; ".join(kept)

    # -- evidence: a fact in an ordinary turn
    def gold_size(self) -> int:
        """An evidence turn's target size: the size of a filler turn drawn here, within ``gold_tokens``.

        Half the turns of a history are the assistant's, half the user's, so the
        turn is either, whatever the evidence turn's role: its size is ordinary
        within its history, long ones included.
        """
        topic = self.topic()
        turn = self.assistant_filler(topic) if self.rng.random() < 0.5 else self.user_filler(topic)
        lo, hi = self.s.gold_tokens
        return min(max(count_tokens([turn])[0], lo), hi)

    def evidence(self, core: str) -> str:
        """A user turn that states ``core`` in passing, among ordinary words about something else."""
        lead = self.pick(("", "Oh, by the way: ", "Quick update: ", "Side note, ", "Also, "))
        body = core[0].upper() + core[1:] if not lead else core
        topic = self.topic()

        def more(tokens: int) -> str:
            ask = self.pick(_USER_FILLER).format(**self._slots(topic, None))
            if tokens < 60:
                return ask
            return f"{ask} {self.statement(topic)}\n\n{self.prose(topic, tokens - 30, opener=False)}"

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
        user = self.pick(_USER_DISTRACTORS).format(a=a, b=b, **self.slots())
        if not long_assistant:
            return user, filler()
        lo, hi = self.s.distractor_mentions
        mentions = self.rng.randint(lo, hi)
        lo_t, hi_t = self.s.filler_assistant_tokens
        target = self.rng.randint(lo_t, hi_t - 40)
        topic = self.topic()
        paragraphs = [self.pick(_OPENERS)]
        for i in range(mentions):
            paragraphs.append(self.sentence(topic, a if i % 2 == 0 else b, mention=True))
        body = self.prose(topic, max(60, target - 25 * mentions), opener=False,
                          phrases=("this", "the decision", "the whole process"))
        return user, " ".join(p for p in paragraphs if p) + "\n\n" + body


# --------------------------------------------------------------------------- question builders


def _plan_ssu(w: _Writer, abstain: bool) -> _Plan:
    r = w.rng
    kind = r.randrange(6)
    item = w.pick(_ITEMS)
    alt_item = w.pick([x for x in _ITEMS if x != item])
    if kind == 0:
        store = w.store()
        core = f"I finally bought my {item} at {store} last {w.pick(_WEEKDAYS)}."
        q = "Where did I buy my {x}?"
        ans, terms = store, (_a(item), f"where to buy {_a(item)}")
    elif kind == 1:
        price = w.money(40, 2400)
        core = f"I paid {price} for my {item} at {w.store()}, which felt like a lot."
        q = "How much did I pay for my {x}?"
        ans, terms = price, (_a(item), f"how much to pay for {_a(item)}")
    elif kind == 2:
        name, rel = w.pick(_NAMES), w.pick(_RELATIONS)
        core = f"My {rel} {name} gave me {_a(item)} for my birthday on {w.pick(_MONTHS)} {r.randint(2, 28)}."
        q = "Who gave me the {x} for my birthday?"
        ans, terms = name, (_a(item), f"{_a(item)} as a birthday gift")
    elif kind == 3:
        rel, name, city = w.pick(_RELATIONS), w.pick(_NAMES), w.pick(_CITIES)
        item, alt_item = f"{rel} {name}", f"{rel} {w.pick([x for x in _NAMES if x != name])}"
        core = f"My {rel} {name} just moved to {city} for a new job, {r.randint(2, 9)} hours from me."
        q = "Which city did my {x} move to?"
        ans, terms = city, (f"my {rel} moving", "moving to a new city")
    elif kind == 4:
        pet, name = w.pick(_PETS), w.pick(_NAMES)
        item = pet
        alt_item = w.pick([x for x in _PETS if x != pet])
        core = f"I adopted {_a(pet)} from the shelter on {w.pick(_WEEKDAYS)} and named her {name}."
        q = "What did I name my new {x}?"
        ans, terms = name, (f"a new {pet}", f"naming {_a(pet)}")
    else:
        act = w.pick(_ACTIVITIES)
        item, alt_item = act, w.pick([x for x in _ACTIVITIES if x != act])
        clock, day = w.clock(), w.pick(_WEEKDAYS)
        core = f"My {act} class starts at {clock} on {day}s now, with {w.pick(_NAMES)} teaching."
        q = "What time does my {x} class start?"
        ans, terms = clock, (_a(f"{act} class"), f"{act} class schedules")
    question = q.format(x=alt_item if abstain else item)
    text = w.evidence(core)
    return _Plan(
        question=question,
        answer=_abstain_answer(alt_item) if abstain else ans,
        golds=[_Gold("user", text, w.reply(terms[0]))],
        terms=terms,
        forbidden=(alt_item,) if abstain else (),
        subtype=f"ssu{kind}",
    )


def _plan_ssa(w: _Writer, abstain: bool) -> _Plan:
    r = w.rng
    kind = r.randrange(5)
    if kind == 0:
        city = w.pick(_CITIES)
        hotel = w.hotel()
        prompt = f"I'm planning a trip to {city} in {w.pick(_MONTHS)}. Any hotel suggestions?"
        text = (f"For {city}, I'd book {hotel} on {w.street()}: rooms run about {w.money(120, 420)} "
                f"a night, it is {r.randint(5, 25)} minutes on foot from the old town, and breakfast "
                f"starts at {w.clock()}. A quieter backup is {w.hotel()} near the station.")
        q, ans, terms = f"What hotel did you recommend first for my trip to {city}?", hotel, (
            f"a trip to {city}", f"hotels in {city}")
    elif kind == 1:
        skill = w.pick(_SKILLS)
        title, author = w.book(), f"{w.pick(_NAMES)} {w.pick(_STREETS)}"
        prompt = f"I want to learn {skill} this year. Is there one book you'd start with?"
        text = (f"For {skill}, start with {title} by {author} ({r.randint(1995, 2022)}, "
                f"{r.randint(180, 420)} pages). Read chapters {r.randint(1, 3)} to {r.randint(4, 7)} "
                f"first, then practice for {r.randint(15, 45)} minutes a day.")
        q, ans, terms = f"Which book did you suggest for learning {skill}?", title, (
            f"learning {skill}", f"books about {skill}")
    elif kind == 2:
        dish, ing = w.pick(_DISHES), w.pick(_INGREDIENTS)
        prompt = f"My {dish} always tastes flat. How can I fix it for {w.pick(_WEEKDAYS)}?"
        text = (f"Add {ing} to your {dish}: about {r.randint(1, 3)} teaspoons, stirred in "
                f"{r.randint(5, 15)} minutes before the end, and salt in {r.randint(2, 4)} stages. "
                f"Cook it at {r.choice((325, 350, 375, 400))} degrees Fahrenheit if it goes in the oven.")
        q, ans, terms = f"What ingredient did you tell me to add to my {dish}?", ing, (
            f"my {dish}", f"making {dish}")
    elif kind == 3:
        ex = w.pick(_EXERCISES)
        sets, reps = r.randint(3, 6), r.randint(6, 15)
        prompt = f"How should I program {ex} for my {w.pick(_WEEKDAYS)} workouts?"
        text = (f"Do {sets} sets of {reps} {ex}, resting {r.choice((60, 90, 120))} seconds between "
                f"sets, {r.randint(2, 3)} times a week. Add {r.randint(1, 2)} reps each week until "
                f"you reach {reps + 5}, then add weight.")
        q, ans, terms = f"How many sets of {ex} did you suggest per workout?", f"{sets} sets", (
            f"{ex} workouts", f"programming {ex}")
    else:
        proj = w.pick(_PROJECTS)
        names = [f"{w.pick(_BRAND_A)} {w.pick(_BOOK_NOUN)}" for _ in range(3)]
        prompt = f"I'm starting a {proj} with my {w.pick(_RELATIONS)} {w.pick(_NAMES)}. Name ideas?"
        text = (f"Three names for your {proj}: 1. {names[0]}, 2. {names[1]}, 3. {names[2]}. "
                f"I'd check the domain and register by {w.pick(_MONTHS)} {r.randint(2, 28)}.")
        q, ans, terms = f"What was the first name you suggested for my {proj}?", names[0], (
            f"my {proj}", f"names for a {proj}")
    return _Plan(question=q, answer=ans, golds=[_Gold("assistant", w.assistant_evidence(text), prompt)],
                 terms=terms, subtype=f"ssa{kind}")


def _plan_pref(w: _Writer, abstain: bool) -> _Plan:
    r = w.rng
    kind = r.randrange(5)
    if kind == 0:
        pref = f"{w.pick(_DIETS)} {w.pick(_CUISINES)} dishes with {w.pick(_INGREDIENTS)}"
        meal = w.pick(_MEALS)
        core = (f"whenever I look for a {meal} recipe, I stick to {pref}, ever since "
                f"{w.pick(_MONTHS)} {r.randint(2019, 2022)}.")
        q = f"Can you suggest a {meal} recipe for this {w.pick(_WEEKDAYS)}?"
        terms = ("a recipe", "cooking ideas")
    elif kind == 1:
        pref = f"{w.pick(_PODCAST_TOPICS)} podcasts under {r.choice((20, 30, 40, 45))} minutes"
        commute = w.pick(_COMMUTES)
        core = f"for my {commute} I only listen to {pref}, {r.randint(4, 6)} days a week."
        q = f"Any podcast recommendations for my {commute} in {w.pick(_MONTHS)}?"
        terms = ("podcast recommendations", "podcasts")
    elif kind == 2:
        pref = f"quiet {w.pick(_TERRAINS)} towns within {r.randint(2, 5)} hours by train"
        core = f"for a weekend trip I always pick {pref} of {w.pick(_CITIES)}."
        q = f"Where should I go for a weekend trip in {w.pick(_MONTHS)} with my {w.pick(_RELATIONS)}?"
        terms = ("a weekend trip", "weekend trips")
    elif kind == 3:
        pref = f"{w.pick(_GENRES)} novels by {w.pick(_NATIONALITIES)} authors"
        device = w.pick(_DEVICES)
        core = f"lately I read almost only {pref} on my {device}, about {r.randint(2, 6)} a month."
        q = f"What should I read next on my {device} this {w.pick(_SEASONS)}?"
        terms = ("what to read next", "reading")
    else:
        pref = f"low-impact {w.pick(_WORKOUTS)} routines of about {r.choice((20, 30, 40))} minutes"
        core = f"since my knee injury in {w.pick(_MONTHS)}, any workout plan I follow has to be {pref}."
        q = f"Can you put together a workout plan for {w.pick(_SEASONS)} {w.pick(_WEEKDAYS)}s?"
        terms = ("a workout plan", "workouts")
    return _Plan(question=q, answer=f"The user would prefer {pref}.",
                 golds=[_Gold("user", w.evidence(core), w.reply(terms[1]))], terms=terms,
                 subtype=f"pref{kind}")


def _join_list(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _plan_multi(w: _Writer, abstain: bool) -> _Plan:
    r = w.rng
    cat_index = r.randrange(len(_CATEGORIES))
    plural, _past, perfect, phrase, instances = _CATEGORIES[cat_index]
    k = r.randint(2, 4)
    chosen = r.sample(instances, k)
    form = r.randrange(3)
    window = w.pick(_WINDOWS)
    golds = []
    prices = [r.randint(12, 240) for _ in chosen]
    for x, price in zip(chosen, prices):
        when = w.pick(("today", "this morning", "yesterday", f"on {w.pick(_WEEKDAYS)}"))
        cost = f" It was ${price}." if form == 2 else f" It cost me ${price}." if r.random() < 0.5 else ""
        # users tend to say what kind of thing it was ("another one for my ... list")
        tag = f" That's one more for my {plural} list." if r.random() < 0.7 else ""
        core = f"I {phrase.format(x=x)} {when}.{cost}{tag}"
        golds.append(_Gold("user", w.evidence(core), w.reply(plural)))
    ask_plural, ask_perfect = plural, perfect
    if abstain:
        other = _CATEGORIES[(cat_index + r.randint(1, len(_CATEGORIES) - 1)) % len(_CATEGORIES)]
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
    return _Plan(
        question=q,
        answer=_abstain_answer(f"any {ask_plural}") if abstain else ans,
        golds=golds,
        terms=(plural, f"what people spend on {plural}" if form == 2 else f"which {plural} are worth it"),
        forbidden=(ask_plural,) if abstain else (),
        subtype=f"multi{form}",
    )


def _fill_event(w: _Writer, pair: tuple[str, str]) -> tuple[str, str]:
    values = {
        "pet": w.pick(_PETS), "name": w.pick(_NAMES), "company": w.company(),
        "city": w.pick(_CITIES), "street": w.street().split(" ", 1)[1], "skill": w.pick(_SKILLS),
        "item": w.pick(_ITEMS), "activity": w.pick(_ACTIVITIES), "room": w.pick(_ROOMS),
        "project": w.pick(_PROJECTS),
    }
    return pair[0].format(**values), pair[1].format(**values)


def _days(later: dt.datetime, earlier: dt.datetime) -> int:
    return (later.date() - earlier.date()).days


def _plan_temporal(w: _Writer, abstain: bool) -> _Plan:
    r = w.rng
    form = 0 if abstain else r.randrange(3)
    e1, e2, e3 = (_fill_event(w, p) for p in r.sample(_EVENTS, 3))

    def gold(event: str) -> _Gold:
        core = w.pick((
            f"big news, I {event} today ({_DATE_MARK})!",
            f"today, {_DATE_MARK}, I {event}.",
            f"I {event} this morning, {_DATE_MARK}.",
        ))
        return _Gold("user", w.evidence(core), w.reply("the news"))

    answer: str | Callable[[list[dt.datetime], dt.datetime], str]
    if form == 0:
        second = e3 if abstain else e2
        q = f"How many days passed between the day I {e1[0]} and the day I {second[0]}?"
        golds = [gold(e1[0]), gold(e2[0])]
        if abstain:
            answer = _abstain_answer(f"that you {e3[0]}")
        else:
            def answer(dates: list[dt.datetime], qdate: dt.datetime) -> str:
                return f"{_days(dates[1], dates[0])} days"
    elif form == 1:
        q = f"How many days ago did I {e1[1]}?"
        golds = [gold(e1[0])]

        def answer(dates: list[dt.datetime], qdate: dt.datetime) -> str:
            return f"{_days(qdate, dates[0])} days ago"
    else:
        first, later = e1, e2
        shown = (first, later) if r.random() < 0.5 else (later, first)
        q = f"Which did I do first: {shown[0][1]}, or {shown[1][1]}?"
        golds = [gold(first[0]), gold(later[0])]
        answer = first[0]
    words = e1[1].split()
    return _Plan(
        question=q, answer=answer, golds=golds,
        terms=(" ".join(words[-3:]), e1[1]),
        forbidden=(e3[0],) if abstain else (),
        min_day_gap=True,
        subtype=f"temporal{form}",
    )


def _update_value(w: _Writer, kind: str) -> str:
    r = w.rng
    if kind == "time":
        return f"{r.randint(18, 240)}:{r.randint(0, 59):02d}"
    if kind == "count":
        return str(r.randint(3, 60))
    if kind == "money":
        return w.money(600, 4200)
    if kind == "name":
        return f"{w.pick(_NAMES)} {w.pick(_STREETS)}"
    if kind == "city":
        return w.pick(_CITIES)
    if kind == "days":
        return f"{r.randint(1, 6)} days a week"
    if kind == "steps":
        return f"{r.randint(5, 18) * 1000:,} steps"
    if kind == "place":
        return f"{w.pick(_BRAND_A)} Fitness"
    if kind == "pages":
        return f"{r.randint(20, 600)} pages"
    if kind == "clock":
        return w.clock()
    if kind == "wpm":
        return f"{r.randint(40, 140)} words per minute"
    raise ValueError(kind)


def _plan_update(w: _Writer, abstain: bool) -> _Plan:
    r = w.rng
    index = r.randrange(len(_UPDATES))
    question, statement, kind = _UPDATES[index]
    slot = {
        "race": w.pick(_RACES), "collection": w.pick(_COLLECTIONS), "street": w.pick(_STREETS) + " Street",
        "role": w.pick(_ROLES), "rel": w.pick(_RELATIONS), "name": w.pick(_NAMES),
        "activity": w.pick(_ACTIVITIES), "device": w.pick(("phone", "smartwatch", "fitness band")),
        "book": w.book(), "weekday": w.pick(_WEEKDAYS), "fund": w.pick(_FUNDS),
        "keyboard": w.pick(_KEYBOARDS),
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
        bank = {"race": _RACES, "collection": _COLLECTIONS, "role": _ROLES, "rel": _RELATIONS,
                "name": _NAMES, "activity": _ACTIVITIES, "fund": _FUNDS, "keyboard": _KEYBOARDS,
                "weekday": _WEEKDAYS, "device": ("tablet", "treadmill")}
        if key in bank:
            alt = w.pick([x for x in bank[key] if x != slot[key]])
        elif key == "book":
            alt = w.book()
            while alt == slot["book"]:
                alt = w.book()
        else:
            alt = w.pick(_STREETS) + " Road"
        asked = question.format(**{**slot, key: alt})
        forbidden = (statement.format(**{**slot, key: alt, "v": "{v}"}).split("{v}")[0].strip(),)
        what = asked.rstrip("?")
        answer = _abstain_answer(f"anything about this ({what.lower()})")
    else:
        answer = new
    first_word = statement.split("{")[0].strip()
    key_phrase = original.rstrip("?").split(" ", 3)[-1]
    return _Plan(
        question=asked, answer=answer,
        golds=[_Gold("user", old_text, w.reply(first_word or "that")),
               _Gold("user", new_text, w.reply(first_word or "that"))],
        terms=(key_phrase, fact.split("{v}")[0].strip()),
        forbidden=forbidden,
        subtype=f"update{index}",
    )


_BUILDERS: dict[str, Callable[[_Writer, bool], _Plan]] = {
    "multi-session": _plan_multi,
    "temporal-reasoning": _plan_temporal,
    "knowledge-update": _plan_update,
    "single-session-user": _plan_ssu,
    "single-session-assistant": _plan_ssa,
    "single-session-preference": _plan_pref,
}


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
            f"({_WEEKDAYS[moment.weekday()][:3]}) {moment.hour:02d}:{moment.minute:02d}")


def _short_date(moment: dt.datetime) -> str:
    return f"{_MONTHS[moment.month - 1]} {moment.day}"


class _Generator:
    def __init__(self, seed: int, settings: GeneratorSettings) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.s = settings
        self.w = _Writer(self.rng, settings)
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

    def _plan(self, qtype: str, abstain: bool) -> _Plan:
        plan = _BUILDERS[qtype](self.w, abstain)
        tries = 0
        while plan.question in self.questions:
            tries += 1
            if tries < 40:
                plan = _BUILDERS[qtype](self.w, abstain)
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

    def _attempt(self, qtype: str, abstain: bool) -> tuple[Record, _Plan]:
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
        for k, gold in enumerate(plan.golds):
            group: list[tuple[str, str, bool | None, bool | None]]
            if gold.role == "user":
                echo = self.w.echo(gold.text, exclude, strength)
                lead = self.w.pick(_ECHO_LEADS)
                partner = f"{lead} {echo}.\n\n{gold.partner}" if echo else gold.partner
                group = [(gold.text, partner, True, False)]
            else:
                group = [(gold.partner, gold.text, False, True)]
                echo = self.w.echo(gold.text, exclude, strength, swap=False)
                if echo:
                    follow = f"{self.w.pick(_FOLLOW_UPS)} {echo}?"
                    group.append((follow, self.w.reply(plan.terms[0]), False, False))
            sid = f"{hexid}_{k + 1}"
            answer_sessions.append(_Session(sid, self._with_pairs([group], True, available), gold=k))
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
                if flag and _DATE_MARK in content:
                    content = content.replace(_DATE_MARK, _short_date(moments[pos]))
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
                _days(moments[b], moments[a]) >= 1 for a, b in itertools.pairwise(positions)
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
    - ``long_user_share`` [0.12]: share of user turns that are long messages.
    - ``filler_digit_rate`` [0.45], ``filler_name_rate`` [0.25], ``filler_date_rate``
      [0.12]: chance that a filler assistant turn (or long user turn) holds a
      sentence with a number, a name or place, a date.
    - ``user_first_person_rate`` [0.5]: chance that a filler user turn opens with a
      first-person statement about the user.
    - ``filler_topics`` [400]: invented filler topics, each with its own words;
      more topics make unrelated filler turns share fewer words.
    - ``echo_strength`` [(0.0, 0.7)]: range of the per-question share of evidence
      sentences that the next turn of the evidence session restates (without
      numbers or the answer's words).
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
