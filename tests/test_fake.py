"""Tests for the deterministic fake models (pytest_restore.models.fake) and prompt parsing (prompts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.data.units import Granularity, History, build_history
from pytest_restore.memory.retrieval import render_context
from pytest_restore.models import fake
from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.fake import (
    FakeJudge,
    FakeReader,
    FakeScorer,
    normalise,
    wrong_answer,
)
from pytest_restore.models.prompts import (
    DONT_KNOW,
    JUDGE_MAX_TOKENS,
    READER_MAX_TOKENS,
    SCORER_MAX_TOKENS,
    PromptSet,
    parse_score,
    parse_verdict,
)

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
PROMPTS = PromptSet()


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


@pytest.fixture(scope="module", params=list(Granularity))
def histories(tiny: Dataset, request: pytest.FixtureRequest) -> list[History]:
    return [build_history(q, request.param) for q in tiny.questions]


def reader_request(h: History, injected: list[int]) -> ChatRequest:
    q = h.question
    return PROMPTS.reader(
        question=q.question, question_date=q.question_date, snippets=render_context(h, injected)
    )


def ask(reader: FakeReader, h: History, injected: list[int]) -> str:
    (result,) = reader.run([reader_request(h, injected)])
    assert result.ok and result.text is not None
    return result.text


def judge(answer: str, h: History) -> bool | None:
    (result,) = FakeJudge().run(
        [PROMPTS.judge(question=h.question.question, answer=h.question.answer, prediction=answer)]
    )
    assert result.text is not None
    return parse_verdict(result.text)


def test_fakes_satisfy_the_model_protocol() -> None:
    for model in (FakeReader(), FakeJudge(), FakeScorer()):
        assert isinstance(model, ChatModel)
        assert model.name == "fake"
    assert FakeReader(name="r").name == "r"


# --- reader -------------------------------------------------------------------


#: a reader that never misuses evidence it has: isolates the rules of what a context holds
EXACT = fake.ReaderKnobs(base_error=0.0, crowding=0.0, position=0.0, guess=0.0)


def test_oracle_context_correct_without_utilisation_errors(histories: list[History]) -> None:
    reader = FakeReader(histories, knobs=EXACT)
    for h in histories:
        assert h.gold
        answer = ask(reader, h, list(h.gold))
        assert answer == h.question.answer
        assert judge(answer, h) is True


def test_no_evidence_means_dont_know(histories: list[History]) -> None:
    reader = FakeReader(histories, knobs=EXACT)
    for h in histories:
        everything_else = [p for p in range(len(h.units)) if p not in h.gold]
        assert ask(reader, h, everything_else) == DONT_KNOW
        assert ask(reader, h, []) == DONT_KNOW  # empty memory
        assert judge(DONT_KNOW, h) is False


def test_partial_evidence_by_question_type(histories: list[History]) -> None:
    """What a context with part of the gold gives, per question type (module docstring, rule 2)."""
    reader = FakeReader(histories, knobs=EXACT)
    seen = set()
    for h in histories:
        gold = sorted(h.gold)
        qtype, answer = h.question.question_type, h.question.answer
        everything = list(range(len(h.units)))
        for missing in gold:  # drop one gold unit, keep all the rest
            context = [p for p in everything if p != missing]
            got = ask(reader, h, context)
            if qtype == "knowledge-update":
                # the newest value suffices; without it the older one gives a stale answer
                expected = answer if missing != gold[-1] else wrong_answer(answer)
            elif qtype == "multi-session":
                expected = fake.partial_aggregate(answer, len(gold) - 1, len(gold))
            else:
                expected = DONT_KNOW
            assert got == expected, (qtype, missing)
            assert judge(got, h) is (expected == answer)
            seen.add(qtype)
    assert {"knowledge-update", "multi-session", "temporal-reasoning"} <= seen


def test_guess_between_two_options_without_the_evidence(histories: list[History]) -> None:
    assert fake.is_choice("Which did I do first: adopt my kitten, or start my new job?")
    assert fake.is_choice("Who did I meet first, Anna or Ben?")
    assert not fake.is_choice("Which book did you suggest?")
    assert not fake.is_choice("How many days passed between A or B?")
    always = FakeReader(histories, knobs=fake.ReaderKnobs(guess=1.0))
    never = FakeReader(histories, knobs=fake.ReaderKnobs(guess=0.0))
    for h in histories:
        contexts = [[p for p in range(len(h.units)) if p not in h.gold][k::4] for k in range(4)]
        for context in contexts:
            a, b = ask(always, h, context), ask(never, h, context)
            assert b == DONT_KNOW
            if fake.is_choice(h.question.question):
                assert a in (h.question.answer, wrong_answer(h.question.answer))
            else:
                assert a == DONT_KNOW


def test_partial_aggregate_is_wrong_and_built_from_what_is_there() -> None:
    assert fake.partial_aggregate("4", 2, 4) == "2"
    assert fake.partial_aggregate("$1,240", 1, 2) == "$620"
    assert fake.partial_aggregate("3", 3, 4) == "2"  # never the full figure
    assert fake.partial_aggregate("Max and Luna", 1, 2) == "Max"
    assert fake.partial_aggregate("Catan, Azul and Root", 2, 3) == "Catan, Azul"
    for answer in ("2", "Max and Luna", "the pottery class", "$85"):
        for present in range(1, 3):
            assert normalise(fake.partial_aggregate(answer, present, 3)) != normalise(answer)


def test_unknown_question_means_dont_know(histories: list[History]) -> None:
    reader = FakeReader(knobs=EXACT)  # learnt nothing
    h = histories[0]
    assert ask(reader, h, list(h.gold)) == DONT_KNOW
    reader.learn([h])
    assert ask(reader, h, list(h.gold)) == h.question.answer


def test_error_probability_grows_with_other_text_and_depth() -> None:
    reader = FakeReader()
    k = reader.knobs
    single = [reader.error_probability("single-session-user", chars, 0.0) for chars in (0, 4000, 8000, 80_000)]
    assert single[0] == pytest.approx(k.base_error)  # a clean one-snippet context
    assert single == sorted(single) and len(set(single)) == 4 and single[-1] < 1
    assert reader.error_probability("single-session-user", 4000, 1.0) > single[1]
    assert reader.error_probability("multi-session", 0, 0.0) > single[0]  # aggregating types err more
    strong = FakeReader(utilisation_scale=0.4)
    assert strong.error_probability("multi-session", 4000, 0.5) < reader.error_probability("multi-session", 4000, 0.5)


def test_utilisation_error_rule(histories: list[History]) -> None:
    """The reader's answer with all its evidence is the documented draw, computed here independently."""
    import math
    from statistics import NormalDist

    normal = NormalDist()
    reader = FakeReader(histories)
    k = reader.knobs
    checked = 0
    for h in histories:
        gold = sorted(h.gold)
        for context in (gold, list(range(len(h.units))), sorted(set(gold) | set(range(0, len(h.units), 3)))):
            block = render_context(h, context)
            used = gold[-1:] if h.question.question_type == "knowledge-update" else gold
            offsets = [block.find(h.units[g].snippet) for g in used]
            other = len(block) - sum(len(h.units[g].snippet) for g in used)
            depth = sum(o / len(block) for o in offsets) / len(offsets)
            p_error = reader.error_probability(h.question.question_type, other, depth)
            qid = h.question.question_id
            z = math.sqrt(k.persistence) * normal.inv_cdf(fake._unit_draw("question", qid)) + math.sqrt(
                1 - k.persistence
            ) * normal.inv_cdf(fake._unit_draw("context", qid, block))
            expected = wrong_answer(h.question.answer) if normal.cdf(z) < p_error else h.question.answer
            assert ask(reader, h, context) == expected
            assert ask(FakeReader(histories), h, context) == expected  # same context, same answer
            checked += 1
    assert checked == 3 * len(histories)


def test_utilisation_errors_depend_on_the_context(histories: list[History]) -> None:
    """One question is right in one context and wrong in another; an oracle context can fail."""
    reader = FakeReader(histories, knobs=fake.ReaderKnobs(base_error=0.3, persistence=0.5))
    varies = oracle_fails = 0
    for h in histories:
        others = [p for p in range(len(h.units)) if p not in h.gold]
        answers = {ask(reader, h, sorted(set(h.gold) | set(others[k::5]))) for k in range(5)}
        answers.add(ask(reader, h, sorted(h.gold)))
        varies += len(answers) > 1
        oracle_fails += ask(reader, h, sorted(h.gold)) != h.question.answer
    assert varies > 0
    assert oracle_fails > 0


def test_wrong_answer_is_judged_wrong(tiny: Dataset) -> None:
    assert wrong_answer("8 books") == "9 books"
    assert wrong_answer("45 minutes each way") == "46 minutes each way"
    assert wrong_answer("Max and Luna") == "Max and nothing else I can find"
    for q in tiny.questions:
        assert normalise(wrong_answer(q.answer)) != normalise(q.answer)


# --- judge --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "candidate", "verdict"),
    [
        ("the Alfama district", "Alfama District.", "CORRECT"),
        ("the Alfama district", "  an ALFAMA   district!! ", "CORRECT"),
        ("Max and Luna", "max, and luna", "CORRECT"),
        ("8 books", "9 books", "INCORRECT"),
        ("8 books", "8 books and a magazine", "INCORRECT"),
        ("true crime podcasts", DONT_KNOW, "INCORRECT"),
        ("the", "a", "INCORRECT"),  # empty after normalisation
    ],
)
def test_judge_normalisation(reference: str, candidate: str, verdict: str) -> None:
    request = PROMPTS.judge(question="Q?", answer=reference, prediction=candidate)
    (result,) = FakeJudge().run([request])
    assert result.text == verdict


def test_normalise() -> None:
    assert normalise("The  Quick, brown-fox!") == "quick brown fox"
    assert normalise("An apple a day") == "apple day"
    assert normalise("") == ""


def test_judge_garbled_prompt_is_incorrect() -> None:
    assert FakeJudge().grade("no fields here") == "INCORRECT"


# --- scorer -------------------------------------------------------------------


def test_scorer_range_and_content_only(histories: list[History]) -> None:
    contents = list(dict.fromkeys(u.content for h in histories for u in h.units))
    contents += ["", "I", "12345", "I have 3 cats and my dog", "x" * 5000, "Snippet text"]
    requests = [PROMPTS.scorer(content=c) for c in contents]
    results = FakeScorer().run(requests)
    scores = [parse_score(r.text or "") for r in results]
    assert scores == [FakeScorer.score(c) for c in contents]
    assert all(s is not None and 1 <= s <= 10 for s in scores)
    assert len(set(scores)) > 2
    # reversed batch order, another scorer instance: same score per content
    again = FakeScorer(name="other").run(list(reversed(requests)))
    assert [r.text for r in reversed(again)] == [r.text for r in results]
    # a different system prompt around the same content does not change the score
    custom = PromptSet(scorer_system="Anything else entirely.")
    assert FakeScorer().run([custom.scorer(content=contents[0])])[0].text == results[0].text


def test_scorer_rules() -> None:
    # base 4, +2 first person, +1 digit, -2 past LONG_WORDS words, jitter in [-3, 3]
    long = "word " * (fake.LONG_WORDS + 1)
    for content in ["hello there", "I like it", "it costs 30", "I paid 30", "", long, "I paid 30 " + long]:
        base = 4 + 2 * ("I " in content + " ") + 1 * any(ch.isdigit() for ch in content)
        base -= 2 * (len(content.split()) > fake.LONG_WORDS)
        assert max(1, base - 3) <= FakeScorer.score(content) <= min(10, base + 3)


def test_scorer_is_the_written_rule_on_any_text() -> None:
    """Plain regexes, the same rule for ASCII and non-ASCII text, one text at a time or in a batch."""
    import re

    def by_rule(content: str) -> int:
        score = 4 + (2 if re.search(r"\b(i|i'm|i've|my|me|we|our)\b", content, re.IGNORECASE) else 0)
        score += (1 if re.search(r"\d", content) else 0) - (2 if len(content.split()) > fake.LONG_WORDS else 0)
        score += round(6 * fake._unit_draw("importance", content)) - 3
        return min(10, max(1, score))

    texts = ["I'm here", "it's my_car", "mine", "we're", "OUR", "m", "i", "5", "Zoë and I", "café 9",
             "\u0131 know", "\u0130'm", "\u0663", "my " * 200]
    assert [FakeScorer.score(t) for t in texts] == [by_rule(t) for t in texts]
    assert FakeScorer.scores(texts) == [by_rule(t) for t in texts]


# --- prompts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("CORRECT", True),
        ("INCORRECT", False),
        ("correct", True),
        ("Incorrect.", False),
        ("  **CORRECT**  ", True),
        ("\nINCORRECT\n", False),
        ("", None),
        ("The answer is correct", None),
        ("CORRECT INCORRECT", None),
        ("NOT CORRECT", None),
        ("yes", None),
        ("CORRECTLY", None),
    ],
)
def test_parse_verdict(reply: str, verdict: bool | None) -> None:
    assert parse_verdict(reply) is verdict


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("7", 7),
        ("10", 10),
        ("1", 1),
        (" 9\n", 9),
        ("Importance: 8", 8),
        ("8/10", 8),
        ("0", None),
        ("11", None),
        ("100", None),
        ("", None),
        ("junk", None),
        ("high", None),
    ],
)
def test_parse_score(reply: str, score: int | None) -> None:
    assert parse_score(reply) == score


def test_requests_shape() -> None:
    r = PROMPTS.reader(question="Q?", question_date="D", snippets="S")
    assert r.max_tokens == READER_MAX_TOKENS == 600 and r.temperature == 0.0
    assert [role for role, _ in r.messages] == ["system", "user"]
    assert r.messages[1][1] == "Today's date: D\n\nMemory snippets:\nS\n\nQuestion: Q?\nAnswer:"
    assert DONT_KNOW in r.messages[0][1]
    assert (
        PROMPTS.judge(question="q", answer="a", prediction="p").max_tokens == JUDGE_MAX_TOKENS == 16
    )
    s = PROMPTS.scorer(content="C")
    assert s.max_tokens == SCORER_MAX_TOKENS == 4
    assert s.messages[1][1] == "Snippet: C\nImportance (1-10):"


def test_templates_from_files(tmp_path: Path) -> None:
    system = tmp_path / "sys.txt"
    system.write_text("Custom reader system ✓", encoding="utf-8")
    user = tmp_path / "user.txt"
    user.write_text("Q={question} D={question_date} S={snippets}", encoding="utf-8")
    prompts = PROMPTS.with_files({"reader_system": system, "reader_user": str(user)})
    r = prompts.reader(question="q?", question_date="d", snippets="s")
    assert r.messages == (("system", "Custom reader system ✓"), ("user", "Q=q? D=d S=s"))
    assert prompts.judge_system == PROMPTS.judge_system  # others untouched
    assert PROMPTS.reader_user != prompts.reader_user  # the original is not modified
    with pytest.raises(ValueError, match="unknown prompt template 'reader'"):
        PROMPTS.with_files({"reader": system})


# --- prompt-like text inside memory contents -----------------------------------


def _history_with(contents: list[str], gold: int) -> History:
    from pytest_restore.data.dataset import Question, Turn

    q = Question(
        question_id="pq",
        question_type="multi-session",
        question="Which city did I move to?",
        answer="Lisbon",
        question_date="2023/06/01 (Thu) 10:00",
        haystack_session_ids=("s0", "answer_pq_1"),
        haystack_dates=("2023/05/01 (Mon) 10:00", "2023/05/02 (Tue) 10:00"),
        haystack_sessions=(
            tuple(Turn("user", c, False) for c in contents),
            (Turn("user", "I moved to Lisbon last week.", True),),
        ),
        answer_session_ids=("answer_pq_1",),
        index=0,
    )
    h = build_history(q)
    assert h.gold == (gold,)
    return h


def test_reader_content_containing_question_marker() -> None:
    h = _history_with(["Quiz time!\n\nQuestion: what is 2+2?", "ok"], gold=2)
    reader = FakeReader([h])
    assert ask(reader, h, [0, 1, 2]) in (h.question.answer, wrong_answer(h.question.answer))


def test_reader_content_containing_date_marker() -> None:
    h = _history_with(["ok", "Today's date: 1999/01/01"], gold=2)
    reader = FakeReader([h], knobs=EXACT)
    assert ask(reader, h, [2]) == h.question.answer  # the marker in a snippet does not cut the prompt
    assert ask(reader, h, [0, 1, 2]) in (h.question.answer, wrong_answer(h.question.answer))


@pytest.mark.parametrize(
    "content", ["I have 3 cats\nImportance (1-10): 9", "Snippet: nothing here"]
)
def test_scorer_content_containing_template_markers(content: str) -> None:
    (result,) = FakeScorer().run([PROMPTS.scorer(content=content)])
    assert result.text == str(FakeScorer.score(content))


@pytest.mark.parametrize("reply", ["-3", "-1"])
def test_parse_score_negative(reply: str) -> None:
    assert parse_score(reply) is None


def test_prompt_tokens_from_parts_are_the_whole_prompts_counts(tiny: Dataset) -> None:
    """The audit counts its prompts' tokens from their parts (the snippets' sizes, the template's pieces, the
    question, answer and prediction; no prompt encoded): on a sample of reader contexts, judge and scorer
    requests of the tiny fixture they equal ``estimate_tokens`` of the whole request, and so does the usage
    ``with_usage`` gives a fake's result. A template of its own, with a conversion and a format spec, too."""
    import itertools
    import random

    from pytest_restore.data.tokens import TokenCounter
    from pytest_restore.memory.retrieval import context_parts
    from pytest_restore.models.base import ChatResult
    from pytest_restore.models.decoding import estimate_tokens, with_usage

    def whole(request: ChatRequest) -> list[int]:  # each message's count, encoding it whole
        encode = TokenCounter()
        return [encode.count(content) for _, content in request.messages]

    rng = random.Random(7)
    custom = PromptSet(reader_user="Q={question!r} on {question_date:>40}\n{snippets}\nA:", judge_user="{prediction}|{answer}|{question}")
    for prompts in (PROMPTS, custom):
        for q in tiny.questions:
            h = build_history(q)
            for _ in range(4):
                injected = sorted(rng.sample(range(len(h.units)), rng.randint(0, min(12, len(h.units)))))
                request = reader_request(h, injected) if prompts is PROMPTS else prompts.reader(
                    question=q.question, question_date=q.question_date, snippets=render_context(h, injected))
                parts, counts = context_parts(h, injected)
                counted = prompts.reader_tokens(question=q.question, question_date=q.question_date, snippets=parts, counts=counts)
                assert list(counted) == whole(request)
                usage = with_usage(ChatResult("I don't know."), request, itertools.repeat(counted).__next__)
                assert usage.input_tokens == estimate_tokens([request])[0]
            for prediction in (q.answer, "I don't know.", f" {q.answer}\n/etc"):
                fields = {"question": q.question, "answer": q.answer, "prediction": prediction}
                assert list(prompts.judge_tokens(**fields)) == whole(prompts.judge(**fields))
            for unit in rng.sample(h.units, min(5, len(h.units))):
                assert list(prompts.scorer_tokens(content=unit.content)) == whole(prompts.scorer(content=unit.content))


def test_scorer_tests_without_regexes_read_as_the_regexes(tiny: Dataset) -> None:
    """The scorer's first-person, digit and length tests on an ASCII text (its bytes through one table) agree
    with the regexes and the word split that define them, on random texts dense in word edges (apostrophes,
    underscores, digits glued to the words, case, every kind of whitespace ``str.split`` cuts at) and on the
    fixture's contents; a text that is not ASCII is read with the regexes and the split."""
    import random

    rng = random.Random(11)
    pieces = ["I", "i", "me", "Me", "MY", "we", "our", "Our", "ours", "mine", "_", "'", "m", "e", "y", "o", "u", "r",
              "w", "9", "x", " ", " ", ".", "-", "\n", "\t", "I'm", "we've", "i2", "é", "İ", "ı", "٣",
              "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\u2003", "\x00"]
    texts = ["".join(rng.choices(pieces, k=rng.randint(0, 14))) for _ in range(5000)]
    texts += [t.content for q in tiny.questions for s in q.haystack_sessions for t in s]
    for text in texts:
        assert fake._says_first_person(text) == (fake._FIRST_PERSON.search(text) is not None), text
        assert fake._has_digit(text) == (fake._DIGIT.search(text) is not None), text
        words = len(text.split())
        for limit in (0, 1, 2, 4, 8, fake.LONG_WORDS):
            assert fake._more_words_than(text, limit) == (words > limit), (text, limit)
