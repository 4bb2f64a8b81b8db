"""Every catalogued mistake of every hidden check is told apart from every other: a learner who makes mistake
B is never told "Likely mistake: A".

For each chapter with exercises and each hidden check built with a catalogue (`mistakes`, `shape_mistakes`,
`gradient_mistakes`, kept on the Check), each catalogued mistake is graded as if a learner had written it,
on the hidden cases of a few grading seeds, through the same plan -> runner -> judge path as grading. The
message it gets must not name another catalogued mistake: two mistakes that give the same outputs on the
case where the first one fails (e.g. "divided by sqrt(d_model)" and "divided by head_dim" when
d_model = 16 with 4 heads, where sqrt(d_model) = head_dim) make the test fail, naming the pair. A mistake
the check does not name at all is listed too (its diagnosis would never be shown).

Chapters whose catalogues still confuse a pair are marked xfail(strict=True) below with the pair: the
chapter's helper fixes the cases (or the catalogue) and removes the mark.
"""

import functools
import importlib
import sys

import pytest

from autograder import registry
from autograder.checks import run_local

SEEDS = (3, 1234)  # grading seeds are drawn at random: the catalogue must hold on each


def checks_of(chapter):
    return importlib.import_module(f"autograder.checks.{registry.module_name(chapter)}")


def catalogued(chapter):
    """(grade id, kind, description) for every catalogued mistake of the chapter's hidden checks."""
    found = []
    for grade_id, check in checks_of(chapter).CHECKS.items():
        for kind in ("mistakes", "shape_mistakes", "gradient_mistakes"):
            for description in getattr(check, kind, None) or {}:
                found.append((grade_id, kind, description))
    return found


@functools.lru_cache(maxsize=None)
def confusions(chapter, grade_id, seeds=SEEDS):
    """[(seed, mistake, what the learner was told instead)] for one hidden check: each catalogued mistake,
    graded, must be named as itself (not as another catalogued mistake, and not as nothing)."""
    check = checks_of(chapter).CHECKS[grade_id]
    catalogue = {}
    for kind in ("mistakes", "shape_mistakes", "gradient_mistakes"):
        catalogue.update(getattr(check, kind, None) or {})
    reference_module = sys.modules[check.reference_call.__module__]
    problems = []
    for seed in seeds:
        for description, wrong in catalogue.items():
            namespace = dict(vars(reference_module))  # callees and Fn arguments: the reference's
            try:
                run_local(check, wrong, seed=seed, device="cpu", namespace=namespace)
            except AssertionError as failure:
                message = str(failure)
                if f"Likely mistake: {description}" in message:
                    continue
                others = [d for d in catalogue if d != description and f"Likely mistake: {d}" in message]
                problems.append((seed, description, f"named as: {others[0]}" if others else f"not named: {message.splitlines()[0][:160]}"))
                continue
            problems.append((seed, description, "not caught at all (full marks)"))
    return problems


# Known problems, for the chapter helpers to fix ((chapter, grade id) -> what). strict: the mark must go when fixed.
KNOWN = {}
REWARDED = {}

CASES = [(chapter, grade_id) for chapter in registry.graded_chapters()
         for grade_id in dict.fromkeys(g for g, _, _ in catalogued(chapter))]


@pytest.mark.parametrize("chapter, grade_id", [
    pytest.param(c, g, marks=pytest.mark.xfail(strict=True, reason=KNOWN[(c, g)])) if (c, g) in KNOWN else (c, g)
    for c, g in CASES])
def test_each_catalogued_mistake_is_named_as_itself(chapter, grade_id):
    problems = confusions(chapter, grade_id)
    pairs = sorted({(m, told) for _, m, told in problems if told.startswith("named as")})
    assert not pairs, "mistakes told apart from no other on the case where they fail:\n" + "\n".join(
        f"- {m!r} is reported {told!r}" for m, told in pairs)


@pytest.mark.parametrize("chapter, grade_id", [
    pytest.param(c, g, marks=pytest.mark.xfail(strict=True, reason=REWARDED[(c, g)])) if (c, g) in REWARDED else (c, g)
    for c, g in CASES])
def test_each_catalogued_mistake_loses_points(chapter, grade_id):
    rewarded = sorted({m for _, m, told in confusions(chapter, grade_id) if told.startswith("not caught")})
    assert not rewarded, "catalogued mistakes that get full marks on the hidden cases:\n" + "\n".join(f"- {m!r}" for m in rewarded)


def test_the_catalogue_test_catches_two_mistakes_alike():
    # A catalogue where two descriptions give the same outputs everywhere: the second is reported as the first.
    import torch

    from autograder import checks

    def double(x):
        return 2 * x

    wrong_a, wrong_b = (lambda x: 3 * x), (lambda x: x + x + x)
    check = checks.function_check(double, lambda seed: [checks.Case("x (3,)", (torch.arange(3.0),))], ("y",),
                                  mistakes={"tripled": wrong_a, "added three times": wrong_b})
    problems = {(m, t) for _, m, t in confusions_of_check(check)}
    assert ("added three times", "named as: tripled") in problems and not any(m == "tripled" for m, _ in problems)
    # ... and a catalogued mistake that the cases cannot see (here: wrong only for negative inputs) is listed.
    check = checks.function_check(double, lambda seed: [checks.Case("x (3,)", (torch.arange(3.0),))], ("y",),
                                  mistakes={"doubles |x|": lambda x: 2 * x.abs()})
    assert {(m, t) for _, m, t in confusions_of_check(check)} == {("doubles |x|", "not caught at all (full marks)")}


def confusions_of_check(check, seeds=SEEDS[:1]):
    """confusions() for a Check object (the self-test above)."""
    catalogue = {**check.mistakes, **check.shape_mistakes, **check.gradient_mistakes}
    problems = []
    for seed in seeds:
        for description, wrong in catalogue.items():
            try:
                run_local(check, wrong, seed=seed, device="cpu", namespace={})
            except AssertionError as failure:
                message = str(failure)
                if f"Likely mistake: {description}" in message:
                    continue
                others = [d for d in catalogue if d != description and f"Likely mistake: {d}" in message]
                problems.append((seed, description, f"named as: {others[0]}" if others else "not named"))
                continue
            problems.append((seed, description, "not caught at all (full marks)"))
    return problems
