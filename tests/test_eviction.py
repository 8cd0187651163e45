"""Tests for online eviction policies and their registry (pytest_restore.memory.eviction)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from pytest_restore.data.dataset import Dataset, load_dataset
from pytest_restore.data.units import Granularity, History, Unit, build_history
from pytest_restore.data.words import words
from pytest_restore.memory.eviction import (
    BUILTIN_POLICIES,
    Control,
    EvictionContext,
    Fifo,
    LlmImportance,
    Mask,
    MemoryStore,
    NoEvict,
    Policy,
    PolicyRegistry,
    RandomPolicy,
    Redundancy,
    VictimPolicy,
    budget_fits,
    default_registry,
    fact_density,
    similarity_matrix,
    stable_seed,
)
from pytest_restore.models.fake import FakeScorer

TINY = Path(__file__).resolve().parent.parent / "fixtures" / "tiny.json"
BUDGETS = (600, 300, 200, 100, 40, 10)


@pytest.fixture(scope="module")
def tiny() -> Dataset:
    return load_dataset(TINY)


@pytest.fixture(scope="module")
def histories(tiny: Dataset) -> list[History]:
    return [build_history(q, g) for q in tiny.questions for g in Granularity]


def importance_of(history: History) -> dict[str, int]:
    return {u.content: FakeScorer.score(u.content) for u in history.units}


def ctx_for(history: History, seed: int = 0) -> EvictionContext:
    return EvictionContext(history.question.question_id, seed, importance_of(history))


# --- a literal reference: docs/PROTOCOL.md section 3 ---------------------


def reference_retain(
    n: int, sizes: Sequence[int], budget: int, pick: Callable[[list[int]], int]
) -> np.ndarray:
    """Units arrive in order; after each arrival, while over budget, evict ``pick(stored)``."""
    stored: list[int] = []
    for pos in range(n):
        stored.append(pos)
        while sum(sizes[p] for p in stored) > budget:
            victim = pick(list(stored))
            assert victim in stored
            stored.remove(victim)
    mask = np.zeros(n, dtype=bool)
    mask[stored] = True
    return mask


def lowest(key: Callable[[int], float]) -> Callable[[list[int]], int]:
    """Victim with the lowest key; ties to the older unit (smaller position)."""

    def pick(stored: list[int]) -> int:
        best = stored[0]
        for p in stored:
            if key(p) < key(best):  # strict: an equal key keeps the older unit
                best = p
        return best

    return pick


def fifo_pick(stored: list[int]) -> int:
    return min(stored)


def redundancy_pick(sim: np.ndarray) -> Callable[[list[int]], int]:
    def pick(stored: list[int]) -> int:
        def redundancy(i: int) -> float:
            others = [sim[i, j] for j in stored if j != i]
            return max(others) if others else -math.inf

        return lowest(lambda i: -redundancy(i))(stored)

    return pick


def reference_for(policy: str, h: History) -> Callable[[list[int]], int]:
    units = h.units
    if policy == "fifo":
        return fifo_pick
    if policy == "llm-importance":
        imp = importance_of(h)
        return lowest(lambda p: imp[units[p].content])
    if policy == "control":
        return lowest(lambda p: -fact_density(units[p].content))
    if policy == "redundancy":
        return redundancy_pick(similarity_matrix(units))
    raise AssertionError(policy)


@pytest.mark.parametrize("policy", ["fifo", "llm-importance", "control", "redundancy"])
@pytest.mark.parametrize("budget", BUDGETS)
def test_online_semantics_match_brute_force(
    histories: list[History], policy: str, budget: int
) -> None:
    impl = default_registry()[policy]
    binding = 0
    for h in histories:
        got = impl.retain(h.units, h.sizes, budget, ctx_for(h))
        want = reference_retain(len(h.units), h.sizes.tolist(), budget, reference_for(policy, h))
        assert got.dtype == np.bool_ and got.shape == (len(h.units),)
        assert got.tolist() == want.tolist(), (
            policy,
            budget,
            h.question.question_id,
            h.granularity,
        )
        binding += int(not got.all())
    if budget <= 200:
        assert binding > 0  # the case really evicts something


def test_redundancy_with_many_ties_and_duplicates() -> None:
    """Hand-built contents with identical and disjoint word sets stress the bookkeeping."""
    texts = [
        "apple banana cherry",
        "apple banana cherry",
        "dog elephant",
        "unique words only",
        "apple banana",
        "dog elephant",
        "zebra",
        "zebra",
        "apple",
        "apple banana cherry date",
        "hello",
        "",
    ] * 2
    units = tuple(Unit(i, 0, i, "d", "user", t, t, 3 + (i % 4)) for i, t in enumerate(texts))
    sizes = np.array([u.tokens for u in units], dtype=np.int64)
    sim = similarity_matrix(units)
    for budget in range(0, int(sizes.sum()) + 2, 3):
        got = Redundancy().retain(units, sizes, budget, EvictionContext("x"))
        want = reference_retain(len(units), sizes.tolist(), budget, redundancy_pick(sim))
        assert got.tolist() == want.tolist(), budget


def test_similarity_matrix_is_cosine_of_word_sets(histories: list[History]) -> None:
    h = histories[0]
    sim = similarity_matrix(h.units)
    sets = [set(words(u.content)) for u in h.units]
    for i, a in enumerate(sets):
        assert sim[i, i] == 0.0
        for j, b in enumerate(sets):
            if i != j:
                want = len(a & b) / math.sqrt(len(a) * len(b)) if a and b else 0.0
                assert sim[i, j] == pytest.approx(want, abs=1e-12)


def test_fact_density_hand_cases() -> None:
    assert fact_density("") == 0.0
    # "I" (first person), "Paris" (mid-sentence capital), "42" (number): 3 facts / (6 + 5)
    assert fact_density("Yesterday I flew to Paris 42") == pytest.approx(3 / 11)
    # a capital after a full stop starts a sentence and is not a fact
    assert fact_density("ok. Then nothing") == 0.0
    assert fact_density("ok then Nothing") == pytest.approx(1 / 8)


@pytest.mark.parametrize("budget", BUDGETS)
def test_every_builtin_policy_fits_the_budget(histories: list[History], budget: int) -> None:
    registry = default_registry()
    for name in registry:
        policy = registry[name]
        for h in histories:
            for seed in (0, 1):
                mask = policy.retain(h.units, h.sizes, budget, ctx_for(h, seed))
                assert mask.shape == (len(h.units),) and mask.dtype == np.bool_
                if policy.budgeted:
                    assert budget_fits(mask, h.sizes, budget), (name, h.question.question_id)
                else:
                    assert mask.all()


def test_budget_fits() -> None:
    sizes = np.array([3, 4, 5], dtype=np.int64)
    assert budget_fits(np.array([True, True, False]), sizes, 7)
    assert not budget_fits(np.array([True, True, False]), sizes, 6)


def test_no_evict_keeps_everything(histories: list[History]) -> None:
    for h in histories:
        assert NoEvict().retain(h.units, h.sizes, 0, ctx_for(h)).all()
    assert NoEvict.budgeted is False
    assert all(cls.budgeted for cls in BUILTIN_POLICIES if cls is not NoEvict)


def test_fifo_is_longest_fitting_suffix_and_contained_across_budgets(
    histories: list[History],
) -> None:
    for h in histories:
        masks = {b: Fifo().retain(h.units, h.sizes, b, ctx_for(h)) for b in BUDGETS}
        for b, m in masks.items():
            kept = np.flatnonzero(m)
            if kept.size:
                assert kept.tolist() == list(range(kept[0], len(h.units)))  # a suffix
                if kept[0] > 0:
                    assert int(h.sizes[kept[0] - 1 :].sum()) > b  # and the longest
        for tight in BUDGETS:
            for loose in BUDGETS:
                if tight < loose:
                    assert not np.any(masks[tight] & ~masks[loose])


def test_fifo_unit_larger_than_budget_is_evicted_on_arrival() -> None:
    units = tuple(Unit(i, 0, i, "d", "user", "x", "x", s) for i, s in enumerate([2, 2, 9]))
    sizes = np.array([2, 2, 9], dtype=np.int64)
    assert Fifo().retain(units, sizes, 5, EvictionContext("q")).tolist() == [False, False, False]
    assert Fifo().retain(units, sizes, 9, EvictionContext("q")).tolist() == [False, False, True]


def test_llm_importance_hand_case_and_missing_score() -> None:
    contents = ["a", "b", "c", "d"]
    units = tuple(Unit(i, 0, i, "d", "user", c, c, 1) for i, c in enumerate(contents))
    sizes = np.ones(4, dtype=np.int64)
    scores = {"a": 5, "b": 3, "c": 3, "d": 9}
    ctx = EvictionContext("q", importance=scores)
    # budget 2: after c arrives evict b (3, older than c); after d arrives evict c
    assert LlmImportance().retain(units, sizes, 2, ctx).tolist() == [True, False, False, True]
    with pytest.raises(ValueError, match="importance"):
        LlmImportance().retain(units, sizes, 2, EvictionContext("q", importance={"a": 1}))


def test_control_evicts_densest_first() -> None:
    contents = ["just chatting here", "I paid 300 dollars in Rome", "nothing much really"]
    units = tuple(Unit(i, 0, i, "d", "user", c, c, 5) for i, c in enumerate(contents))
    sizes = np.full(3, 5, dtype=np.int64)
    assert Control().retain(units, sizes, 10, EvictionContext("q")).tolist() == [True, False, True]


# --- random -------------------------------------------------------------------


def test_random_matches_reference_and_is_deterministic(histories: list[History]) -> None:
    for h in histories:
        for seed in (0, 1, 2):
            ctx = EvictionContext(h.question.question_id, seed)
            rng = np.random.default_rng(stable_seed(seed, h.question.question_id))
            want = reference_retain(
                len(h.units),
                h.sizes.tolist(),
                100,
                lambda st, rng=rng: st[int(rng.integers(len(st)))],
            )
            first = RandomPolicy().retain(h.units, h.sizes, 100, ctx)
            again = RandomPolicy().retain(h.units, h.sizes, 100, ctx)
            assert first.tolist() == want.tolist() == again.tolist()


def test_random_differs_across_seeds_and_questions(histories: list[History]) -> None:
    turn = [h for h in histories if h.granularity is Granularity.TURN]
    by_seed = {
        seed: [
            RandomPolicy()
            .retain(h.units, h.sizes, 100, EvictionContext(h.question.question_id, seed))
            .tolist()
            for h in turn
        ]
        for seed in range(3)
    }
    assert by_seed[0] != by_seed[1] and by_seed[1] != by_seed[2] and by_seed[0] != by_seed[2]
    # same units, another question id: another stream
    h = turn[0]
    masks = {
        RandomPolicy().retain(h.units, h.sizes, 100, EvictionContext(f"q{i}", 0)).tobytes()
        for i in range(8)
    }
    assert len(masks) > 1
    assert stable_seed(0, "x") == stable_seed(0, "x") != stable_seed(1, "x")


def test_seeded_flags() -> None:
    registry = default_registry()
    assert [n for n in registry if registry[n].seeded] == ["random"]
    assert [n for n in registry if registry[n].needs_importance] == ["llm-importance"]
    assert list(registry) == [
        "no-evict",
        "fifo",
        "random",
        "redundancy",
        "llm-importance",
        "control",
    ]


# --- registry and user policies -----------------------------------------------


class LargestFirst(VictimPolicy):
    """Evicts the largest stored unit, ties to the older one (a user policy)."""

    name = "largest-first"

    def start(self, units: Sequence[Unit], ctx: EvictionContext) -> None:
        self.started = ctx.question_id

    def choose_victim(self, stored: Sequence[int], units: Sequence[Unit]) -> int:
        return max(stored, key=lambda p: (units[p].tokens, -p))


def test_registry_rejects_duplicates_unnamed_and_non_policies() -> None:
    registry = PolicyRegistry()
    registry.register(Fifo())
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Fifo())
    registry.register(Fifo(), replace=True)
    assert list(registry) == ["fifo"] and len(registry) == 1

    with pytest.raises(TypeError):
        registry.register(object())  # type: ignore[arg-type]

    class Unnamed(Policy):
        def retain(self, units, sizes, budget, ctx):  # type: ignore[no-untyped-def]
            return np.ones(len(units), dtype=bool)

    with pytest.raises(ValueError, match="name"):
        registry.register(Unnamed())
    Unnamed.name = ""  # type: ignore[misc]
    with pytest.raises(ValueError, match="name"):
        registry.register(Unnamed())
    Unnamed.name = "a,b"  # type: ignore[misc]
    with pytest.raises(ValueError, match="comma"):
        registry.register(Unnamed())
    with pytest.raises(KeyError):
        registry["nope"]
    assert len(registry) == 1


def test_user_victim_policy_through_generic_loop(histories: list[History]) -> None:
    registry = default_registry()
    registry.register(LargestFirst())
    policy = registry["largest-first"]
    for h in histories:
        for budget in (300, 100, 30):
            got = policy.retain(h.units, h.sizes, budget, ctx_for(h))
            assert policy.started == h.question.question_id  # type: ignore[attr-defined]
            want = reference_retain(
                len(h.units), h.sizes.tolist(), budget, lowest(lambda p, h=h: -h.units[p].tokens)
            )
            assert got.tolist() == want.tolist()
            assert budget_fits(got, h.sizes, budget)


def test_victim_not_in_store_raises(histories: list[History]) -> None:
    class Bad(VictimPolicy):
        name = "bad"

        def choose_victim(self, stored: Sequence[int], units: Sequence[Unit]) -> int:
            return len(units) + 5

    h = histories[0]
    with pytest.raises(ValueError, match="not in the store"):
        Bad().retain(h.units, h.sizes, 10, ctx_for(h))


class KeepNewest(MemoryStore):
    """A memory system: holds the newest units that fit, dropping a too-large arrival at once."""

    name = "keep-newest"

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        self.budget, self.held = budget, []  # type: ignore[var-annotated]

    def add(self, unit: Unit) -> None:
        self.held.append(unit)
        while sum(u.tokens for u in self.held) > self.budget:
            self.held.pop(0)

    def retained(self) -> list[int]:
        return [u.position for u in self.held]


@pytest.mark.parametrize(
    "policy", [cls() for cls in BUILTIN_POLICIES] + [LargestFirst(), KeepNewest()], ids=lambda p: p.name
)
def test_eviction_arrivals_match_a_replay_of_every_arrival(histories: list[History], policy: Policy) -> None:
    """The arrival that evicted each unit, as the policy records it, is the first arrival after which a replay
    of the prefix no longer holds it, and the same as the default's bisection over prefixes."""
    found = 0
    for h in histories:
        for budget in (300, 100, 30):
            for seed in (0, 1) if policy.seeded else (0,):
                ctx = ctx_for(h, seed)
                final = policy.retain(h.units, h.sizes, budget, ctx)
                evicted = [int(p) for p in np.flatnonzero(~final)]
                got = policy.eviction_arrivals(h.units, h.sizes, budget, ctx, evicted)
                assert got == Policy.eviction_arrivals(policy, h.units, h.sizes, budget, ctx, evicted)  # the bisection
                # one pass gives the store and the same arrivals (the audit's way)
                eviction = policy.evict(h.units, h.sizes, budget, ctx)
                assert np.array_equal(eviction.mask, final)
                assert eviction.arrivals(policy, h.units, h.sizes, budget, ctx, evicted) == got
                assert (eviction.left is None) == isinstance(policy, NoEvict)
                replay = [policy.retain(h.units[: t + 1], h.sizes[: t + 1], budget, ctx) for t in range(len(h.units))]
                for p in evicted:
                    assert got[p] == next(t for t in range(p, len(h.units)) if not replay[t][p]), (h.question.question_id, p)
                    assert all(replay[t][p] for t in range(p, got[p]))  # held from its arrival until then
                found += len(evicted)
    assert found > 0 or policy.name == "no-evict"



class SlowFifo(Fifo):
    """FIFO with its own retain (a user's subclass): the default pass, arrivals asked separately."""

    name = "slow-fifo"

    def retain(self, units: Sequence[Unit], sizes: npt.NDArray[np.int64], budget: int, ctx: EvictionContext) -> Mask:
        return Fifo.retain(self, units, sizes, budget, ctx)


def test_a_subclass_that_changes_retain_gets_the_default_pass(histories: list[History]) -> None:
    h = histories[0]
    eviction = SlowFifo().evict(h.units, h.sizes, 100, ctx_for(h))
    assert eviction.left is None and np.array_equal(eviction.mask, Fifo().retain(h.units, h.sizes, 100, ctx_for(h)))
    evicted = [int(p) for p in np.flatnonzero(~eviction.mask)]
    assert eviction.arrivals(SlowFifo(), h.units, h.sizes, 100, ctx_for(h), evicted) == Fifo().eviction_arrivals(
        h.units, h.sizes, 100, ctx_for(h), evicted
    )
