"""The check library's kinds of exercise, each shown to pass the reference and to FAIL on wrong answers:
functions with plain-value outputs, gradient probes, Fn and Dev arguments, callee isolation, module
exercises and typed answers. Tiny references are defined here; every run goes through the same
plan -> runner.run_call -> judge path as grading (in-process, as run_local does)."""

import math

import pytest
import torch
from torch import nn

from autograder import checks
from autograder.checks import Case, Dev, Fn, ModuleCase, function_check, module_check, run_local, typed_answer_check

SEED = 3


# --- Tiny references (a "solutions" module of their own: this test module) ---------------------------


def count_pairs(n: int, causal: bool = False) -> int:
    """Number of (query, key) pairs attended: n*n, or n*(n+1)/2 with a causal mask."""
    return n * (n + 1) // 2 if causal else n * n


def mean_abs(x):
    return x.abs().mean().item()


def lower_triangle(n, device=None):
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def cumulative_mean(x):
    """y_t = mean(x_0..x_t) along dim -2: output t must not depend on inputs after t."""
    n = x.size(-2)
    weights = lower_triangle(n, x.device).to(x.dtype)
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ x


def apply_twice(f, x):
    return f(f(x))


def double(x):
    return 2 * x


def scale_rows(x):
    return x / x.sum(-1, keepdim=True)


def normalized_square(x):
    return scale_rows(x * x)


class Affine(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)
        self.gain = nn.Parameter(torch.ones(d_out))

    def forward(self, x):
        return self.proj(x) * self.gain


# --- Cases -------------------------------------------------------------------------------------------


def _count_cases(seed):
    return [Case(f"n = {n}, causal = {c}", (n,), {"causal": c}) for n in (1, 4, 7) for c in (False, True)]


def _x_cases(seed):
    g = checks.generator(seed, 1)
    return [Case("x (2, 5, 3)", (torch.rand(2, 5, 3, generator=g) + 0.5,), grad_wrt=(0,)), Case("x (4, 2)", (torch.rand(4, 2, generator=g) + 0.5,), grad_wrt=(0,))]


COUNT = function_check(count_pairs, _count_cases, ("count",), meta=False)
CUMMEAN = function_check(cumulative_mean, _x_cases, ("y",), categories=("values", "gradient"))
TRIANGLE = function_check(lower_triangle, lambda seed: [Case("n = 5", (5, Dev()))], ("mask",))
TWICE = function_check(apply_twice, lambda seed: [Case("f = double", (Fn("double"), torch.arange(4.0)))], ("y",), meta=False)
NORMALIZED = function_check(normalized_square, lambda seed: [Case(c.label, c.args) for c in _x_cases(seed)], ("y",), callees=("scale_rows",))


def _fails(check, fn, match, namespace=None):
    with pytest.raises(AssertionError, match=match):
        run_local(check, fn, seed=SEED, device="cpu", namespace=namespace)


def test_plain_value_outputs_are_compared_exactly():
    run_local(COUNT, count_pairs, seed=SEED, device="cpu")
    _fails(COUNT, lambda n, causal=False: n * (n - 1) // 2 if causal else n * n, "not right")
    _fails(COUNT, lambda n, causal=False: "many", "expected a number")


def test_gradient_probe_catches_a_leak_from_the_future_that_values_alone_also_see():
    run_local(CUMMEAN, cumulative_mean, seed=SEED, device="cpu")

    def detached(x):
        return cumulative_mean(x).detach()

    _fails(CUMMEAN, detached, "does not depend on this input through autograd")

    def peeks(x):  # right values, but output t also reads x_{t+1} (times zero): only the gradient sees it
        y = cumulative_mean(x)
        ahead = torch.cat([x[..., 1:, :], x[..., :1, :]], dim=-2)
        return y + 0.001 * ahead - 0.001 * ahead.detach()

    _fails(CUMMEAN, peeks, "gradient of .* wrong values")


def test_dev_argument_is_the_call_device_and_meta_catches_a_cpu_tensor():
    run_local(TRIANGLE, lower_triangle, seed=SEED, device="cpu")
    _fails(TRIANGLE, lambda n, device=None: torch.ones(n, n, dtype=torch.bool).tril(), "device")
    _fails(TRIANGLE, lambda n, device=None: torch.ones(n, n, dtype=torch.bool, device=device).triu(), "wrong entries")


def test_fn_argument_resolves_to_the_notebook_function():
    namespace = {"double": double}
    run_local(TWICE, apply_twice, seed=SEED, device="cpu", namespace=namespace)
    _fails(TWICE, lambda f, x: f(x), "wrong values", namespace=namespace)


def test_callee_mistake_costs_no_points_in_the_caller():
    def wrong_scale_rows(x):
        return x / x.sum()  # the callee's mistake: whole-tensor sum

    def learner_normalized_square(x):
        return namespace["scale_rows"](x * x)

    namespace = {"scale_rows": wrong_scale_rows}  # the learner's notebook: the runner patches it during a call
    run_local(NORMALIZED, learner_normalized_square, seed=SEED, device="cpu", namespace=namespace)
    assert namespace["scale_rows"] is wrong_scale_rows, "the callee must be restored after the call"

    def wrong_caller(x):  # its own mistake (x, not x * x) still fails, even with a right callee
        return namespace["scale_rows"](x)

    namespace["scale_rows"] = scale_rows
    _fails(NORMALIZED, wrong_caller, "wrong values", namespace=namespace)


# --- Module exercises -------------------------------------------------------------------------------


def _affine_cases(seed):
    g = checks.generator(seed, 9)
    return [ModuleCase("d_in 3 -> d_out 2, x (4, 3)", {"d_in": 3, "d_out": 2}, (torch.randn(4, 3, generator=g),)),
            ModuleCase("d_in 5 -> d_out 5, x (2, 3, 5)", {"d_in": 5, "d_out": 5}, (torch.randn(2, 3, 5, generator=g),))]


class AffineNoGain(Affine):
    def forward(self, x):
        return self.proj(x)


AFFINE = module_check(Affine, _affine_cases, ("output",), mistakes={"the gain is not applied": AffineNoGain})


def test_module_check_passes_the_reference_and_names_a_catalogued_mistake():
    run_local(AFFINE, Affine, seed=SEED, device="cpu")
    _fails(AFFINE, AffineNoGain, "Likely mistake: the gain is not applied")


def test_module_with_other_parameter_names_gets_both_lists():
    class Renamed(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            self.linear = nn.Linear(d_in, d_out)
            self.gain = nn.Parameter(torch.ones(d_out))

        def forward(self, x):
            return self.linear(x) * self.gain

    _fails(AFFINE, Renamed, r"names the exercise gives.*expected gain, proj.weight, proj.bias; found gain, linear.weight, linear.bias")


def test_module_that_ignores_or_replaces_its_weights_gets_no_points():
    class Reinitialises(Affine):
        def forward(self, x):
            with torch.no_grad():
                self.proj.weight.normal_()
            return super().forward(x)

    class PatchedLoad(Affine):
        def load_state_dict(self, *args, **kwargs):  # ignored: the grader calls nn.Module.load_state_dict
            return None

        def _load_from_state_dict(self, *args, **kwargs):  # keeps its own weights instead
            return None

    _fails(AFFINE, Reinitialises, "wrong values")
    _fails(AFFINE, PatchedLoad, "not the weights it was given")


def test_module_that_is_not_a_module_is_told_so():
    _fails(AFFINE, lambda d_in, d_out: (lambda x: x), "did not give an nn.Module")


# --- Typed answers ------------------------------------------------------------------------------------

EXPECTED = {"scores": torch.tensor([[0.5, 1.25], [2.0, -1.0]]), "total": torch.tensor(2.75)}
TYPED = typed_answer_check(EXPECTED, tolerance=0.01, mistakes={"the scale was forgotten": {"scores": torch.tensor([[1.0, 2.5], [4.0, -2.0]])}})


def test_typed_answers_within_tolerance_pass_in_any_container():
    run_local(TYPED, None, seed=SEED, namespace={"scores": [[0.50, 1.25], [2.0, -1.0]], "total": 2.75})
    run_local(TYPED, None, seed=SEED, namespace={"scores": ((0.504, 1.246), (2.0, -1.0)), "total": torch.tensor(2.751)})


def test_typed_answers_say_which_entries_are_off_without_the_right_value():
    with pytest.raises(AssertionError) as failure:
        run_local(TYPED, None, seed=SEED, namespace={"scores": [[0.5, 1.3], [2.0, 1.0]], "total": 2.75})
    message = str(failure.value)
    assert "2 of 4 entries" in message and "scores[0][1]" in message and "scores[1][1]" in message
    assert "1.25" not in message and "-1" not in message, "the message must not reveal the right values"


def test_typed_answers_name_a_mistake_and_report_missing_or_misshapen_answers():
    with pytest.raises(AssertionError, match="the scale was forgotten"):
        run_local(TYPED, None, seed=SEED, namespace={"scores": [[1.0, 2.5], [4.0, -2.0]], "total": 2.75})
    with pytest.raises(AssertionError, match=r"`total`: total is not defined"):
        run_local(TYPED, None, seed=SEED, namespace={"scores": [[0.5, 1.25], [2.0, -1.0]]})
    with pytest.raises(AssertionError, match=r"shape \(4,\), expected \(2, 2\)"):
        run_local(TYPED, None, seed=SEED, namespace={"scores": [0.5, 1.25, 2.0, -1.0], "total": 2.75})


def test_meta_pass_catches_a_cpu_tensor_that_matmul_silently_accepts():
    # meta @ cpu returns a meta tensor without error; the grader still sees the two devices meet.
    def projects_with_cpu_identity(x):
        return cumulative_mean(x) @ torch.eye(x.size(-1), dtype=x.dtype)  # no device=

    with pytest.raises(AssertionError, match="combines its inputs with a tensor on another device"):
        run_local(function_check(cumulative_mean, _x_cases, ("y",)), projects_with_cpu_identity, seed=SEED, device="cpu")
    run_local(function_check(cumulative_mean, _x_cases, ("y",)), cumulative_mean, seed=SEED, device="cpu")
