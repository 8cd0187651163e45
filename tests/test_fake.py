"""Tests for the deterministic fake models (pytest_restore.models.fake) and prompt parsing (prompts)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.data.units import Granularity, History, build_history
from pytest_restore.memory.retrieval import render_context
from pytest_restore.models import fake
from pytest_restore.models.base import ChatModel, ChatRequest
from pytest_restore.models.fake import (
    SATURATION_CHARS,
    UTILISATION_RATE,
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


def test_oracle_context_always_correct(
    histories: list[History], monkeypatch: pytest.MonkeyPatch
) -> None:
    reader = FakeReader(histories)
    # even a draw of 0.0 (the most error-prone) gives no error without non-gold text
    monkeypatch.setattr(fake, "_unit_draw", lambda *parts: 0.0)
    for h in histories:
        assert h.gold
        answer = ask(reader, h, list(h.gold))
        assert answer == h.question.answer
        assert judge(answer, h) is True


def test_missing_gold_snippet_means_dont_know(histories: list[History]) -> None:
    reader = FakeReader(histories)
    for h in histories:
        everything_else = [p for p in range(len(h.units)) if p not in h.gold]
        assert ask(reader, h, everything_else) == DONT_KNOW
        assert ask(reader, h, []) == DONT_KNOW  # empty memory
        for missing in h.gold:  # drop one gold unit, keep all the rest
            context = [p for p in range(len(h.units)) if p != missing]
            assert ask(reader, h, context) == DONT_KNOW
        assert judge(DONT_KNOW, h) is False


def test_unknown_question_means_dont_know(histories: list[History]) -> None:
    reader = FakeReader()  # learnt nothing
    h = histories[0]
    assert ask(reader, h, list(h.gold)) == DONT_KNOW
    reader.learn([h])
    assert ask(reader, h, list(h.gold)) == h.question.answer


def test_utilisation_error_rule(histories: list[History], monkeypatch: pytest.MonkeyPatch) -> None:
    reader = FakeReader(histories)
    for h in histories:
        full = list(range(len(h.units)))
        block = render_context(h, full)
        gold_chars = sum(len(h.units[g].snippet) + 2 for g in h.gold)
        other = len(block) + 2 - gold_chars
        assert other == sum(len(u.snippet) + 2 for i, u in enumerate(h.units) if i not in h.gold)
        rate = UTILISATION_RATE[h.question.question_type]
        p_error = rate * min(1.0, other / SATURATION_CHARS)
        assert p_error > 0
        draws: list[tuple[str, ...]] = []

        def fixed(value: float, draws: list[tuple[str, ...]] = draws) -> Callable[..., float]:
            def draw(*parts: str) -> float:
                draws.append(parts)
                return value

            return draw

        monkeypatch.setattr(fake, "_unit_draw", fixed(p_error * 0.999))
        assert ask(reader, h, full) == wrong_answer(h.question.answer)
        assert draws[-1] == ("utilisation", h.question.question_id)  # one draw per question
        monkeypatch.setattr(fake, "_unit_draw", fixed(p_error * 1.001))
        assert ask(reader, h, full) == h.question.answer
        monkeypatch.undo()


def test_utilisation_error_deterministic_and_happens(histories: list[History]) -> None:
    reader = FakeReader(histories)
    wrong = 0
    for h in histories:
        others = [p for p in range(len(h.units)) if p not in h.gold]
        subsets = [others[:k] for k in range(len(others) + 1)] + [
            others[k:] for k in range(1, len(others))
        ]
        subsets += [others[k::2] for k in range(2)] + [others[k::3] for k in range(3)]
        for k, subset in enumerate(subsets):
            context = sorted(set(h.gold) | set(subset))
            first = ask(reader, h, context)
            assert first == ask(FakeReader(histories), h, context)  # same context, same answer
            # the documented rule, computed independently of the reader
            other = sum(len(h.units[p].snippet) + 2 for p in context if p not in h.gold)
            p_error = UTILISATION_RATE[h.question.question_type] * min(1.0, other / SATURATION_CHARS)
            expect_wrong = fake._unit_draw("utilisation", h.question.question_id) < p_error
            assert first == (wrong_answer(h.question.answer) if expect_wrong else h.question.answer)
            if k == 0:
                assert first == h.question.answer
            wrong += first != h.question.answer
    # the same question fails in every crowded context: errors come per question
    assert wrong == 0 or any(
        fake._unit_draw("utilisation", h.question.question_id) < UTILISATION_RATE[h.question.question_type]
        for h in histories
    )


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
    # base 4, +2 first person, +1 digit, jitter in [-2, 2]
    for content in ["hello there", "I like it", "it costs 30", "I paid 30", ""]:
        base = 4 + 2 * ("I " in content + " ") + 1 * any(ch.isdigit() for ch in content)
        assert base - 2 <= FakeScorer.score(content) <= base + 2


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
    reader = FakeReader([h])
    assert ask(reader, h, [2]) == h.question.answer  # clean-gold context: always right
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
