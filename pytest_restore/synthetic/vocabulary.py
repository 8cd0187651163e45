"""The synthetic world's word lists and tables: data, not logic.

Filler banks (pseudo-word parts, common words, prose frames, user turns), fact
banks (names, places, items, events, update attributes) and the question-type
mix of the 500-question benchmark. The generator (:mod:`pytest_restore.synthetic.generator`)
draws from them; every content word here is reserved, so invented topic words
never collide with them (:func:`pytest_restore.synthetic.prose.reserved_words`).
"""

from __future__ import annotations

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



# --------------------------------------------------------------------------- word banks
# Filler: lowercase, no digits, no proper names. Real chat filler (ShareGPT,
# UltraChat) is lexically diverse: two unrelated turns share few content words,
# while turns of one conversation share its topic's words. The generator builds
# that from invented topic vocabularies (pseudo-words, drawn per call from the
# seed) set in English frames whose own content words are few and varied.

ONSETS = (
    "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
    "br", "cr", "dr", "fl", "gr", "pl", "pr", "sk", "st", "tr", "sh", "ch", "th", "sp", "bl", "gl",
)
NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "ai", "ea", "ou", "ie", "oa")
CODAS = ("", "", "", "", "n", "r", "l", "s", "t", "m", "nd", "st", "rk", "ng")
SUFFIXES = ("", "", "", "", "", "", "ing", "er", "ion", "al", "ment", "ic")

#: Common English content words: the shared background of all prose (Zipf-weighted, first = commonest).
COMMON = (
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
OPENERS = (
    "Great question!", "Sure, here are a few thoughts.", "That is a common concern.",
    "Happy to help with that.", "Good thinking.", "Of course.", "That makes sense.",
    "There are a few ways to look at this.", "Absolutely.", "Here is how I would think about it.",
    "Let's break it down.", "Nice, this is a fun one.", "Good point.", "Certainly.",
    "It depends a little on your situation, but here goes.", "",
)
CLOSERS = (
    "I hope this helps, and let me know if you want more detail on any of these points.",
    "Feel free to ask if you would like to go deeper on any part of this.",
    "Let me know how it goes, and we can adjust the plan from there.",
    "If you share a little more about your situation, I can tailor these suggestions.",
    "Good luck!", "Want me to turn this into a checklist?", "Does that answer your question?",
    "Happy to expand on any of it.", "", "", "",
)
#: Frames of assistant prose, mostly stopwords and slots: {t} topic phrase, {n} {n2} topic
#: nouns, {v} {v2} {v3} topic verbs, {a} {a2} topic adjectives, {g} {g2} common words.
FRAMES = (
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
MENTIONING = tuple(f for f in FRAMES if "{t}" in f)
USER_FILLER = (
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
STOCK_USER = (
    "Thanks!", "Thank you, that helps.", "Got it, thanks.", "Could you summarize that as a shorter list?",
    "Can you expand on the second point?", "That makes sense. What else should I keep in mind?",
    "Perfect.", "Interesting, tell me more.", "Can you give an example?", "Ok, thanks a lot!",
)

# Fact banks: proper names, places, items. Evidence and distractors draw from these.
NAMES = (
    "Priya", "Marcus", "Elena", "Tomas", "Aisha", "Jonah", "Mei", "Rafael", "Ingrid", "Kofi",
    "Leila", "Dmitri", "Hana", "Oscar", "Nadia", "Felix", "Yuki", "Samir", "Clara", "Mateo",
    "Zara", "Henrik", "Amara", "Luca", "Sofia", "Darius", "Imani", "Theo", "Rosa", "Kenji",
    "Freya", "Omar", "Lena", "Caleb", "Anika", "Bruno", "Noor", "Elliot", "Maya", "Ravi",
)
RELATIONS = (
    "sister", "brother", "cousin", "coworker", "neighbor", "roommate", "manager", "best friend",
    "aunt", "uncle", "mom", "dad", "mentor", "college friend", "landlord",
)
CITIES = (
    "Lisbon", "Denver", "Osaka", "Toronto", "Austin", "Edinburgh", "Seattle", "Melbourne",
    "Portland", "Chicago", "Vancouver", "Dublin", "Boston", "Prague", "Nashville", "Montreal",
    "Copenhagen", "San Diego", "Atlanta", "Vienna", "Minneapolis", "Barcelona", "Kyoto",
    "Pittsburgh", "Oslo", "Phoenix", "Amsterdam", "Savannah", "Helsinki", "Santa Fe",
    "Quebec City", "Raleigh", "Budapest", "Tucson", "Valencia", "Madison", "Porto", "Boise",
    "Reykjavik", "Charleston",
)
BRAND_A = (
    "Copper", "Harbor", "Juniper", "Maple", "Cedar", "Silver", "Northgate", "Willow", "Granite",
    "Blue Heron", "Lantern", "Orchard", "Summit", "Riverside", "Old Mill", "Brightwater", "Red Fox",
    "Ember", "Kestrel", "Tidewater", "Ironwood", "Saltmarsh", "Bluebird", "Hollow Oak",
)
STORE_B = (
    "Outfitters", "Supply Co.", "Market", "Goods", "Emporium", "Trading Post", "Home Store",
    "Depot", "Workshop", "Exchange",
)
HOTEL_B = ("Inn", "Hotel", "Lodge", "Suites", "House")
COMPANY_B = ("Labs", "Analytics", "Health", "Logistics", "Studios", "Partners", "Systems", "Foods")
STREETS = (
    "Elm", "Larkspur", "Fulton", "Beacon", "Alder", "Prospect", "Mercer", "Hawthorne",
    "Delancey", "Orchard", "Juniper", "Chestnut", "Linden", "Bayview",
)
STREET_KINDS = ("Street", "Avenue", "Lane", "Road")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
ITEMS = (
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
PETS = (
    "kitten", "puppy", "rabbit", "parakeet", "hamster", "tortoise", "goldfish", "beagle",
    "tabby cat", "corgi", "guinea pig", "gecko",
)
ACTIVITIES = (
    "pottery", "salsa", "spin", "watercolor", "improv", "rock climbing", "Spanish", "yoga",
    "kickboxing", "jazz piano", "woodworking", "swim", "barre", "photography", "ceramics",
    "tango", "Pilates", "calligraphy", "fencing", "choir",
)
SKILLS = (
    "woodworking", "bread baking", "Python", "public speaking", "watercolor painting",
    "negotiation", "bookkeeping", "film photography", "knitting", "chess strategy",
    "Japanese", "data visualization", "home brewing", "guitar", "interior design",
    "rock climbing", "birdwatching", "screenwriting", "gardening", "statistics",
    "bike repair", "sign language", "meditation", "sourdough", "calligraphy",
)
BOOK_ADJ = (
    "Quiet", "Patient", "Curious", "Practical", "Honest", "Hidden", "Steady", "Open", "Careful",
    "Wandering", "Small", "Bright", "Second", "Long",
)
BOOK_NOUN = (
    "Workshop", "Harbor", "Apprentice", "Compass", "Garden", "Ledger", "Lantern", "Orchard",
    "Atlas", "Kitchen", "Notebook", "Bridge", "Field", "Method",
)
DISHES = (
    "lentil soup", "mushroom risotto", "chicken curry", "black bean chili", "banana bread",
    "shakshuka", "pad thai", "ramen broth", "vegetable lasagna", "roast chicken",
    "potato gratin", "fish tacos", "minestrone", "chocolate cake", "pancake batter",
    "tomato sauce", "guacamole", "granola", "fried rice", "butternut squash soup",
)
INGREDIENTS = (
    "smoked paprika", "miso paste", "fish sauce", "lemon zest", "tahini", "anchovies",
    "brown butter", "sumac", "fresh thyme", "chipotle", "star anise", "maple syrup",
    "capers", "nutmeg", "sherry vinegar", "ginger", "saffron", "toasted sesame oil",
)
EXERCISES = (
    "squats", "push-ups", "lunges", "deadlifts", "planks", "pull-ups", "kettlebell swings",
    "burpees", "rows", "step-ups", "bench presses", "glute bridges",
)
PROJECTS = (
    "bakery", "podcast", "newsletter", "bike repair shop", "candle business", "book club",
    "food truck", "tutoring service", "photography studio", "plant shop", "running group",
    "board game cafe", "dog-walking business", "YouTube channel", "craft brewery",
)
DIETS = ("vegetarian", "vegan", "pescatarian", "gluten-free", "dairy-free", "low-sodium")
CUISINES = ("Thai", "Mexican", "Italian", "Korean", "Ethiopian", "Greek", "Indian", "Japanese")
PODCAST_TOPICS = (
    "history", "science", "true crime", "economics", "design", "sports", "comedy", "philosophy",
)
GENRES = ("mystery", "science fiction", "historical fiction", "fantasy", "literary", "thriller")
NATIONALITIES = ("Nigerian", "Japanese", "Irish", "Chilean", "Korean", "Canadian", "Indian")
TERRAINS = ("coastal", "mountain", "lakeside", "wine-country", "desert", "forest")
WORKOUTS = ("swimming", "cycling", "yoga", "rowing", "walking", "Pilates")
SEASONS = ("spring", "summer", "autumn", "winter")
MEALS = ("breakfast", "lunch", "dinner", "brunch")
DEVICES = ("e-reader", "tablet", "phone", "library card")
COMMUTES = ("drive to work", "morning walk", "train ride", "bus commute", "long run")

#: Multi-session categories: plural, past tense, present perfect, evidence verb phrase, instances.
CATEGORIES: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
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
WINDOWS = (
    "so far", "recently", "this year", "in total", "over the last few months",
    "since we started chatting", "lately", "up to now",
)

#: Temporal events: (past-tense phrase, base-form phrase); slots filled per question.
EVENTS = (
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
ROOMS = ("bedroom", "kitchen", "home office", "living room", "bathroom", "hallway")

#: Knowledge-update attributes: (question, statement template, kind of value).
UPDATES = (
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
RACES = ("5K", "10K", "half marathon", "marathon", "400m swim", "mile", "40K bike time trial")
COLLECTIONS = (
    "vinyl records", "succulents", "pairs of sneakers", "coffee mugs", "board games",
    "film cameras", "fountain pens", "houseplants", "guitars", "jigsaw puzzles", "cookbooks",
    "bikes", "watches", "tote bags",
)
ROLES = (
    "dentist", "manager", "personal trainer", "tennis partner", "mentor", "therapist",
    "piano teacher", "accountant", "team lead", "hairdresser", "doctor", "running coach",
)
FUNDS = ("vacation", "emergency", "wedding", "house", "new car", "travel", "rainy day")
KEYBOARDS = ("laptop", "mechanical keyboard", "work keyboard", "split keyboard", "tablet keyboard")

USER_DISTRACTORS = (
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
FILLER_NUMBERS = (
    "Aim for about {n} minutes at a time, {k} times a week.",
    "Most people see a difference within {n} to {m} weeks.",
    "A budget of around ${money} is plenty to start with.",
    "Give it {n} days before you judge the result.",
    "About {pct}% of beginners drop this in the first month, so go easy.",
    "Set a timer for {n} minutes and stop when it rings.",
    "Step {k} is where most people get stuck.",
    "Try a ratio of {k} to {n} and adjust from there.",
)
FILLER_NAMES = (
    "{name} {surname}'s book on {t} is a good place to start.",
    "If you are near {city}, there are groups that meet every week.",
    "Many people follow the approach {name} {surname} describes.",
    "The {city} public library often runs free sessions on this.",
)
FILLER_DATES = (
    "Registration for most courses opens in {month}.",
    "A deadline around {month} {day} is common for this kind of thing.",
    "Aim to have a first version by {weekday}.",
    "Things tend to get busier after {month}, so start early.",
)
#: First-person statements users make about themselves in passing.
USER_STATEMENTS = (
    "I've been trying {t} for a while now.",
    "My {rel} got me into {t}.",
    "I'm not sure I'm doing the {n} part right.",
    "I tried this last {weekday} and it didn't go well.",
    "I have about {k} hours a week for this.",
    "We talked about {t} at work and I got curious.",
    "My schedule is a mess lately, so I need something simple.",
    "I started {k} weeks ago and I'm already losing steam.",
)
SURNAMES = ("Okafor", "Lindqvist", "Moreau", "Tanaka", "Alvarez", "Brennan", "Kowalski", "Haddad", "Nguyen", "Silva")

#: Turn openers of echoes, follow-ups and lists, and the pronoun swap an echo makes.
ECHO_LEADS = ("So", "Noted:", "Good to know that", "Thanks for sharing that", "Okay, so", "Sounds like")
FOLLOW_UPS = ("Just to check I got it:", "Going back to your suggestion:", "So, to be sure:",
               "Quick follow-up on that:")
LIST_LEADS = ("Here are a few ideas:", "A few options:", "Some things to try:", "In short:", "Key points:")
SECOND_PERSON = {"i": "you", "i'm": "you're", "i've": "you've", "i'd": "you'd", "my": "your", "me": "you",
                  "mine": "yours", "we": "you", "our": "your"}

