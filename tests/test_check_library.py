"""The check library's kinds of exercise, each shown to pass the reference and to FAIL on wrong answers:
functions with plain-value outputs, gradient probes, Fn and Dev arguments, callee isolation, dict outputs,
cases without float dtypes, mistakes named by values, shapes or gradients, module exercises and typed answers. Tiny references are defined here; every run goes through the same
plan -> runner.run_call -> judge path as grading (in-process, as run_local does)."""


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


# --- Dict outputs, dtype-free cases, mistakes named by shape or by gradient ---------------------------


def running_stats(x):
    """Steps of a computation as a dict: the running sum along dim -2 and the running mean."""
    total = x.cumsum(-2)  # (..., n, d)
    count = torch.arange(1, x.size(-2) + 1, dtype=x.dtype, device=x.device).unsqueeze(-1)  # (n, 1)
    return {"total": total, "mean": total / count}


def _x_cases_without_gradients(seed):
    return [Case(c.label, c.args) for c in _x_cases(seed)]


STATS = function_check(running_stats, _x_cases_without_gradients, ("total", "mean"), keyed=True,
                       mistakes={"the mean divides by n at every step": lambda x: {"total": x.cumsum(-2), "mean": x.cumsum(-2) / x.size(-2)}})


def test_dict_outputs_are_read_by_key_and_a_missing_key_is_named():
    run_local(STATS, running_stats, seed=SEED, device="cpu")
    run_local(STATS, lambda x: {"mean": running_stats(x)["mean"], "total": x.cumsum(-2), "extra": 0}, seed=SEED, device="cpu")
    _fails(STATS, lambda x: {"total": x.cumsum(-2)}, "should return a dict with the keys total, mean; it returned a dict without mean")
    _fails(STATS, lambda x: (x.cumsum(-2), x.cumsum(-2)), "it returned a tuple of 2")
    _fails(STATS, lambda x: {"total": x.cumsum(-2), "mean": x.cumsum(-2) / x.size(-2)}, "(?s)mean of .* wrong values.*"
           "Likely mistake: the mean divides by n at every step")
    with pytest.raises(ValueError, match="not supported for a function that returns a dict"):
        function_check(running_stats, _x_cases, ("total", "mean"), keyed=True).plan(SEED, "cpu")


def _triangle_size_cases(seed):
    return [Case(f"n = {n}", (n,), {"device": Dev()}) for n in (1, 3, 6)]


TRIANGLE_ONCE = function_check(lower_triangle, _triangle_size_cases, ("mask",), dtypes=None)


def test_cases_without_a_float_dtype_run_once_per_device():
    calls = TRIANGLE_ONCE.plan(SEED, "cpu")
    assert [c.label for c in calls] == ["n = 1, device cpu", "n = 3, device cpu", "n = 6, device cpu",
                                        "n = 1, on device 'meta'", "n = 3, on device 'meta'", "n = 6, on device 'meta'"]
    assert all(c.dtype is None for c in calls)
    run_local(TRIANGLE_ONCE, lower_triangle, seed=SEED, device="cpu")
    _fails(TRIANGLE_ONCE, lambda n, device=None: torch.ones(n, n, dtype=torch.bool).tril(), "device 'meta'")
    _fails(TRIANGLE_ONCE, lambda n, device=None: torch.ones(n, n, device=device).tril(), "dtype float32, expected torch.bool")


def _transposed_mean(x):
    return cumulative_mean(x).transpose(-1, -2) * 3  # shape (.., d, n), and other values too


SHAPED = function_check(cumulative_mean, _x_cases, ("y",), shape_mistakes={"the output is (d, n), not (n, d)": _transposed_mean})


def test_a_shape_mistake_is_named_by_the_shape_it_gives_whatever_its_values():
    run_local(SHAPED, cumulative_mean, seed=SEED, device="cpu")
    _fails(SHAPED, lambda x: cumulative_mean(x).transpose(-1, -2), r"(?s)shape \(2, 3, 5\), expected \(2, 5, 3\).*Likely mistake: the output is \(d, n\)")
    _fails(SHAPED, lambda x: cumulative_mean(x)[..., :1], r"shape \(2, 5, 1\), expected \(2, 5, 3\)\.$")


def _mean_that_peeks(x):  # right values; output t also depends on x_{t+1} (through a zero): wrong gradients only
    y = cumulative_mean(x)
    ahead = torch.cat([x[..., 1:, :], x[..., :1, :]], dim=-2)
    return y + 0.001 * ahead - 0.001 * ahead.detach()


def _mean_of_a_detached_input(x):
    return cumulative_mean(x.detach())


GRADED = function_check(cumulative_mean, _x_cases, ("y",), categories=("values", "gradient"),
                        gradient_mistakes={"output t reads the next position": _mean_that_peeks,
                                           "the input is detached": _mean_of_a_detached_input})


def test_a_gradient_mistake_is_named_by_the_gradients_it_gives():
    run_local(GRADED, cumulative_mean, seed=SEED, device="cpu")
    _fails(GRADED, _mean_that_peeks, "(?s)gradient of .* wrong values.*Likely mistake: output t reads the next position")
    _fails(GRADED, _mean_of_a_detached_input, "(?s)missing.*Likely mistake: the input is detached")

    def peeks_back(x):  # another wrong gradient (the previous position): no catalogued mistake gives it
        y = cumulative_mean(x)
        behind = torch.cat([x[..., -1:, :], x[..., :-1, :]], dim=-2)
        return y + 0.001 * behind - 0.001 * behind.detach()

    with pytest.raises(AssertionError) as failure:
        run_local(GRADED, peeks_back, seed=SEED, device="cpu")
    assert "wrong values" in str(failure.value) and "Likely mistake" not in str(failure.value)


def test_gradients_are_probed_in_float64_only():
    calls = CUMMEAN.plan(SEED, "cpu")
    assert {str(c.dtype) for c in calls if c.grad_wrt} == {"torch.float64"}
    assert any(c.dtype == torch.float32 for c in calls), "values are still checked in float32"


def test_values_are_judged_before_gradients_on_every_case():
    # Wrong gradients on the first case and wrong values on the second: the message is about the values,
    # whatever order the cases come in (a learner hears about the more basic mistake first).
    def wrong_on_the_small_case(x):
        return cumulative_mean(x) + (1.0 if x.dim() == 2 else 0.0)

    def both(x):
        return _mean_that_peeks(x) if x.dim() == 3 else wrong_on_the_small_case(x)

    _fails(GRADED, both, r"^y of .* on x \(4, 2\).*wrong values")


def last_rows(x, n):
    """The last n rows of x (..., m, d); n > m is invalid."""
    if n > x.size(-2):
        raise ValueError(f"asked for {n} rows of {x.size(-2)}")
    return x[..., x.size(-2) - n:, :]


def _rows_cases(seed):
    x = torch.rand(2, 5, 3, generator=checks.generator(seed, 4))
    return [Case("x (2, 5, 3), n = 2", (x, 2)), Case("x (2, 5, 3), n = 5", (x, 5)),
            Case("x (2, 5, 3), n = 7", (x, 7), raises=ValueError, why="7 rows cannot be taken from 5")]


ROWS = function_check(last_rows, _rows_cases, ("rows",))


def test_a_case_that_must_raise_is_called_once_after_the_others_and_fails_a_function_that_does_not():
    labels = [c.label for c in ROWS.plan(SEED, "cpu")]
    assert labels[-1] == "x (2, 5, 3), n = 7, device cpu" and len(labels) == 2 * 2 + 2 + 1, labels
    run_local(ROWS, last_rows, seed=SEED, device="cpu")
    _fails(ROWS, lambda x, n: x[..., x.size(-2) - n:, :] if n <= x.size(-2) else x,
           r"n = 7, device cpu should raise ValueError: 7 rows cannot be taken from 5\. It returned a result instead")
    _fails(ROWS, lambda x, n: x[..., x.size(-2) - n:, :] if n <= x.size(-2) else x[n], "IndexError.*It should raise ValueError")

    def asserts(x, n):
        assert n <= x.size(-2)
        return x[..., x.size(-2) - n:, :]

    _fails(ROWS, asserts, "(?s)raised AssertionError.*It should raise ValueError")


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
