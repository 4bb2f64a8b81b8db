"""Chapter 01's own checker tests: valid alternatives written here, path_length's mistakes and kinds, dtype and
device reports, forbidden recurrent built-ins, callers graded apart from their callees.

What every chapter must keep (reference full marks, blank notebook, every catalogued wrong and valid answer,
hidden inputs that change with the seed, the notebooks): tests/chapter_contract.py; each hidden check's
catalogued mistakes named as themselves: tests/test_mistake_catalogues.py."""

import functools
import math
import warnings

import harness
import pytest
import torch

from autograder import registry
from autograder.checks import ch01_rnn_limits as checks
from autograder.checks import run_check
from autograder.checks import run_local
from solutions import ch01_rnn_limits as ref

CHAPTER = "01-rnn-limits"
M = harness.material(CHAPTER)
trials = registry.answers(CHAPTER)  # the chapter's test data: wrong answers, valid alternatives
CHECK_OF = {
    "rnn_forward": functools.partial(run_check, CHAPTER, "rnn_forward_hidden"),
    "grad_norms_wrt_inputs": functools.partial(run_check, CHAPTER, "grad_norms_wrt_inputs_hidden"),
    "path_length": functools.partial(run_check, CHAPTER, "path_length_hidden"),
    "lstm_cell_step": functools.partial(run_check, CHAPTER, "lstm_cell_step_hidden"),
}


def failure_of(check, fn):
    with pytest.raises(AssertionError) as failure:
        check(fn)
    return str(failure.value)


# --- Hidden checks: valid alternatives (written here, in-process) pass on any seed ---------------------------


def rnn_forward_preallocated(x, h0, W_xh, W_hh, b):
    batch, T, _ = x.shape
    h = torch.zeros(batch, W_hh.shape[0], dtype=x.dtype, device=x.device) if h0 is None else h0
    out = torch.zeros(batch, T, W_hh.shape[0], dtype=x.dtype, device=x.device)
    for t in range(T):
        h = torch.tanh(x[:, t] @ W_xh + h @ W_hh + b)
        out[:, t] = h
    return out, h


def rnn_forward_tanh_from_sigmoid(x, h0, W_xh, W_hh, b):
    # tanh(a) = 2 sigmoid(2a) - 1: stable for large |a|, and its gradient too (no difference of numbers near 1)
    outputs = []
    h = x.new_zeros(x.shape[0], W_hh.shape[0]) if h0 is None else h0
    for t in range(x.shape[1]):
        h = 2 * torch.sigmoid(2 * (x[:, t] @ W_xh + h @ W_hh + b)) - 1
        outputs.append(h)
    return torch.stack(outputs, dim=1), h


def grad_norms_by_backward(x, h0, W_xh, W_hh, b):
    """Autograd, one backward pass per hidden unit of h_T (through the reference loop)."""
    x = x.detach().clone().requires_grad_(True)
    _, h_T = ref.rnn_forward(x, h0, W_xh, W_hh, b)
    squares = x.new_zeros(x.shape[:2])
    for j in range(h_T.shape[-1]):
        (g,) = torch.autograd.grad(h_T[:, j].sum(), x, retain_graph=True)
        squares = squares + (g**2).sum(-1)
    return squares.sqrt()


def grad_norms_by_jacobian(x, h0, W_xh, W_hh, b):
    J = torch.autograd.functional.jacobian(lambda xi: ref.rnn_forward(xi, h0, W_xh, W_hh, b)[1], x)  # (B, d_h, B, T, d_in)
    i = torch.arange(x.shape[0], device=x.device)
    return J[i, :, i].pow(2).sum(dim=(1, 3)).sqrt()


def path_length_closed_form(n, kind, kernel_size=3):
    if n == 1:
        return 0
    if kind == "rnn":
        return n - 1
    if kind == "attention":
        return 1
    if kind == "cnn":
        return math.ceil((n - 1) / (kernel_size - 1))
    layers = 0
    while kernel_size**layers < n:
        layers += 1
    return layers


def lstm_by_slices(x, h, c, W_xh, W_hh, b):
    d_h = h.shape[-1]
    z = x @ W_xh + h @ W_hh + b
    i, f = torch.sigmoid(z[..., :d_h]), torch.sigmoid(z[..., d_h:2 * d_h])
    g, o = torch.tanh(z[..., 2 * d_h:3 * d_h]), torch.sigmoid(z[..., 3 * d_h:])
    c_new = f * c + i * g
    return o * torch.tanh(c_new), c_new


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("name,alternative", [
    ("rnn_forward", rnn_forward_preallocated),
    ("rnn_forward", rnn_forward_tanh_from_sigmoid),
    ("grad_norms_wrt_inputs", grad_norms_by_backward),
    ("grad_norms_wrt_inputs", grad_norms_by_jacobian),
    ("path_length", path_length_closed_form),
    ("lstm_cell_step", lstm_by_slices),
])
@pytest.mark.parametrize("seed", [0, 1, 2, 5, 7, 11, 13, 21])
def test_hidden_checks_accept_valid_alternatives(monkeypatch, name, alternative, seed):
    # Grading seeds are random: a valid alternative must pass on any of them, not only on the default one.
    monkeypatch.setenv("COURSE_GRADING_SEED", str(seed))
    CHECK_OF[name](alternative)


# --- Hidden checks: path_length's catalogue (a Check of its own, not in test_mistake_catalogues) -----------------


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("description", list(checks.PATH_MISTAKES))
def test_hidden_path_length_check_names_each_mistake(description):
    assert f"Likely mistake: {description}." in failure_of(CHECK_OF["path_length"], checks.PATH_MISTAKES[description])


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("name", ["rnn_forward", "grad_norms_wrt_inputs", "lstm_cell_step"])
def test_dtype_and_device_mistakes_are_reported(name):
    reference = getattr(ref, name)

    def in_float32(*args):
        out = reference(*args)
        return tuple(o.float() for o in out) if isinstance(out, tuple) else out.float()

    def on_the_cpu(*args):
        # A tensor created without device= next to the inputs: a device mistake the meta pass can prove (moving a
        # meta result to the CPU is not one: code that reads values may do that, and a GPU run grades it).
        out = reference(*args)
        add = lambda o: o + torch.zeros(o.shape, dtype=o.dtype)  # noqa: E731
        return tuple(add(o) for o in out) if isinstance(out, tuple) else add(out)

    assert "dtype float32, expected torch.float64" in failure_of(CHECK_OF[name], in_float32)
    message = failure_of(CHECK_OF[name], on_the_cpu)
    assert "meta" in message and "without device=" in message


@pytest.mark.usefixtures("grading_env")
def test_path_length_must_return_a_python_int():
    assert "return a Python int" in failure_of(functools.partial(run_check, CHAPTER, "path_length_hidden"), lambda n, kind, kernel_size=3: float(ref.path_length(n, kind, kernel_size)))
    assert "return a Python int" in failure_of(functools.partial(run_check, CHAPTER, "path_length_hidden"), lambda n, kind, kernel_size=3: torch.tensor(ref.path_length(n, kind, kernel_size)))
    assert "return a Python int" in failure_of(functools.partial(run_check, CHAPTER, "path_length_hidden"), lambda n, kind, kernel_size=3: bool(ref.path_length(n, kind, kernel_size)))


@pytest.mark.parametrize("seed", range(6))
def test_every_seed_grades_an_exact_power_where_a_float_log_rounds_up(seed):
    traps = [c for c in checks._path_cases(seed) if c.args[1] == "dilated_cnn"
             and math.ceil(math.log(c.args[0], c.kwargs["kernel_size"])) != ref.path_length(c.args[0], "dilated_cnn", c.kwargs["kernel_size"])]
    assert traps, "the hidden path_length check must include an exact power at which math.log rounds up"


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("name,call", [
    ("rnn_forward", lambda x, h0, W_xh, W_hh, b: (lambda rnn: (rnn(x, None if h0 is None else h0.unsqueeze(0))[0], rnn(x)[1][0]))(
        torch_rnn(W_xh, W_hh, b))),
    ("lstm_cell_step", lambda x, h, c, W_xh, W_hh, b: torch.lstm_cell(x, (h, c), W_xh.T, W_hh.T, b, torch.zeros_like(b))),
    ("grad_norms_wrt_inputs", lambda x, *a: grad_norms_by_backward_with(torch_rnn_forward, x, *a)),
])
def test_recurrent_built_ins_earn_nothing_even_when_right(name, call):
    assert "the built-in this exercise asks you to write yourself" in failure_of(CHECK_OF[name], call)


def torch_rnn(W_xh, W_hh, b):
    rnn = torch.nn.RNN(W_xh.shape[0], W_xh.shape[1], batch_first=True).to(W_xh.dtype).to(W_xh.device)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(W_xh.T), rnn.weight_hh_l0.copy_(W_hh.T), rnn.bias_ih_l0.copy_(b), rnn.bias_hh_l0.zero_()
    return rnn


def torch_rnn_forward(x, h0, W_xh, W_hh, b):
    out, h = torch_rnn(W_xh, W_hh, b)(x, None if h0 is None else h0.unsqueeze(0))
    return out, h[0]


def grad_norms_by_backward_with(forward, x, h0, W_xh, W_hh, b):
    x = x.detach().clone().requires_grad_(True)
    _, h_T = forward(x, h0, W_xh, W_hh, b)
    squares = x.new_zeros(x.shape[:2])
    for j in range(h_T.shape[-1]):
        (g,) = torch.autograd.grad(h_T[:, j].sum(), x, retain_graph=True)
        squares = squares + (g**2).sum(-1)
    return squares.sqrt()


# --- Callers are graded apart from their callees ----------------------------------------------------------


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("mistake", ["rnn_no_tanh", "rnn_w_hh_transposed", "rnn_float32_outputs", "rnn_state_on_cpu", "rnn_time_major",
                                     "rnn_layer_dimension", "rnn_detached_state"])
def test_chain_rule_grad_norms_does_not_lose_points_for_a_wrong_rnn_forward(mistake):
    namespace = harness.namespace_of(M, [mistake])
    with pytest.raises(AssertionError):
        run_local(checks.CHECKS["rnn_forward_hidden"], namespace["rnn_forward"], namespace=namespace)
    run_local(checks.CHECKS["grad_norms_wrt_inputs_hidden"], namespace["grad_norms_wrt_inputs"], namespace=namespace)


@pytest.mark.usefixtures("grading_env")
def test_autograd_grad_norms_through_a_wrong_rnn_forward_names_the_callee():
    namespace = harness.namespace_of(M, ["rnn_no_tanh"])
    exec(
        "def grad_norms_wrt_inputs(x, h0, W_xh, W_hh, b):\n"
        "    x = x.detach().clone().requires_grad_(True)\n"
        "    _, h_T = rnn_forward(x, h0, W_xh, W_hh, b)\n"
        "    sq = x.new_zeros(x.shape[:2])\n"
        "    for j in range(h_T.shape[-1]):\n"
        "        (g,) = torch.autograd.grad(h_T[:, j].sum(), x, retain_graph=True)\n"
        "        sq = sq + (g ** 2).sum(-1)\n"
        "    return sq.sqrt()\n",
        namespace,
    )
    with pytest.raises(AssertionError) as failure:
        run_local(checks.CHECKS["grad_norms_wrt_inputs_hidden"], namespace["grad_norms_wrt_inputs"], namespace=namespace)
    assert "`rnn_forward` returns wrong results" in str(failure.value)


# --- Issue 15: a learner's trials ----------------------------------------------------------------------------

PATH_WITH_IS = '''
def path_length(n, kind, kernel_size=3):
    if n == 1:
        return 0
    if kind is "rnn":
        return n - 1
    if kind is "attention":
        return 1
    if kind is "cnn":
        return -(-(n - 1) // (kernel_size - 1))
    layers, field = 0, 1
    while field < n:
        field *= kernel_size
        layers += 1
    return layers
'''

PATH_DILATED_IS = '''
def path_length(n, kind, kernel_size=3):
    if n == 1:
        return 0
    if kind is "dilated_cnn":
        layers, field = 0, 1
        while field < n:
            field *= kernel_size
            layers += 1
        return layers
    if kind == "rnn":
        return n - 1
    if kind == "attention":
        return 1
    return -(-(n - 1) // (kernel_size - 1))
'''


def defined(source, name, namespace=None):
    """A function defined from source, as a notebook cell defines it (string literals interned as usual)."""
    namespace = {"__name__": "__main__", "math": math, "torch": torch} if namespace is None else namespace
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # `is` with a literal: Python warns, the learner may not read it
        exec(compile(source, "<cell>", "exec"), namespace)
    return namespace[name]


def test_a_kind_compared_with_is_passes_on_literals_only():
    # Why the checks pass kinds built at run time: on the interned literals, `is` gives the right answers.
    wrong = defined(PATH_WITH_IS, "path_length")
    assert all(wrong(9, kind) == ref.path_length(9, kind) for kind in ref.PATH_KINDS)
    assert wrong(9, checks.fresh_string("rnn")) != ref.path_length(9, "rnn")


@pytest.mark.usefixtures("grading_env")
def test_hidden_path_length_check_catches_a_kind_compared_with_is():
    message = failure_of(functools.partial(run_check, CHAPTER, "path_length_hidden"), defined(PATH_WITH_IS, "path_length"))
    assert "Likely mistake: kind compared with `is`" in message
    # The plan's kinds are new string objects, equal to the kinds (in-process as in the sandbox).
    for call in checks.CHECKS["path_length_hidden"].plan(0, "cpu"):
        assert call.args[1] in ref.PATH_KINDS and all(call.args[1] is not kind for kind in ref.PATH_KINDS)


@pytest.mark.usefixtures("grading_env")
def test_a_kind_that_is_not_recognised_is_named_whatever_the_code_structure():
    message = failure_of(functools.partial(run_check, CHAPTER, "path_length_hidden"), defined(PATH_DILATED_IS, "path_length"))
    assert "kind 'dilated_cnn' is not recognised" in message and "compare kind with ==" in message


def visible_path_length_check(path_length):
    """The message of path_length's visible check on this function (None if it passes)."""
    namespace = harness.namespace_of(M)
    namespace["path_length"] = path_length
    return harness.run_cell(M.student, "path_length_visible", namespace)


def test_visible_path_length_check_catches_a_kind_compared_with_is():
    message = visible_path_length_check(defined(PATH_WITH_IS, "path_length"))
    assert message and "kind compared with `is`" in message
    message = visible_path_length_check(defined(PATH_DILATED_IS, "path_length"))
    assert message and "is not recognised" in message
    assert visible_path_length_check(ref.path_length) is None


@pytest.mark.usefixtures("grading_env")
def test_path_length_rejects_a_numpy_float():
    import numpy as np

    def numpy_ceil(n, kind, kernel_size=3):
        return np.float64(ref.path_length(n, kind, kernel_size))  # np.ceil(...) returns this; a float subclass

    assert "return a Python int" in failure_of(functools.partial(run_check, CHAPTER, "path_length_hidden"), numpy_ceil)
    assert "return a Python int" in visible_path_length_check(numpy_ceil)


# A chain-rule grad_norms_wrt_inputs that calls rnn_forward once per time step, right or with the tanh
# derivative left out (a caller's own mistake, which must still cost its points whatever the callee).
GRAD_PER_STEP_NO_DERIVATIVE = trials.GRAD_CHAIN_PER_STEP.replace("G_a = G * (1 - states[t] ** 2)[:, None, :]", "G_a = G")


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("callee_mistake", [None, "rnn_no_tanh", "rnn_h0_ignored", "rnn_w_hh_transposed"])
@pytest.mark.parametrize("pattern", ["GRAD_CHAIN_PER_STEP", "GRAD_CHAIN_PER_SEQUENCE"])
def test_chain_rule_caller_in_another_call_pattern_is_graded_on_its_own(callee_mistake, pattern):
    namespace = harness.namespace_of(M, [callee_mistake] if callee_mistake else [])
    right = defined(getattr(trials, pattern), "grad_norms_wrt_inputs", namespace)
    run_local(checks.CHECKS["grad_norms_wrt_inputs_hidden"], right, namespace=namespace)
    source = getattr(trials, pattern)
    wrong_source = (GRAD_PER_STEP_NO_DERIVATIVE if pattern == "GRAD_CHAIN_PER_STEP"
                    else source.replace("G_a = torch.einsum(\"jk,k->jk\", G, 1 - states[t] ** 2)", "G_a = G"))
    assert wrong_source != source
    wrong = defined(wrong_source, "grad_norms_wrt_inputs", namespace)
    with pytest.raises(AssertionError):
        run_local(checks.CHECKS["grad_norms_wrt_inputs_hidden"], wrong, namespace=namespace)


def test_grad_norms_reference_is_the_reference_when_nothing_is_composed():
    g = torch.Generator().manual_seed(5)
    for h0 in (None, torch.randn(3, 4, generator=g, dtype=torch.float64).tanh()):
        args = (torch.randn(3, 7, 2, generator=g, dtype=torch.float64), h0, *checks.random_rnn(g, 2, 4, 1.5))
        args = tuple(a.double() if isinstance(a, torch.Tensor) else a for a in args)
        assert torch.equal(checks.grad_norms_reference(*args), ref.grad_norms_wrt_inputs(*args))


@pytest.mark.usefixtures("grading_env")
@pytest.mark.parametrize("name", list(trials.PENDING_WRONG_ANSWERS))
@pytest.mark.xfail(strict=True, reason="an autograd caller of a wrong callee cannot be graded with a correct callee: the "
                                       "grader records the callee's values, not its derivatives (library; reported)")
def test_autograd_caller_of_a_wrong_rnn_forward_keeps_its_points(name):
    wrong = trials.PENDING_WRONG_ANSWERS[name]
    namespace = harness.namespace_of(M, edits=[wrong])
    with pytest.raises(AssertionError):
        run_local(checks.CHECKS["rnn_forward_hidden"], namespace["rnn_forward"], namespace=namespace)
    run_local(checks.CHECKS["grad_norms_wrt_inputs_hidden"], namespace["grad_norms_wrt_inputs"], namespace=namespace)
