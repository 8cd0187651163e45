"""What a report says when a simulated model took part: the opening notice and the fake reader's model.

The facts come from the model layer (:func:`pytest_restore.models.fake.simulated_models`,
:class:`~pytest_restore.models.fake.ReaderKnobs`); the words are the report's.
"""

from __future__ import annotations

from collections.abc import Sequence

from pytest_restore.models.fake import ReaderKnobs, simulated_models
from pytest_restore.record import Record

#: The reader model in a few lines, as the report prints it.
READER_MODEL = (
    "The fake reader is taught each question's answer and gold snippets. It answers from what the "
    "context holds: a knowledge update needs the newest value (an older one alone gives the stale "
    "value), a multi-session question with part of its evidence gives a wrong aggregate of what is "
    "there, temporal and single-session questions without all their evidence get \"I don't know\". "
    "With the evidence present it still errs now and then (a utilisation error), more often for "
    "aggregating questions, the more non-gold text surrounds the gold and the later the gold sits in "
    "the context; the draw is a hash of the question and the context, correlated within a question. "
    "Without the evidence it may guess between the two options of a which-of-two question. "
    "Its knobs were set on the no-evict cell and the oracle of the 500-question synthetic file only."
)


def reader_model_lines(knobs: ReaderKnobs | None = None) -> list[str]:
    """The reader model and its knob values, as markdown lines for the report."""
    k = knobs or ReaderKnobs()
    return [
        READER_MODEL,
        "",
        (f"Knobs: base error {k.base_error:g}, aggregating-type factor {k.aggregate:g}, crowding "
        f"{k.crowding:g} per 1k non-gold tokens, position {k.position:g}, persistence {k.persistence:g}, "
        f"scale {k.scale:g}, guess {k.guess:g}."),
    ]


def simulated_note(models: Sequence[tuple[str, str]], official_data: bool | None = None) -> str | None:
    """The one sentence a report opens with when any model is a fake (``models``: the records' fakes,
    :func:`~pytest_restore.models.fake.simulated_models`); ``None`` when none is."""
    fakes = [f"{role} `{name}`" for role, name in models]
    if not fakes:
        return None
    data = "the official LongMemEval-S file" if official_data else "synthetic or unofficial data"
    return (
        f"These figures check the audit pipeline on a simulated reader and {data} (fake models: "
        f"{', '.join(fakes)}); they are not a finding about any model."
    )


def simulated_label(records: Sequence[Record]) -> str:
    """The fake models that took part, as the figure's title names them (``"reader fake, judge fake"``; "": none)."""
    return ", ".join(f"{role} {name}" for role, name in simulated_models(records))


def simulated_reader_md(fake_reader: bool) -> str:
    """The report's section on the fake reader's model, when a fake reader took part; else empty."""
    if not fake_reader:
        return ""
    return "\n".join(["## The simulated reader", "", *reader_model_lines(), ""])
