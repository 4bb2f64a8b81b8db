"""The check library's kinds of exercise, each shown to pass the reference and to FAIL on wrong answers:
functions with plain-value outputs, gradient probes, Fn and Dev arguments, callee isolation, dict outputs,
cases without float dtypes, mistakes named by values, shapes or gradients, module exercises and typed answers. Tiny references are defined here; every run goes through the same
plan -> runner.run_call -> judge path as grading (in-process, as run_local does)."""


import dataclasses

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


class ScaledTable(nn.Module):
    """x * gain + a fixed float64 table's rows cast to x's dtype (as chapter 06's PositionalEncoding adds its table)."""

    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))
        self.register_buffer("table", torch.linspace(0, 1, 8 * d, dtype=torch.float64).reshape(8, d).sin() / 3, persistent=False)

    def forward(self, x):
        return x * self.gain.to(x.dtype) + self.table[: x.size(-2)].to(x.dtype)


class ScaledTableNotCast(ScaledTable):
    def forward(self, x):
        return x * self.gain.to(x.dtype) + self.table[: x.size(-2)]  # a float64 table promotes a float32 x


def _mixed_cases(seed):
    g = checks.generator(seed, "mixed-dtype")
    return [ModuleCase("x (2, 5, 4)", {"d": 4}, (torch.randn(2, 5, 4, generator=g),)),
            ModuleCase("a float32 x (2, 5, 4) whatever the layer's dtype", {"d": 4}, (torch.randn(2, 5, 4, generator=g),),
                       input_dtype=torch.float32)]


def test_a_module_case_can_call_a_layer_on_inputs_of_another_dtype():
    """ModuleCase(input_dtype=...): the layer is converted to each dtype, the inputs stay in theirs. A layer that
    adds its float64 table without casting it to x's dtype passes every same-dtype case and fails this one."""
    mixed = module_check(ScaledTable, _mixed_cases, ("output",))
    plain = module_check(ScaledTable, lambda seed: _mixed_cases(seed)[:1], ("output",))
    run_local(mixed, ScaledTable, seed=SEED, device="cpu")
    run_local(plain, ScaledTableNotCast, seed=SEED, device="cpu")  # same-dtype cases cannot see it
    _fails(mixed, ScaledTableNotCast, r"the layer in float64, the inputs in float32.*dtype float64, expected torch\.float32")


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


REFERENCE_DEVICES = []  # the devices the references below were called on (the judge's side)


def row_sums_seen(x):
    REFERENCE_DEVICES.append(x.device.type)
    return x.sum(-1)


class AffineSeen(Affine):
    def forward(self, x):
        REFERENCE_DEVICES.append(x.device.type)
        return super().forward(x)


def test_the_meta_pass_takes_the_references_shapes_from_the_cpu_and_still_fails_a_wrong_shape():
    """The judge compares a meta call's results by shape only, and takes the reference's shapes from the same inputs
    on the CPU (judge.shapes_from): torch's meta kernels are Python decompositions, about 6 times slower, and their
    first call imports torch._dynamo. A result of the wrong shape, or off 'meta', still fails there."""
    rows = function_check(row_sums_seen, lambda seed: [Case("x (3, 4)", (torch.arange(12.0).reshape(3, 4),))], ("sums",))
    REFERENCE_DEVICES.clear()
    run_local(rows, lambda x: x.sum(-1), seed=SEED, device="cpu")
    assert REFERENCE_DEVICES and set(REFERENCE_DEVICES) == {"cpu"}, f"the reference ran on {REFERENCE_DEVICES}"
    _fails(rows, lambda x: x.sum(-1, keepdim=x.device.type == "meta"), r"on device 'meta': shape \(3, 1\), expected \(3,\)")
    _fails(rows, lambda x: x.sum(-1).cpu(), "should be a meta tensor of shape")

    class AffineWrongOnMeta(Affine):
        def forward(self, x):
            out = super().forward(x)
            return out.unsqueeze(0) if out.device.type == "meta" else out

    seen = module_check(AffineSeen, _affine_cases, ("output",))
    REFERENCE_DEVICES.clear()
    run_local(seen, Affine, seed=SEED, device="cpu")
    assert REFERENCE_DEVICES and set(REFERENCE_DEVICES) == {"cpu"}, f"the reference module ran on {REFERENCE_DEVICES}"
    _fails(seen, AffineWrongOnMeta, r"on device 'meta': shape \(1, ")


# --- Fair grading (issue 15): each category fixed in the library, so every chapter inherits it ---------
# Each test below fails on the library before the fix (run against HEAD's autograder) and passes now.


def tanh_layer(x, w):
    """tanh(x w) for x (..., d_in), w (d_in, d_out)."""
    return torch.tanh(x @ w)


def row_jacobians(x, w):
    """The Jacobian of tanh_layer for each row of x (n, d_in): (n, d_out, d_in)."""
    y = tanh_layer(x, w)  # (n, d_out)
    return (1 - y * y).unsqueeze(-1) * w.transpose(0, 1).unsqueeze(0)


def _jacobian_cases(seed):
    g = checks.generator(seed, 21)
    return [Case("x (3, 4), w (4, 2)", (torch.randn(3, 4, generator=g), torch.randn(4, 2, generator=g)))]


JACOBIANS = function_check(row_jacobians, _jacobian_cases, ("jacobians",), callees=("tanh_layer",), meta=False)


def test_a_torch_transform_around_a_recorded_callee_is_graded_on_its_outputs():
    namespace = {"tanh_layer": tanh_layer}

    def with_vmap_jacrev(x, w):
        return torch.func.vmap(torch.func.jacrev(lambda xi: namespace["tanh_layer"](xi, w)))(x)

    def with_torch_vmap_and_grad(x, w):
        rows = [torch.vmap(torch.func.grad(lambda xi, j=j: namespace["tanh_layer"](xi, w)[j]))(x) for j in range(w.size(1))]
        return torch.stack(rows, dim=1)

    def with_autograd_functional(x, w):
        return torch.stack([torch.autograd.functional.jacobian(lambda xi: namespace["tanh_layer"](xi, w), xi) for xi in x])

    for learner in (with_vmap_jacrev, with_torch_vmap_and_grad, with_autograd_functional):
        run_local(JACOBIANS, learner, seed=SEED, device="cpu", namespace=namespace)
    # The caller is still judged on its outputs: a wrong one inside a transform fails.
    _fails(JACOBIANS, lambda x, w: 2 * with_vmap_jacrev(x, w), "wrong values", namespace=namespace)


def test_the_callee_recorder_never_changes_what_the_callee_does():
    from autograder.checks import runner

    log, active = [], []

    def raises(x):
        assert active == ["f"], "the recorder says which callee is running"
        raise KeyError("its own error")

    with pytest.raises(KeyError, match="its own error"):
        runner._recording(raises, "f", log, active)(torch.ones(2))
    assert active == [] and log[0]["raised"].startswith("KeyError") and "args" in log[0]
    x = torch.ones(3, requires_grad=True)
    out = runner._recording(lambda t: t * 2, "f", log)(x)
    assert out.requires_grad and log[-1]["out"]["tensor"]["shape"] == [3]
    batched = torch.func.vmap(runner._recording(lambda t: t.sin(), "f", log))(torch.ones(4, 3))
    assert torch.equal(batched, torch.ones(4, 3).sin()) and "unrecorded" in log[-1]


def padding_mask(lengths, n):
    """(batch, n) bool: True where position < length."""
    return torch.arange(n, device=lengths.device) < lengths.unsqueeze(-1)


PADDING = function_check(padding_mask, lambda seed: [Case("lengths [3, 1, 4], n = 5", (torch.tensor([3, 1, 4]), 5))], ("mask",), dtypes=None)


def test_the_meta_pass_charges_only_a_device_mistake_it_can_prove():
    def loops_over_values(lengths, n):  # valid: reads the lengths' values, creates on lengths.device
        mask = torch.zeros(len(lengths), n, dtype=torch.bool, device=lengths.device)
        for i, length in enumerate(lengths.tolist()):
            mask[i, :length] = True
        return mask

    def uses_item(lengths, n):
        return torch.stack([torch.arange(n, device=lengths.device) < int(length.item()) for length in lengths])

    run_local(PADDING, loops_over_values, seed=SEED, device="cpu")
    run_local(PADDING, uses_item, seed=SEED, device="cpu")
    nbchecks_meta = checks.visible.expect_meta
    nbchecks_meta(loops_over_values, torch.empty(3, dtype=torch.long, device="meta"), 5, shape=(3, 5), what="mask")
    # True device mistakes still fail: a CPU tensor combined with meta inputs, or a result on another device.
    _fails(PADDING, lambda lengths, n: torch.arange(n) < lengths.unsqueeze(-1), "device")

    def written_into_a_cpu_tensor(lengths, n):  # fails on meta with "Cannot copy out of meta tensor", as .tolist() does
        mask = torch.zeros(len(lengths), n, dtype=torch.bool)
        mask[:] = torch.arange(n, device=lengths.device) < lengths.unsqueeze(-1)
        return mask

    _fails(PADDING, written_into_a_cpu_tensor, "tensor on the CPU meets the inputs")
    with pytest.raises(AssertionError, match="combines its 'meta' inputs with a tensor on the CPU"):
        nbchecks_meta(written_into_a_cpu_tensor, torch.empty(3, dtype=torch.long, device="meta"), 5, shape=(3, 5), what="mask")
    with pytest.raises(AssertionError) as failure:
        nbchecks_meta(lambda lengths, n: torch.arange(n) < lengths.unsqueeze(-1),
                      torch.empty(3, dtype=torch.long, device="meta"), 5, shape=(3, 5), what="mask")
    assert "device" in str(failure.value)


def rows_and_total(x):
    """(scale_rows(x), the sum of x): the caller passes its own input to the callee."""
    return scale_rows(x), x.sum()


ROWS_TOTAL = function_check(rows_and_total, lambda seed: [Case(c.label, c.args) for c in _x_cases(seed)], ("rows", "total"),
                            callees=("scale_rows",))


def test_a_right_caller_keeps_its_points_whatever_pattern_it_calls_a_wrong_callee_in():
    def wrong_scale_rows(x):
        return x / x.sum()

    def raises_on_3d(x):
        if x.dim() == 3:
            raise RuntimeError("only matrices")
        return scale_rows(x)

    def in_place(x):
        x /= x.sum(-1, keepdim=True)
        return x

    def per_row(x):  # another call pattern: the callee on one row at a time
        flat = (x * x).reshape(-1, 1, x.size(-1))
        return torch.cat([namespace["scale_rows"](row) for row in flat]).reshape(x.shape)

    def per_row_wrong(x):  # the caller's own mistake (x, not x * x), in the same pattern
        flat = x.reshape(-1, 1, x.size(-1))
        return torch.cat([namespace["scale_rows"](row) for row in flat]).reshape(x.shape)

    for callee in (wrong_scale_rows, raises_on_3d):
        namespace = {"scale_rows": callee}
        run_local(NORMALIZED, per_row, seed=SEED, device="cpu", namespace=namespace)
    namespace = {"scale_rows": in_place}
    run_local(ROWS_TOTAL, lambda x: (namespace["scale_rows"](x), x.sum()), seed=SEED, device="cpu", namespace=namespace)
    # A wrong caller loses its points with a right callee, and with a wrong one called in the reference's pattern.
    namespace = {"scale_rows": scale_rows}
    _fails(NORMALIZED, per_row_wrong, "wrong values", namespace=namespace)
    namespace = {"scale_rows": wrong_scale_rows}
    _fails(NORMALIZED, lambda x: 2 * namespace["scale_rows"](x * x), "wrong values", namespace=namespace)
    # A wrong caller that calls a wrong callee on OTHER inputs than the reference's (x, not x * x) looks like another
    # call pattern; the replay round (its callee answering with the reference's results) shows the caller's own
    # mistake, and it loses its points. It failed to before the replay rounds (the caller kept its points).
    _fails(NORMALIZED, lambda x: namespace["scale_rows"](x), "run again with the right results", namespace=namespace)
    # A wrong caller whose callee raised (so the first run never got past the callee) is not let off either: in the
    # replay round the callee answers, and the caller's own mistake shows. Before the replay rounds it kept its points.
    namespace = {"scale_rows": raises_on_3d}
    _fails(NORMALIZED, lambda x: 2 * namespace["scale_rows"](x * x), "wrong values", namespace=namespace)
    # And a right caller in another pattern over a wrong callee is graded in a replay round, where it is right.
    namespace = {"scale_rows": wrong_scale_rows}
    run_local(NORMALIZED, per_row, seed=SEED, device="cpu", namespace=namespace)


def stats_of_squares(x):
    """running_stats of x * x (a caller of a dict-returning callee)."""
    return running_stats(x * x)["mean"]


def count_of(x):
    return x.size(-2)


def mean_by_count(x):
    return x.sum(-2) / count_of(x)


STATS_OF_SQUARES = function_check(stats_of_squares, _x_cases_without_gradients, ("mean",), callees=("running_stats",))
MEAN_BY_COUNT = function_check(mean_by_count, _x_cases_without_gradients, ("mean",), callees=("count_of",))


def test_a_right_callee_is_never_blamed_whatever_it_returns():
    namespace = {"running_stats": running_stats, "count_of": count_of}
    for check, wrong_caller in ((STATS_OF_SQUARES, lambda x: namespace["running_stats"](x)["mean"]),
                                (MEAN_BY_COUNT, lambda x: x.sum(-2) / (namespace["count_of"](x) + 1))):
        with pytest.raises(AssertionError) as failure:
            run_local(check, wrong_caller, seed=SEED, device="cpu", namespace=namespace)
        assert "wrong values" in str(failure.value) and "Your `" not in str(failure.value) and "comes from your" not in str(failure.value)
    namespace["count_of"] = lambda x: x.size(-1)  # a wrong callee is named (proven by recomputation)
    _fails(MEAN_BY_COUNT, lambda x: x.sum(-2) / (namespace["count_of"](x) + 1), "Your `count_of` returns wrong results", namespace=namespace)


def masked_mean_weights(scores, mask):
    """softmax over the allowed keys (mask True = may attend); a row with no allowed key is NaN (0/0)."""
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def _masked_cases(seed):
    g = checks.generator(seed, 23)
    mask = torch.tensor([[True, False, True], [False, False, False], [True, True, False]])
    return [Case("scores (3, 3), row 1 fully masked", (torch.randn(3, 3, generator=g), mask))]


MASKED = function_check(masked_mean_weights, _masked_cases, ("weights",))


def test_one_rule_for_integer_answers_and_for_fully_masked_rows():
    _fails(COUNT, lambda n, causal=False: float(n * (n + 1) // 2 if causal else n * n), "an int is expected")
    run_local(COUNT, lambda n, causal=False: torch.tensor(n * (n + 1) // 2 if causal else n * n), seed=SEED, device="cpu")
    # A fully masked row: NaN (the formula, 0/0) or zeros (PyTorch's convention) are both right; anything else is not.
    run_local(MASKED, masked_mean_weights, seed=SEED, device="cpu")
    run_local(MASKED, lambda s, m: masked_mean_weights(s, m).nan_to_num(0.0), seed=SEED, device="cpu")
    _fails(MASKED, lambda s, m: torch.softmax(s.masked_fill(~m, -1e9), dim=-1), "expected NaN")


def always_true(x):
    return True


def test_messages_describe_values_in_words():
    with pytest.raises(AssertionError) as failure:
        run_local(function_check(always_true, lambda seed: [Case("x (2,)", (torch.ones(2),))], ("flag",), meta=False),
                  lambda x: x > 0, seed=SEED, device="cpu")
    assert "Returned(" not in str(failure.value) and "a bool tensor of shape (2,)" in str(failure.value)
    # -inf expected, a finite fill given: named in words, not as "largest difference 3.4e+38".
    with pytest.raises(AssertionError) as failure:
        run_local(function_check(lambda s, m: s.masked_fill(~m, float("-inf")), _masked_cases, ("scores",)),
                  lambda s, m: s.masked_fill(~m, torch.finfo(s.dtype).min), seed=SEED, device="cpu")
    assert "expected -inf (a masked entry)" in str(failure.value) and "e+38" not in str(failure.value)
    # Computed in float32 and cast back: the float64 check names the lost precision.
    _fails(CUMMEAN, lambda x: cumulative_mean(x.float()).to(x.dtype), "(?s)float64.*computed in float32 .* and cast back")
    # Typed answers: the first line names the answer that is off.
    with pytest.raises(AssertionError) as failure:
        run_local(TYPED, None, seed=SEED, namespace={"scores": [[0.5, 1.3], [2.0, 1.0]], "total": 2.75})
    assert str(failure.value).startswith("`scores`: 2 of 4 entries are off")


def test_a_replay_table_holds_the_reference_callee_on_the_learners_own_callee_inputs():
    from autograder.checks import runner

    def wrong_scale_rows(x):
        return x / x.sum()

    x = torch.rand(3, 4, dtype=torch.float64) + 0.5
    log = []
    runner._recording(wrong_scale_rows, "scale_rows", log)(x[:2])
    table = checks.replay_table({"callees": log}, ("scale_rows",), __name__)
    (entry,) = table
    assert entry["args"] == log[0]["args"]
    assert torch.allclose(checks.decode_value(entry["out"]).values, scale_rows(x[:2]))
    assert not torch.allclose(checks.decode_value(log[0]["out"]).values, scale_rows(x[:2])), "the learner's own result differs"


def last_triangle_rows(m, n, device=None):
    """The last m rows of lower_triangle(n): a caller of a callee that takes a device argument."""
    return lower_triangle(n, device)[n - m:]


LAST_ROWS = function_check(last_triangle_rows, lambda seed: [Case("m = 2, n = 5", (2, 5), {"device": Dev()})], ("mask",), dtypes=None,
                           callees=("lower_triangle",))


def test_a_callee_given_a_device_is_recomputed_on_it_and_blamed_only_when_wrong():
    namespace = {"lower_triangle": lambda n, device=None: torch.ones(n, n, dtype=torch.bool, device=device).triu()}
    # Another pattern: the full triangle of n + 1, then rows and columns cut: the callee's mistake costs nothing here.
    run_local(LAST_ROWS, lambda m, n, device=None: namespace["lower_triangle"](n + 1, device=device)[n - m:n, :n],
              seed=SEED, device="cpu", namespace=namespace)
    namespace["lower_triangle"] = lower_triangle
    run_local(LAST_ROWS, lambda m, n, device=None: namespace["lower_triangle"](n + 1, device=device)[n - m:n, :n],
              seed=SEED, device="cpu", namespace=namespace)
    with pytest.raises(AssertionError) as failure:
        run_local(LAST_ROWS, lambda m, n, device=None: namespace["lower_triangle"](n, device=device)[:m], seed=SEED, device="cpu", namespace=namespace)
    assert "wrong entries" in str(failure.value) and "Your `" not in str(failure.value)


def test_a_callee_hidden_inside_a_torch_transform_is_named_as_a_possible_cause():
    """A caller that calls its callee inside torch.func.vmap cannot be graded apart from it (the transform's tensors
    have no values outside it); the message must not pin the mistake on the caller alone."""

    def wrong_scale_rows(x):
        return 2 * x / x.sum(-1, keepdim=True)

    namespace = {"scale_rows": wrong_scale_rows}

    def vmapped(x):  # right, were its callee right
        return torch.func.vmap(lambda row: namespace["scale_rows"](row * row))(x.reshape(-1, x.size(-1))).reshape(x.shape)

    _fails(NORMALIZED, vmapped, "inside a torch transform", namespace=namespace)
    namespace["scale_rows"] = scale_rows
    run_local(NORMALIZED, vmapped, seed=SEED, device="cpu", namespace=namespace)  # and with a right callee it passes


# --- Salts: named after the grade id in new chapters, the integers of chapters 01-05 kept -----------------------


def test_a_named_salt_separates_checks_and_seeds_and_an_integer_salt_keeps_its_draws():
    from autograder.checks import case_salt, generator

    def draw(seed, salt):
        return torch.randn(4, generator=generator(seed, salt))

    assert torch.equal(draw(3, "f_hidden"), draw(3, "f_hidden"))  # deterministic
    assert not torch.equal(draw(3, "f_hidden"), draw(3, "g_hidden"))  # two checks of one notebook never share draws
    assert not torch.equal(draw(3, "f_hidden"), draw(4, "f_hidden"))  # inputs change with the grading seed
    # chapters 01-05: seed * 1000 + salt, as their hidden inputs were drawn before names existed
    assert torch.equal(draw(3, 11), torch.randn(4, generator=torch.Generator().manual_seed(3011)))
    assert case_salt("MultiHeadAttention_hidden", 2) == "MultiHeadAttention_hidden#2" and case_salt(40, 2) == 42
    assert not torch.equal(draw(3, case_salt("m_hidden", 0)), draw(3, case_salt("m_hidden", 1)))


# --- Functions that take a model (Model arguments) ------------------------------------------------------


def run_model_twice(model, x):
    """A function of a model the grader builds (greedy decoding and generation are graded this way)."""
    return model(model(x))


def sgd_step(model, x, lr):
    """One plain gradient step on mean(model(x)**2); returns the loss before the step."""
    loss = model(x).pow(2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return loss.detach()


def _model_cases(seed, state_after=False):
    g = checks.generator(seed, "model-cases")
    state = checks.grader_weights(Affine(3, 3), g)
    x = torch.randn(2, 3, generator=g, dtype=torch.float64)
    model = checks.Model("Affine", {"d_in": 3, "d_out": 3}, state, state_after=state_after)
    return [Case("Affine(3, 3) on x (2, 3)", (model, x) if not state_after else (model, x, 0.1))]


TWICE_MODEL = function_check(run_model_twice, _model_cases, ("y",))
STEP = function_check(sgd_step, lambda seed: _model_cases(seed, state_after=True), ("loss", "proj.weight after the step", "proj.bias after the step", "gain after the step"))


def test_a_model_argument_is_built_from_the_notebook_class_with_the_graders_weights():
    namespace = {"Affine": Affine}
    run_local(TWICE_MODEL, run_model_twice, seed=SEED, device="cpu", namespace=namespace)
    # Built from the notebook's own class: a class that ignores its gain is a wrong model, and the check says so.
    _fails(TWICE_MODEL, run_model_twice, "wrong values", namespace={"Affine": AffineNoGain})
    _fails(TWICE_MODEL, lambda model, x: model(x), "wrong values", namespace=namespace)
    _fails(TWICE_MODEL, lambda model, x: model(x.cpu().float()).to(x.dtype), "dtype|device|wrong", namespace=namespace)
    # In the sandbox the class comes from the notebook only: a notebook without it is told so.
    specs, arrays = checks.encode_calls(TWICE_MODEL.plan(SEED, "cpu"))
    record = checks.runner.run_call(run_model_twice, specs[0], arrays, namespace={})
    assert not record["ok"] and "Affine is not defined" in record["error"], record
    # Without a namespace (a test passing the function alone), the reference's class is used.
    run_local(TWICE_MODEL, run_model_twice, seed=SEED, device="cpu")


def test_a_model_updated_by_the_function_is_compared_after_the_call():
    namespace = {"Affine": Affine}
    run_local(STEP, sgd_step, seed=SEED, device="cpu", namespace=namespace)

    def no_update(model, x, lr):  # the right loss, no step: only the weights after the call show it
        return model(x).pow(2).mean().detach()

    def wrong_sign(model, x, lr):
        loss = model(x).pow(2).mean()
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p += lr * p.grad
        return loss.detach()

    _fails(STEP, no_update, r"proj\.weight after the step .*wrong values", namespace=namespace)
    _fails(STEP, wrong_sign, r"proj\.weight after the step .*wrong values", namespace=namespace)


def output_in_eval(model, x):
    """The model's output in eval() mode, its own mode given back (as greedy decoding does)."""
    was_training = model.training
    model.eval()
    y = model(x)
    model.train(was_training)
    return y


def _mode_cases(seed):
    """The same model in eval() and in train() mode, with the mode after the call compared (mode_after)."""
    g = checks.generator(seed, "mode-cases")
    state = checks.grader_weights(Affine(3, 3), g)
    x = torch.randn(2, 3, generator=g, dtype=torch.float64)
    return [Case(f"Affine(3, 3) in {mode}() mode", (checks.Model("Affine", {"d_in": 3, "d_out": 3}, state, train=mode == "train",
                                                             mode_after=True), x)) for mode in ("eval", "train")]


MODE = function_check(output_in_eval, _mode_cases, ("y", "model.training after the call"), {
    "left in eval() mode": lambda model, x: (model.eval(), model(x))[1],
    "put in train() mode whatever mode it was given": lambda model, x: (model(x), model.train())[0],
})


def test_the_mode_a_function_leaves_its_model_in_is_compared_when_asked():
    """Model(mode_after=True): model.training after the call is an output, on both sides of the sandbox (the
    runner's record, the judge's reference and catalogued mistakes). The values alone cannot tell these apart."""
    namespace = {"Affine": Affine}
    run_local(MODE, output_in_eval, seed=SEED, device="cpu", namespace=namespace)
    _fails(MODE, lambda model, x: (model.eval(), model(x))[1], r"model\.training after the call .* in train\(\) mode.*: got False, which is not right"
           r"[\s\S]*Likely mistake: left in eval\(\) mode", namespace=namespace)
    _fails(MODE, lambda model, x: (model(x), model.train())[0], r"model\.training after the call .* in eval\(\) mode.*: got True, which is not right[\s\S]*Likely mistake: put in train",
           namespace=namespace)
    # Without mode_after the mode is not an output: the same wrong function passes (what chapter 08 rewarded).
    plain = function_check(output_in_eval, lambda seed: [Case(c.label, (dataclasses.replace(c.args[0], mode_after=False), c.args[1]))
                                                         for c in _mode_cases(seed)], ("y",))
    run_local(plain, lambda model, x: (model.eval(), model(x))[1], seed=SEED, device="cpu", namespace=namespace)


# --- dtype arguments, and the tolerance of a call run as given ------------------------------------------


def angle_table(n, d, dtype=torch.float32):
    """A table of n x d angles pos / 10000^(i/d), made in `dtype` (a function of sizes and a dtype, like a
    positional-encoding table)."""
    pos = torch.arange(n, dtype=dtype)[:, None]
    return pos / torch.pow(torch.tensor(10000.0, dtype=dtype), torch.arange(d, dtype=dtype) / d)


TABLE = function_check(angle_table, lambda seed: [Case(f"n = 7, d = 6, {t}", (7, 6), {"dtype": t}) for t in (torch.float32, torch.float64)],
                       ("angles",), dtypes=None, meta=False)


def test_a_dtype_argument_reaches_the_function_and_a_float64_table_made_in_float32_is_caught():
    run_local(TABLE, angle_table, seed=SEED, device="cpu")
    _fails(TABLE, lambda n, d, dtype=torch.float32: angle_table(n, d, torch.float32), "dtype")

    def in_float32_then_cast(n, d, dtype=torch.float32):  # the right dtype, float32 precision: float64's tolerance sees it
        return angle_table(n, d, torch.float32).to(dtype)

    _fails(TABLE, in_float32_then_cast, "wrong values")



# --- A sublayer's forward as a callee: no double penalty inside a module --------------------------------


class Scale(nn.Module):
    """The sublayer (its own exercise): a learned gain."""

    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * self.gain


class Block(nn.Module):
    """The layer graded with Scale.forward as a callee: judged against the reference composed with the learner's
    recorded sublayer outputs."""

    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.scale = Scale(d)

    def forward(self, x):
        return x + self.scale(self.proj(x))


def _block_cases(seed):
    return [ModuleCase("d = 4, x (2, 3, 4)", {"d": 4}, (torch.rand(2, 3, 4, generator=checks.generator(seed, "block")),))]


BLOCK = module_check(Block, _block_cases, ("y",), callees=("Scale.forward",))

LEARNER_CLASSES = '''
import torch
from torch import nn

class Scale(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * self.gain {scale_mistake}

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.scale = Scale(d)

    def forward(self, x):
        return {block_body}
'''


def _learner(scale_mistake="", block_body="x + self.scale(self.proj(x))"):
    namespace = {}
    exec(LEARNER_CLASSES.format(scale_mistake=scale_mistake, block_body=block_body), namespace)
    return namespace


def test_a_wrong_sublayer_costs_only_its_own_exercise_and_a_wrong_layer_still_fails():
    right = _learner()
    run_local(BLOCK, right["Block"], seed=SEED, device="cpu", namespace=right)
    wrong_scale = _learner(scale_mistake="+ 1.0")
    run_local(BLOCK, wrong_scale["Block"], seed=SEED, device="cpu", namespace=wrong_scale)  # judged on its own
    assert "forward" in wrong_scale["Scale"].__dict__ and not hasattr(wrong_scale["Scale"].forward, "__wrapped__")  # restored
    no_residual = _learner(block_body="self.scale(self.proj(x))")
    _fails(BLOCK, no_residual["Block"], "wrong values", namespace=no_residual)
    both_wrong = _learner(scale_mistake="+ 1.0", block_body="self.scale(self.proj(x))")
    _fails(BLOCK, both_wrong["Block"], "wrong values", namespace=both_wrong)
    # Without the callee the same wrong sublayer costs the layer too: the composition is what spares it.
    alone = module_check(Block, _block_cases, ("y",))
    _fails(alone, wrong_scale["Block"], "wrong values", namespace=wrong_scale)


def powers(x):
    """Twenty outputs (a training step returns its loss and every parameter): all of them are reported and judged."""
    return tuple(x ** k for k in range(20))


POWERS = function_check(powers, lambda seed: [Case("x (3,)", (torch.rand(3, generator=checks.generator(seed, "powers")) + 0.5,))],
                        tuple(f"x^{k}" for k in range(20)), meta=False)


def test_every_item_of_a_long_tuple_is_judged():
    run_local(POWERS, powers, seed=SEED, device="cpu")
    _fails(POWERS, lambda x: powers(x)[:19] + (x ** 20,), "x\\^19 of <lambda> .*wrong values")


# --- Train mode: dropout compared under the grader's seeded masks ---------------------------------------


class Mlp(nn.Module):
    """linear2(dropout(relu(linear1(x)))): dropout on the hidden layer."""

    def __init__(self, d, hidden, dropout=0.0):
        super().__init__()
        self.linear1, self.linear2, self.dropout = nn.Linear(d, hidden), nn.Linear(hidden, d), nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))  # (B, T, d)


class MlpDropsOutput(Mlp):
    def forward(self, x):
        return self.dropout(self.linear2(torch.relu(self.linear1(x))))  # dropout on the output instead


class MlpOneMask(Mlp):
    """Draws one mask of shape (T, hidden) and shares it across the batch (a mask drawn once and reused)."""

    def forward(self, x):
        h = torch.relu(self.linear1(x))
        if self.training and getattr(self, "mask", None) is None:
            self.mask = nn.functional.dropout(torch.ones_like(h[0]), self.dropout.p, True)  # (T, hidden), drawn once
        return self.linear2(h * self.mask if self.training else h)


def _mlp_cases(seed):
    g = checks.generator(seed, 3)
    return [ModuleCase("train(), dropout = 0.5, x (2, 4, 6)", {"d": 6, "hidden": 10, "dropout": 0.5}, (torch.randn(2, 4, 6, generator=g),), train=True)]


MLP = module_check(Mlp, _mlp_cases, ("y",), mistakes={"dropout applied to the output instead of the hidden layer": MlpDropsOutput}, salt=7)


def test_train_mode_compares_where_dropout_sits_under_the_graders_masks():
    run_local(MLP, Mlp, seed=SEED, device="cpu")  # the same structure: the same masks, the same outputs
    _fails(MLP, MlpDropsOutput, "dropout applied to the output instead of the hidden layer")
    _fails(MLP, MlpOneMask, "not right|wrong")  # one mask for every sequence of the batch


def test_seeded_dropout_is_the_graders_own_and_leaves_f_dropout_as_it_was():
    from autograder.checks.runner import seeded_dropout

    original = nn.functional.dropout
    x = torch.ones(64, 64)
    with seeded_dropout(5):
        a = nn.Dropout(0.5).train()(x)
    with seeded_dropout(5):
        b = nn.functional.dropout(x, 0.5, True)
    with seeded_dropout(6):
        c = nn.functional.dropout(x, 0.5, True)
    assert nn.functional.dropout is original
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert set(a.unique().tolist()) == {0.0, 2.0}  # inverted dropout: kept entries scaled by 1 / (1 - p)


# --- Optimizer arguments: a stateful optimizer the function must step -------------------------------------


class Lin(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        return self.proj(x)  # (B, d)


def fit(model, x, steps=2, lr=0.1, optimizer=None):
    optimizer = optimizer if optimizer is not None else torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = (model(x) - 1).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    return torch.stack(losses)  # (steps,)


def fit_own_optimizer(model, x, steps=2, lr=0.1, optimizer=None):
    return fit(model, x, steps, lr)  # the optimizer it is given is ignored


def _fit_cases(seed):
    g = checks.generator(seed, 4)
    state = checks.grader_weights(Lin(3), g)
    model = checks.Model("Lin", {"d": 3}, state, train=True, state_after=True, reference=Lin)
    return [Case("Lin(3), x (4, 3), Adam(lr=0.05), 3 steps", (model, torch.randn(4, 3, generator=g)),
                 {"steps": 3, "optimizer": checks.Optim("Adam", {"lr": 0.05})})]


FIT = function_check(fit, _fit_cases, ("losses", "proj.weight", "proj.bias"), meta=False,
                     mistakes={"the optimizer it is given is ignored": fit_own_optimizer})


def test_an_optimizer_argument_is_built_on_the_model_and_must_be_the_one_stepped():
    run_local(FIT, fit, seed=SEED, device="cpu")
    _fails(FIT, fit_own_optimizer, "the optimizer it is given is ignored")


def test_visible_meta_check_does_not_swallow_a_refused_device_argument():
    """A function without the `device` parameter loses its points hidden: the visible meta check says so too."""
    expect_meta = checks.visible.expect_meta

    def table(n, m, *, device=None):
        return torch.zeros(n, m, device=device)  # (n, m)

    def table_without_device(n, m):
        return torch.zeros(n, m)

    expect_meta(table, 2, 3, device=torch.device("meta"), shape=(2, 3), what="table(2, 3, device='meta')")
    with pytest.raises(AssertionError, match="(?s)unexpected keyword argument 'device'.*Keep the signature"):
        expect_meta(table_without_device, 2, 3, device=torch.device("meta"), shape=(2, 3), what="table(2, 3, device='meta')")


# --- A count that builds another exercise's module: graded on its own ------------------------------------


def affine_parameter_count(d_in: int, d_out: int) -> int:
    """The parameters of Affine(d_in, d_out): W (d_out x d_in), b (d_out), gain (d_out)."""
    return d_out * d_in + 2 * d_out


AFFINE_COUNT = function_check(affine_parameter_count, lambda seed: [Case(f"{a}, {b}", (a, b)) for a, b in ((3, 5), (8, 2))],
                              ("count",), meta=False, builds=("Affine",))

LEARNER_AFFINE = '''
import torch
from torch import nn

class Affine(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out{linear_bias})
        self.gain = nn.Parameter(torch.ones(d_out))

    def forward(self, x):
        return self.proj(x) * self.gain

def affine_parameter_count(d_in, d_out):
    return {count}
'''


def _affine_learner(count, linear_bias=""):
    namespace = {}
    exec(LEARNER_AFFINE.format(count=count, linear_bias=linear_bias), namespace)
    return namespace


def test_a_count_built_from_the_learners_wrong_module_is_graded_on_its_own():
    """A count that builds the learner's own module pays nothing for that module's mistake (a bias left out):
    the runner reports the built module's parameters and the judge compares the count with them. A count that
    builds the module with the wrong arguments, or a wrong formula, still fails; without `builds` it fails too."""
    built = "sum(p.numel() for p in Affine(d_in, d_out).parameters())"
    for bias in ("", ", bias=False"):  # a right module, then one whose Linear has no bias
        learner = _affine_learner(built, bias)
        run_local(AFFINE_COUNT, learner["affine_parameter_count"], seed=SEED, device="cpu", namespace=learner)
        assert learner["Affine"].__name__ == "Affine" and isinstance(learner["Affine"], type)  # the class is restored
    swapped = _affine_learner("sum(p.numel() for p in Affine(d_out, d_in).parameters())", ", bias=False")
    _fails(AFFINE_COUNT, swapped["affine_parameter_count"], "not right", namespace=swapped)  # built with the wrong arguments
    formula = _affine_learner("d_out * d_in + d_out", ", bias=False")  # its own formula, wrong as the module is
    _fails(AFFINE_COUNT, formula["affine_parameter_count"], "not right", namespace=formula)
    alone = function_check(affine_parameter_count, lambda seed: [Case("3, 5", (3, 5))], ("count",), meta=False)
    learner = _affine_learner(built, ", bias=False")
    _fails(alone, learner["affine_parameter_count"], "not right", namespace=learner)


# --- Train mode with a recorded sublayer: the caller's masks do not depend on what the callee drops --------------


class Residual(nn.Module):
    """x + dropout(mlp(x)): a layer with a graded sublayer (Mlp, its callee) and its own dropout of x's shape."""

    def __init__(self, d, hidden, dropout=0.0):
        super().__init__()
        self.mlp, self.dropout = Mlp(d, hidden, dropout), nn.Dropout(dropout)

    def forward(self, x):
        return x + self.dropout(self.mlp(x))  # (B, T, d)


RESIDUAL = module_check(Residual, lambda seed: [ModuleCase("train(), dropout = 0.5, x (2, 4, 6)", {"d": 6, "hidden": 10, "dropout": 0.5},
                                                           (torch.randn(2, 4, 6, generator=checks.generator(seed, 4)),), train=True)],
                        ("y",), callees=("Mlp.forward",), salt=8)

LEARNER_RESIDUAL = '''
import torch
from torch import nn

class Mlp(nn.Module):
    def __init__(self, d, hidden, dropout=0.0):
        super().__init__()
        self.linear1, self.linear2, self.dropout = nn.Linear(d, hidden), nn.Linear(hidden, d), nn.Dropout(dropout)

    def forward(self, x):
        return {mlp_body}

class Residual(nn.Module):
    def __init__(self, d, hidden, dropout=0.0):
        super().__init__()
        self.mlp, self.dropout = Mlp(d, hidden, dropout), nn.Dropout(dropout)

    def forward(self, x):
        return {residual_body}
'''


def test_a_sublayer_that_drops_the_wrong_tensor_costs_its_caller_nothing_in_train_mode():
    """The learner's Mlp drops its output (a tensor of x's shape) instead of its hidden layer: a draw of x's shape
    more, before the layer's own dropout. Counted apart (the callee's draws have their own keys), the layer's own
    mask is the reference's and the layer keeps its points; a layer that drops the wrong tensor itself still fails."""
    right_mlp, wrong_mlp = "self.linear2(self.dropout(torch.relu(self.linear1(x))))", "self.dropout(self.linear2(torch.relu(self.linear1(x))))"
    for mlp_body in (right_mlp, wrong_mlp):
        learner = {}
        exec(LEARNER_RESIDUAL.format(mlp_body=mlp_body, residual_body="x + self.dropout(self.mlp(x))"), learner)
        run_local(RESIDUAL, learner["Residual"], seed=SEED, device="cpu", namespace=learner)
    for mlp_body in (right_mlp, wrong_mlp):  # the layer's own mistake: dropout on the sum, not on the branch
        learner = {}
        exec(LEARNER_RESIDUAL.format(mlp_body=mlp_body, residual_body="self.dropout(x + self.mlp(x))"), learner)
        _fails(RESIDUAL, learner["Residual"], "wrong values", namespace=learner)


class ResidualDropsTheSum(Residual):
    def forward(self, x):
        return self.dropout(x + self.mlp(x))


def test_a_callers_own_train_mode_mistake_is_named_with_its_recorded_sublayer():
    """The caller's mistake (dropout on the residual sum) is run composed with the learner's recorded sublayer
    results, as the reference is: run plainly, the sublayer's own dropout draws would not be the learner's (a
    callee's draws are keyed apart), the catalogued mistake's output would differ, and nothing would be named."""
    named = module_check(Residual, (lambda seed: [ModuleCase(
        "train(), dropout = 0.5, x (2, 4, 6)", {"d": 6, "hidden": 10, "dropout": 0.5},
        (torch.randn(2, 4, 6, generator=checks.generator(seed, 4)),), train=True)]), ("y",),
        mistakes={"the dropout is applied to the residual sum": ResidualDropsTheSum}, callees=("Mlp.forward",), salt=8)
    learner = {}
    exec(LEARNER_RESIDUAL.format(mlp_body="self.linear2(self.dropout(torch.relu(self.linear1(x))))",
                                 residual_body="self.dropout(x + self.mlp(x))"), learner)
    _fails(named, learner["Residual"], "Likely mistake: the dropout is applied to the residual sum", namespace=learner)
    learner = {}
    exec(LEARNER_RESIDUAL.format(mlp_body="self.linear2(self.dropout(torch.relu(self.linear1(x))))",
                                 residual_body="x + self.dropout(self.mlp(x))"), learner)
    run_local(named, learner["Residual"], seed=SEED, device="cpu", namespace=learner)


COURSE_MODEL_CELL = '''
import torch
from torch import nn

class Affine(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        self.proj = nn.Linear(d_in, d_out)
        self.gain = nn.Parameter(torch.ones(d_out))

    def forward(self, x):
        if x.size(-1) != self.proj.in_features:
            raise ValueError(f"expected {self.proj.in_features} features, got {x.size(-1)}")
        return self.proj(x) * self.gain
'''


def test_an_error_raised_inside_the_course_model_a_call_passes_is_not_blamed_on_that_model():
    """The model a check passes (a Model argument, the course's class) raised because of what the learner's function
    gave it: the message says to look at what the function passes, never "fix that one first"; an error raised in a
    learner's own helper still names the helper to fix."""
    namespace = {}
    exec(compile(COURSE_MODEL_CELL, "<cell-1>", "exec"), namespace)
    exec(compile("def run_model_twice(model, x):\n    return model(model(x)[..., :2])\n", "<cell-2>", "exec"), namespace)
    with pytest.raises(AssertionError) as failure:
        run_local(TWICE_MODEL, namespace["run_model_twice"], seed=SEED, device="cpu", namespace=namespace)
    assert "the course's model that run_model_twice is given" in str(failure.value) and "fix that one first" not in str(failure.value)
    exec(compile("def helper(y):\n    raise ValueError('a helper of its own')\n\ndef run_model_twice(model, x):\n    return helper(model(x))\n",
                 "<cell-3>", "exec"), namespace)
    _fails(TWICE_MODEL, namespace["run_model_twice"], "comes from `helper`.*fix that one first", namespace=namespace)


def test_the_visible_exact_comparison_refuses_a_float_or_a_tensor_where_an_int_is_expected():
    """One rule for every integer answer, in the visible checks as in the hidden ones: 12.0 and tensor(12) are not 12."""
    expect_equal, CheckFailed = checks.visible.expect_equal, checks.visible.CheckFailed
    expect_equal(12, 12, "a count")
    for wrong in (12.0, torch.tensor(12), 13):
        with pytest.raises(CheckFailed, match="a count is"):
            expect_equal(wrong, 12, "a count")
    with pytest.raises(CheckFailed):
        expect_equal(1, True, "a flag")  # a bool is expected: an int is not one

def test_a_call_can_run_without_the_observers_of_forbidden_built_ins():
    """Call.observe=False (a call that trains a model: chapter 10's learning check) installs no observer, so no use is
    recorded; by default both observers record the use."""
    def uses_softmax(x):
        return torch.softmax(x, dim=-1)

    x = torch.zeros(2, 3)
    specs, arrays = checks.encode_calls([checks.Call("observed", (x,), {}, "cpu", None),
                                         checks.Call("not observed", (x,), {}, "cpu", None, observe=False)])
    observed = checks.runner.run_call(uses_softmax, specs[0], arrays, ("softmax",), namespace={})
    unobserved = checks.runner.run_call(uses_softmax, specs[1], arrays, ("softmax",), namespace={})
    assert observed["ok"] and observed["forbidden"] == ["softmax"], observed
    assert unobserved["ok"] and unobserved["forbidden"] == [], unobserved
    assert "observe" not in specs[0] and specs[1]["observe"] is False  # what goes to the sandbox


def test_a_judges_partial_credit_becomes_part_of_the_cells_points():
    """The grading path (notebook.judge, shared by `grade` and `check`) turns a judge's PartialCredit into that
    fraction of the cell's points, with its message; a plain AssertionError still scores 0 and a pass all."""
    import types

    from autograder.checks import Check, PartialCredit
    from autograder.grading import notebook

    def verdict(outcome):
        def judge(calls, records, function=None):
            if outcome is not None:
                raise outcome
        return judge

    cells = [{"index": 0, "kind": "probe", "probe": "learn", "source": "", "origin": "the graded check 'learn'", "learner": False}]
    by_cell = {0: {"probe": {"calls": [{"ok": True}]}, "done": {"ok": True}}}
    scores = {}
    for name, outcome in (("part", PartialCredit(1 / 3, "below the pass mark")), ("fail", AssertionError("wrong")), ("pass", None)):
        module = types.SimpleNamespace(CHECKS={"learn": Check(None, lambda seed, device: [], verdict(outcome))}, SHORTCUT_NAMES={})
        [score] = notebook.judge(cells, by_cell, {}, {0: [types.SimpleNamespace(variable=None)]}, {}, module, {"learn": 6}, None)
        scores[name] = (score.score, score.max_score, score.message)
    assert scores["part"] == (2.0, 6, "below the pass mark"), scores
    assert scores["fail"][:2] == (0.0, 6) and "wrong" in scores["fail"][2], scores
    assert scores["pass"] == (6, 6, ""), scores
    # A cell graded after a partly credited one is judged as usual (its points are read after the partial credit).
    both = [cells[0], {**cells[0], "index": 1, "probe": "after", "origin": "the graded check 'after'"}]
    module = types.SimpleNamespace(CHECKS={"learn": Check(None, lambda seed, device: [], verdict(PartialCredit(0.5, "half"))),
                                           "after": Check(None, lambda seed, device: [], verdict(None))}, SHORTCUT_NAMES={})
    calls = {i: [types.SimpleNamespace(variable=None)] for i in (0, 1)}
    graded = notebook.judge(both, {**by_cell, 1: by_cell[0]}, {}, calls, {}, module, {"learn": 6, "after": 4}, None)
    assert [(s.grade_id, s.score, s.max_score) for s in graded] == [("learn", 3.0, 6), ("after", 4, 4)], graded
