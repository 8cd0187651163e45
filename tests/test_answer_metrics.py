"""LoCoMo's answer metrics (token F1 by its rules, BLEU-1) and the f1 judge."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from grid_helpers import figures_not_rendered

from pytest_restore.data.answer_metrics import bleu1, category_of, locomo_f1, normalise, token_f1
from pytest_restore.data.porter import stem
from pytest_restore.models.base import ChatRequest
from pytest_restore.models.f1_judge import F1Judge
from pytest_restore.models.prompts import JUDGE_USER
from pytest_restore.models.providers import ModelSpecError, check_spec, is_real

ROOT = Path(__file__).resolve().parent.parent


# Each figure below was worked out by hand from LoCoMo's rules (task_eval/evaluation.py): normalise
# (commas out, lower case, punctuation out, a/an/the/and out), Porter-stem each token, F1 of the
# token multisets; multi-hop (1) averages over the reference's comma parts the best F1 of any answer
# part; open-domain (3) keeps the reference up to its first ';'.
@pytest.mark.parametrize(
    ("answer", "reference", "category", "f1"),
    [
        # temporal: "18 years ago" / "10 years ago": 2 of 3 tokens shared each way
        ("18 years ago", "10 years ago", 2, 2 / 3),
        # single-hop: [she, paint, sunset] / [sunset]: P 1/3, R 1 -> 2 * 1/3 / (4/3) = 0.5
        ("She painted a sunset.", "sunset", 4, 0.5),
        # "and" is dropped like an article, commas too: [max, luna] / [luna, max] -> 1
        ("Max and Luna", "Luna, Max", 4, 1.0),
        # stemming: [run, marathon] / [ran, marathon]: "running" and "ran" do not meet -> 0.5
        ("running marathons", "ran a marathon", 4, 0.5),
        # multi-hop: reference parts pottery, painting, camping; best answer part 1, 0, 1 -> 2/3
        ("pottery, camping", "Pottery, painting, camping", 1, 2 / 3),
        # multi-hop: one reference part, the best of the answer's two parts
        ("Paris, London", "London", 1, 1.0),
        # open-domain: the reference up to ';' is [psycholog, counsel, certif]: P 1, R 1/3 -> 0.5
        ("Counseling", "Psychology, counseling certification; she says so in May", 3, 0.5),
        # open-domain without the ';' rule the tail would count: here it does not
        ("she says so", "Psychology; she says so", 3, 0.0),
        # nothing shared
        ("I don't know.", "Thursdays at seven", 4, 0.0),
    ],
)
def test_f1_by_locomos_rules(answer: str, reference: str, category: int, f1: float) -> None:
    assert locomo_f1(answer, reference, category) == pytest.approx(f1)


def test_normalisation_and_the_plain_rule_for_other_datasets() -> None:
    assert normalise("The Sunday, before 25 May 2023!") == "sunday before 25 may 2023"
    assert normalise("Rock-and-roll") == "rockandroll"  # punctuation goes before the words are cut
    assert category_of("multi-hop (1)") == 1 and category_of("temporal-reasoning") is None
    # a LongMemEval question: plain token F1, commas and all
    assert locomo_f1("pottery, camping", "Pottery, painting, camping", None) == pytest.approx(token_f1("pottery camping", "pottery painting camping"))


@pytest.mark.parametrize(
    ("answer", "reference", "bleu"),
    [
        ("18 years ago", "10 years ago", 2 / 3),  # 2 of 3 unigrams, same length
        ("pottery", "pottery, painting, camping", math.exp(1 - 5 / 1)),  # 1 of 1 unigram, brevity exp(1 - 5/1)
        ("a blue bowl and a blue vase", "a blue bowl", 3 / 7),  # "a" and "blue" clipped to their count in the reference
        ("nothing", "something", 0.0),
    ],
)
def test_bleu1(answer: str, reference: str, bleu: float) -> None:
    assert bleu1(answer, reference) == pytest.approx(bleu)


def test_porter_stems_known_words() -> None:
    # the irregular forms and two-letter words of NLTK's mode, and Porter's own steps
    pairs = {"dying": "die", "skies": "sky", "ties": "tie", "as": "as", "caresses": "caress", "ponies": "poni",
             "agreed": "agre", "hopping": "hop", "happy": "happi", "relational": "relat", "generalization": "gener",
             "hopeful": "hope", "electrical": "electr", "adoption": "adopt", "controll": "control", "running": "run"}
    assert {word: stem(word) for word in pairs} == pairs


def test_porter_agrees_with_nltk_on_a_wide_vocabulary() -> None:
    # NLTK is a development dependency only: the runtime stemmer is ours and must not drift from it
    nltk_porter = pytest.importorskip("nltk.stem.porter")
    reference = nltk_porter.PorterStemmer()
    text = " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "pytest_restore").rglob("*.py")))
    text += " ".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md")))
    words = sorted(set(re.findall(r"[a-z]+", text.lower())))
    assert len(words) > 3000
    differ = [(w, stem(w), reference.stem(w)) for w in words if stem(w) != reference.stem(w)]
    assert differ == []


# -- the f1 judge ----------------------------------------------------------------------------


def judge_request(question: str, reference: str, answer: str) -> ChatRequest:
    return ChatRequest((("system", "judge"), ("user", JUDGE_USER.format(question=question, answer=reference, prediction=answer))), max_tokens=16)


def test_f1_judge_grades_by_token_f1_and_its_number_limit() -> None:
    half, strict = F1Judge(0.5), F1Judge(1.0)
    asked = [
        judge_request("How long ago?", "10 years ago", "18 years ago"),  # 0.67: passes at 0.5, the documented limit
        judge_request("Which evening?", "Wednesdays", "On Wednesdays."),  # [on, wednesday] / [wednesday]: 0.67
        judge_request("Which evening?", "Wednesdays", "I don't know."),
    ]
    assert [r.text for r in half.run(asked)] == ["CORRECT", "CORRECT", "INCORRECT"]
    assert [r.text for r in strict.run(asked)] == ["INCORRECT", "INCORRECT", "INCORRECT"]
    assert half.name == "f1:0.5"


def test_f1_judge_is_a_judge_with_a_threshold_and_no_model() -> None:
    check_spec("f1:0.5", "--restore-judge")
    check_spec("f1:1", "--restore-audit-judge")
    assert not is_real("f1:0.5")
    for spec, option, problem in [
        ("f1:0.5", "--restore-reader", "--restore-reader: f1:0.5 is a judge only"),
        ("f1:half", "--restore-judge", "--restore-judge: f1:half: the threshold must be a number in (0, 1]"),
        ("f1:1.5", "--restore-judge", "--restore-judge: f1:1.5: the threshold must be in (0, 1]"),
    ]:
        with pytest.raises(ModelSpecError, match=re.escape(problem)):
            check_spec(spec, option)


GRID = (ROOT / "benches" / "test_grid.py").read_text(encoding="utf-8")


def test_a_grid_judged_by_f1(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_grid=GRID)
    locomo = ROOT / "fixtures" / "locomo_tiny.json"
    args = ["-p", "no:xdist", "--restore-bootstrap", "200", "--restore-family-checks", "report", f"--restore-data={locomo}",
            "--restore-budgets", "250", "--restore-policies", "no-evict"]
    with figures_not_rendered():  # the test reads the records and report.md, not the figure
        result = pytester.runpytest(*args, "--restore-judge", "f1:0.5")
    result.assert_outcomes(passed=1)
    records = (pytester.path / "restore-report" / "records.jsonl").read_text(encoding="utf-8")
    assert '"judge": "f1:0.5"' in records and "Real model calls" not in (pytester.path / "restore-report" / "report.md").read_text()
    wrong = pytester.runpytest(*args, "--restore-scorer", "f1:0.5")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["ERROR: --restore-scorer: f1:0.5 is a judge only (token F1 against the reference)"])
