"""Checks for chapter 01-rnn-limits.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake. The builder evaluates
  them on the visible-check inputs (so a notebook can say "this is what a missing tanh gives"), and the
  hidden checks evaluate them on grading-time inputs.
- FORBIDDEN: the built-ins these exercises ask the learner to write instead of calling (nn.RNN, nn.LSTMCell,
  ...), as the torch function mode sees them (their `_VF` names).
- CHECKS: the hidden check of each graded cell, by grade id; check_*: the same, run in this process.
- WRONG_ANSWERS: typical mistakes as edits of the reference source (end-to-end and learner-trial tests).
"""

import math

import torch

from autograder.checks import Call, Case, Check, WrongAnswer, function_check, generator, outcome, run_local
from solutions import ch01_rnn_limits as ref

# --- Known mistakes: rnn_forward --------------------------------------------------------------------


def _rnn_variant(x, h0, W_xh, W_hh, b, *, act=torch.tanh, shift=False, use_h0=True, carry=True,
                 transpose_hh=False, detach=False):
    """The reference loop with one thing changed (each keyword is one typical mistake)."""
    batch, T, _ = x.shape
    start = x.new_zeros(batch, W_hh.shape[0]) if (h0 is None or not use_h0) else h0
    h = start
    W = W_hh.T if transpose_hh else W_hh
    outputs = []
    for t in range(T):
        if shift:
            outputs.append(h)  # stored before the update: [h_0, ..., h_{T-1}]
        prev = h if carry else start
        h = act(x[:, t] @ W_xh + (prev.detach() if detach else prev) @ W + b)
        if not shift:
            outputs.append(h)
    return torch.stack(outputs, dim=1), h


def _naive_tanh(a):
    return (torch.exp(a) - torch.exp(-a)) / (torch.exp(a) + torch.exp(-a))


RNN_MISTAKES = {
    "outputs are [h_0, ..., h_{T-1}]: each hidden state is stored before it is updated (store h_t after computing it)":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, shift=True),
    "no tanh: h_t = x_t W_xh + h_{t-1} W_hh + b without the nonlinearity":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, act=lambda a: a),
    "W_hh used transposed (h @ W_hh.T): in this course weights act on row vectors, h_{t-1} @ W_hh (nn.RNN stores the transpose)":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, transpose_hh=True),
    "h0 is ignored: the loop starts from zeros even when h0 is given":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, use_h0=False),
    "the hidden state is not carried over: every step uses h0 instead of the previous step's h":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, carry=False),
    "ReLU instead of tanh: this is the tanh RNN (nn.RNN's default nonlinearity)":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, act=torch.relu),
}
RNN_SHAPE_MISTAKES = {
    "h_T returned with nn.RNN's layer dimension, (1, batch, d_h): return h_T of shape (batch, d_h)":
        lambda x, h0, W_xh, W_hh, b: (lambda o, h: (o, h.unsqueeze(0)))(*ref.rnn_forward(x, h0, W_xh, W_hh, b)),
    "outputs stacked along dim 0, (T, batch, d_h): this course is batch-first, stack along dim=1 for (batch, T, d_h)":
        lambda x, h0, W_xh, W_hh, b: (lambda o, h: (o.transpose(0, 1), h))(*ref.rnn_forward(x, h0, W_xh, W_hh, b)),
}
RNN_LARGE_MISTAKES = {
    "tanh written out as (e^a - e^-a) / (e^a + e^-a): it overflows to nan for large pre-activations; use torch.tanh":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, act=_naive_tanh),
}
RNN_GRADIENT_MISTAKES = {
    "the hidden state is detached at every step (h.detach()): the values are right, but no gradient flows back "
    "through time (that is truncated backpropagation; exercise 2 needs the full gradient)":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, b, detach=True),
}

RNN_ERROR_HINTS = {
    "cannot be multiplied": "a weight used the wrong way round. In this course weights act on row vectors: x_t @ W_xh with "
                            "W_xh of shape (d_in, d_h), and h @ W_hh with W_hh of shape (d_h, d_h) (nn.RNN stores their transposes).",
    "to have the same dtype": "a tensor created in the default dtype (float32) next to float64 inputs: create the zero state "
                              "with x.new_zeros(batch, d_h) or torch.zeros(..., dtype=x.dtype, device=x.device).",
    "'NoneType'": "h0 may be None, which means a zero initial state of shape (batch, d_h): start from zeros then.",
    "not on the expected device": "a tensor created on the CPU next to inputs on another device: create the zero state with "
                                  "x.new_zeros(batch, d_h) or device=x.device.",
    "Cannot copy out of meta": "a tensor created on the CPU (torch.zeros(...) without device=) was filled with results on "
                               "another device: build outputs with torch.stack, or create them with device=x.device.",
    "does not require grad": "the result is cut off from autograd (.detach(), torch.no_grad(), .item() or torch.tensor(...) "
                             "on intermediate results).",
    "modified by an inplace operation": "a tensor that autograd still needs is changed in place (h.copy_(...), h += ..., "
                                        "h[...] = ...): compute a new hidden state at each step, h = torch.tanh(...).",
}

# --- Known mistakes: grad_norms_wrt_inputs ----------------------------------------------------------


def _grad_norms_variant(x, h0, W_xh, W_hh, b, *, tanh_grad=True, input_factor=True, local=False, shift_deriv=False,
                        squared=False, reverse=False, rows_summed=False):
    """The chain-rule reference with one thing changed (each keyword is one typical mistake)."""
    outputs, _ = ref.rnn_forward(x, h0, W_xh, W_hh, b)  # (batch, T, d_h)
    batch, T, d_h = outputs.shape
    eye = torch.eye(d_h, dtype=x.dtype, device=x.device).expand(batch, d_h, d_h)
    G = eye
    norms = x.new_zeros(batch, T)
    for t in range(T - 1, -1, -1):
        s = t - 1 if shift_deriv else t
        deriv = (1 - outputs[:, s] ** 2) if (tanh_grad and s >= 0) else torch.ones_like(outputs[:, t])
        G_a = G * deriv.unsqueeze(1)
        J = G_a @ W_xh.T if input_factor else G_a
        if rows_summed:
            value = J.sum(dim=1).norm(dim=-1)  # the gradient of h_T.sum(): the sum of the Jacobian's rows
        else:
            value = torch.linalg.matrix_norm(J)
        norms[:, t] = value**2 if squared else value
        G = eye if local else G_a @ W_hh.T
    return norms.flip(-1) if reverse else norms


GRAD_MISTAKES = {
    "the norm of the gradient of h_T.sum() (that is the sum of the Jacobian's rows), not the Frobenius norm of the "
    "Jacobian dh_T/dx_t: take one gradient per hidden unit of h_T (or use the chain rule) and sum the squares":
        lambda *a: _grad_norms_variant(*a, rows_summed=True),
    "the tanh derivative diag(1 - h_s^2) is missing: the RNN is treated as if it were linear":
        lambda *a: _grad_norms_variant(*a, tanh_grad=False),
    "the factor W_xh^T of the last step is missing: these are the norms of dh_T/da_t, not dh_T/dx_t":
        lambda *a: _grad_norms_variant(*a, input_factor=False),
    "the local Jacobian dh_t/dx_t instead of dh_T/dx_t (the gradient of the LAST hidden state with respect to each input)":
        lambda *a: _grad_norms_variant(*a, local=True),
    "the tanh derivative is taken one step early, diag(1 - h_{t-1}^2) instead of diag(1 - h_t^2) for step t":
        lambda *a: _grad_norms_variant(*a, shift_deriv=True),
    "squared norms: the Frobenius norm is the square root of the sum of squares":
        lambda *a: _grad_norms_variant(*a, squared=True),
    "time reversed: entry [i, t] must belong to input x_t (the last entry is the nearest input, x_T)":
        lambda *a: _grad_norms_variant(*a, reverse=True),
}
GRAD_SHAPE_MISTAKES = {
    "(T, batch) instead of (batch, T): one row per sequence":
        lambda *a: ref.grad_norms_wrt_inputs(*a).T,
    "one norm per time step for the whole batch: sequences in a batch do not interact, so each has its own Jacobian; return (batch, T)":
        lambda *a: ref.grad_norms_wrt_inputs(*a).norm(dim=0),
}
GRAD_ERROR_HINTS = {
    "not enough values to unpack (expected 3": "the hidden states do not have the shape (batch, T, d_h): if they come from "
                                               "your rnn_forward, check exercise 1 first (it must return (outputs, h_T), "
                                               "outputs of shape (batch, T, d_h)).",
    "cannot be multiplied": "a matrix product the wrong way round: the step Jacobian dh_s/dh_{s-1} is diag(1 - h_s^2) W_hh^T "
                            "and dh_t/dx_t is diag(1 - h_t^2) W_xh^T (W_xh is (d_in, d_h)).",
    "to have the same dtype": "a tensor created in the default dtype (float32) next to float64 inputs: use "
                              "x.new_zeros(...) or dtype=x.dtype, device=x.device.",
    "not on the expected device": "a tensor created on the CPU next to inputs on another device: use x.new_zeros(...) or device=x.device.",
    "Cannot copy out of meta": "a result tensor created on the CPU (torch.zeros(batch, T) without device=) was filled with "
                               "values on another device: create it with x.new_zeros(batch, T).",
    "does not require grad": "autograd found no graph: call x = x.detach().clone().requires_grad_(True) (or "
                             "torch.autograd.functional.jacobian) before running the RNN on x, and do not detach inside rnn_forward.",
    "backward through the graph a second time": "several gradients of the same h_T need the graph more than once: pass "
                             "retain_graph=True to torch.autograd.grad (or use torch.autograd.functional.jacobian).",
    "One of the differentiated Tensors appears to not have been used": "the gradient is taken with respect to a tensor "
                             "that the RNN did not use: run rnn_forward on the very tensor you marked requires_grad.",
}

# --- Known mistakes: path_length --------------------------------------------------------------------


def _path_variant(**overrides):
    """path_length with the rule of some kinds replaced: overrides[kind](n, k) -> int."""

    def wrong(n, kind, kernel_size=3):
        if kind in overrides:
            return overrides[kind](n, kernel_size)
        return ref.path_length(n, kind, kernel_size)

    return wrong


PATH_MISTAKES = {
    "a single position (n = 1) needs 0 hops, also for attention":
        _path_variant(attention=lambda n, k: 1),
    "n hops for the RNN: from the first to the last of n positions there are n - 1 recurrent steps":
        _path_variant(rnn=lambda n, k: n if n > 1 else 0),
    "math.ceil(math.log(n, k)) is off at exact powers of k because of rounding (math.log(125, 5) = 3.0000000000000004): "
    "count the layers with integers (multiply a receptive field by k until it reaches n)":
        _path_variant(dilated_cnn=lambda n, k: math.ceil(math.log(n, k)) if n > 1 else 0),
    "floor instead of ceiling for the dilated stack: L layers must see k^L >= n positions":
        _path_variant(dilated_cnn=lambda n, k: int(math.floor(math.log(n, k) + 1e-9)) if n > 1 else 0),
    "log base 2 for the dilated stack: with dilations 1, k, k^2, ... the receptive field multiplies by k per layer":
        _path_variant(dilated_cnn=lambda n, k: math.ceil(math.log2(n) - 1e-9) if n > 1 else 0),
    "floor instead of ceiling for contiguous convolutions: L layers see 1 + L(k - 1) positions, so L = ceil((n - 1) / (k - 1))":
        _path_variant(cnn=lambda n, k: (n - 1) // (k - 1)),
    "ceil(n / k) for contiguous convolutions: O(n/k) is the order of growth; each layer adds k - 1 positions, "
    "so L = ceil((n - 1) / (k - 1))":
        _path_variant(cnn=lambda n, k: -(-n // k) if n > 1 else 0),
    "kernel_size is ignored (always 3)":
        lambda n, kind, kernel_size=3: ref.path_length(n, kind, 3),
}

# --- Known mistakes: lstm_cell_step -----------------------------------------------------------------


def _lstm_variant(x, h, c, W_xh, W_hh, b, *, order="ifgo", cand=torch.tanh, out_tanh=True, forget=True, inp=True,
                  old_c=False, swap=False, tanh=torch.tanh):
    gates = dict(zip(order, (x @ W_xh + h @ W_hh + b).chunk(4, dim=-1)))
    i, f, g, o = torch.sigmoid(gates["i"]), torch.sigmoid(gates["f"]), cand(gates["g"]), torch.sigmoid(gates["o"])
    c_new = (f * c if forget else c) + (i * g if inp else g)
    h_new = o * (tanh(c if old_c else c_new) if out_tanh else c_new)
    return (c_new, h_new) if swap else (h_new, c_new)


LSTM_MISTAKES = {
    "gates in the order (i, f, o, g): PyTorch's order is input, forget, cell candidate, output, (i, f, g, o)":
        lambda *a: _lstm_variant(*a, order="ifog"),
    "gates in the order (i, g, f, o): PyTorch's order is input, forget, cell candidate, output, (i, f, g, o)":
        lambda *a: _lstm_variant(*a, order="igfo"),
    "sigmoid on the cell candidate g: the candidate uses tanh, the three gates sigmoid":
        lambda *a: _lstm_variant(*a, cand=torch.sigmoid),
    "h_new = o * c_new: the output is o * tanh(c_new)":
        lambda *a: _lstm_variant(*a, out_tanh=False),
    "the forget gate is not applied: c_new = f * c + i * g":
        lambda *a: _lstm_variant(*a, forget=False),
    "the input gate is not applied: c_new = f * c + i * g":
        lambda *a: _lstm_variant(*a, inp=False),
    "h_new uses the old cell state: h_new = o * tanh(c_new), with the NEW cell state":
        lambda *a: _lstm_variant(*a, old_c=True),
    "returned (c_new, h_new): return (h_new, c_new), like nn.LSTMCell":
        lambda *a: _lstm_variant(*a, swap=True),
}
LSTM_LARGE_MISTAKES = {
    "tanh written out as (e^a - e^-a) / (e^a + e^-a): it overflows to nan for large pre-activations; use torch.tanh":
        lambda *a: _lstm_variant(*a, cand=_naive_tanh, tanh=_naive_tanh),
}
LSTM_ERROR_HINTS = {
    "cannot be multiplied": "a weight used the wrong way round. In this course weights act on row vectors: x @ W_xh with "
                            "W_xh of shape (d_in, 4 d_h), h @ W_hh with W_hh of shape (d_h, 4 d_h) (nn.LSTMCell stores "
                            "weight_ih = W_xh.T).",
    "must match the size": "the gates are split along the wrong dimension: the 4 d_h columns of x @ W_xh + h @ W_hh + b hold "
                           "the four gates, so split along the last one (gates.chunk(4, dim=-1)).",
    "too many values to unpack": "split the gate pre-activations into exactly four blocks along the last dimension: "
                                 "i, f, g, o = gates.chunk(4, dim=-1).",
    "not enough values to unpack": "split the gate pre-activations into exactly four blocks along the last dimension: "
                                   "i, f, g, o = gates.chunk(4, dim=-1).",
}

# --- Hidden checks --------------------------------------------------------------------------------

FORBIDDEN = {
    "rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN", "rnn_tanh_cell": "nn.RNNCell", "rnn_relu_cell": "nn.RNNCell",
    "lstm": "nn.LSTM", "lstm_cell": "nn.LSTMCell", "_thnn_fused_lstm_cell": "nn.LSTMCell",
    "gru": "nn.GRU", "gru_cell": "nn.GRUCell", "_cudnn_rnn": "nn.RNN / nn.LSTM (cuDNN)",
}
# Names whose appearance in a solution cell's code earns no points (read by autograder.shortcuts, never run).
SHORTCUT_NAMES = ("RNN", "RNNCell", "LSTM", "LSTMCell", "GRU", "GRUCell", "rnn_tanh", "rnn_tanh_cell", "lstm_cell")


def random_rnn(g, d_in, d_h, gain=1.0):
    """Weights in the row-vector convention: W_xh (d_in, d_h), W_hh (d_h, d_h) with gain, b (d_h,)."""
    W_xh = torch.randn(d_in, d_h, generator=g) / math.sqrt(d_in)
    W_hh = gain * torch.randn(d_h, d_h, generator=g) / math.sqrt(d_h)
    b = 0.1 * torch.randn(d_h, generator=g)
    return W_xh, W_hh, b


def _rnn_cases(seed):
    g = generator(seed, 11)
    cases = []
    for label, batch, T, d_in, d_h, gain, with_h0, scale in [
        ("batch 2, T = 6, d_in = 3, d_h = 4, h0 given", 2, 6, 3, 4, 1.0, True, 1.0),
        ("batch 3, T = 5, d_in = d_h = 4, h0 = None", 3, 5, 4, 4, 1.0, False, 1.0),
        ("batch 1, T = 1, d_in = 5, d_h = 2, h0 given", 1, 1, 5, 2, 1.0, True, 1.0),
        ("batch 4, T = 12, d_in = 2, d_h = 6, h0 = None, recurrent gain 3", 4, 12, 2, 6, 3.0, False, 1.0),
        ("batch 2, T = 4, d_in = 3, d_h = 5, large inputs (|x| up to 1000, saturated tanh)", 2, 4, 3, 5, 1.0, True, 300.0),
    ]:
        W_xh, W_hh, b = random_rnn(g, d_in, d_h, gain)
        x = scale * torch.randn(batch, T, d_in, generator=g)
        h0 = torch.randn(batch, d_h, generator=g).tanh() if with_h0 else None
        grad_wrt = (0, 3) if scale == 1.0 and T > 1 else ()
        cases.append(Case(label, (x, h0, W_xh, W_hh, b), grad_wrt=grad_wrt))
    return cases


def _grad_norm_cases(seed):
    g = generator(seed, 12)
    cases = []
    for label, batch, T, d_in, d_h, gain, with_h0 in [
        ("batch 2, T = 6, d_in = 3, d_h = 4, h0 given", 2, 6, 3, 4, 1.0, True),
        ("batch 3, T = 10, d_in = d_h = 5, h0 = None, recurrent gain 0.5 (vanishing)", 3, 10, 5, 5, 0.5, False),
        ("batch 1, T = 8, d_in = 2, d_h = 3, h0 = None, recurrent gain 3 (exploding)", 1, 8, 2, 3, 3.0, False),
        ("batch 2, T = 1, d_in = 4, d_h = 3, h0 given", 2, 1, 4, 3, 1.0, True),
    ]:
        W_xh, W_hh, b = random_rnn(g, d_in, d_h, gain)
        x = torch.randn(batch, T, d_in, generator=g)
        h0 = torch.randn(batch, d_h, generator=g).tanh() if with_h0 else None
        cases.append(Case(label, (x, h0, W_xh, W_hh, b)))
    return cases


# Exact powers of k at which math.ceil(math.log(n, k)) rounds up (the visible check uses 125 = 5^3).
LOG_TRAPS = [(216, 6), (15625, 5), (16807, 7), (46656, 6), (2097152, 8)]


def _path_cases(seed):
    g = generator(seed, 13)

    def rand(lo, hi):
        return int(torch.randint(lo, hi + 1, (1,), generator=g))

    cases = [Case(f"n = 1, kind {kind!r}", (1, kind), {"kernel_size": 3}) for kind in ref.PATH_KINDS]
    for kind in ("rnn", "attention"):
        for n in (2, rand(3, 5000)):
            cases.append(Case(f"n = {n}, kind {kind!r}", (n, kind), {"kernel_size": rand(2, 5)}))
    for _ in range(3):
        k = rand(2, 7)
        layers = rand(1, 40)
        n_exact = 1 + layers * (k - 1)  # exactly covered by `layers` layers
        for n in (n_exact, n_exact + 1, rand(2, 3000)):
            cases.append(Case(f"n = {n}, kind 'cnn', kernel_size = {k}", (n, "cnn"), {"kernel_size": k}))
    n_trap, k_trap = LOG_TRAPS[rand(0, len(LOG_TRAPS) - 1)]
    for n, k in [(n_trap, k_trap), (n_trap + 1, k_trap), (k_trap, k_trap)]:
        cases.append(Case(f"n = {n}, kind 'dilated_cnn', kernel_size = {k}", (n, "dilated_cnn"), {"kernel_size": k}))
    for _ in range(3):
        k = rand(2, 6)
        n = rand(2, 100_000)
        cases.append(Case(f"n = {n}, kind 'dilated_cnn', kernel_size = {k}", (n, "dilated_cnn"), {"kernel_size": k}))
    return cases


def _path_plan(seed, device):
    """Plain-value calls: no tensors, no dtypes, no device (each case once)."""
    return [Call(f"path_length({c.args[0]}, {c.args[1]!r}, kernel_size={c.kwargs['kernel_size']})", c.args, c.kwargs, "cpu", None)
            for c in _path_cases(seed)]


def _path_judge(calls, records, function="path_length"):
    """Exact integers; a wrong count is named by the mistake that reproduces it on every call of that kind."""
    wrong = []
    for call, record in zip(calls, records, strict=True):
        (got,) = outcome(record, function, call.label, {}, {})
        if isinstance(got, bool) or not isinstance(got, int):
            kind = "a float" if isinstance(got, float) else f"a {type(got).__name__}" if not isinstance(got, str) else got
            raise AssertionError(f"{call.label} returned {got!r} ({kind}); return a Python int (a number of hops), "
                                 "e.g. with integer arithmetic or int(...).")
        expected = ref.path_length(*call.args, **call.kwargs)
        if got != expected:
            wrong.append((call, got))
    if not wrong:
        return
    call, got = wrong[0]
    kind = call.args[1]
    same_kind = [(c, r) for c, r in zip(calls, records) if c.args[1] == kind]
    answers = {c.label: outcome(r, function, c.label, {}, {})[0] for c, r in same_kind}
    mistake = next((d for d, fn in PATH_MISTAKES.items()
                    if fn(*call.args, **call.kwargs) == got and all(fn(*c.args, **c.kwargs) == answers[c.label] for c, _ in same_kind)), None)
    message = f"{call.label} returned {got}, which is not the number of hops."
    if len(wrong) > 1:
        message += f" ({len(wrong)} of {len(calls)} calls are wrong.)"
    if mistake:
        message += f"\nLikely mistake: {mistake}."
    raise AssertionError(message)


def _lstm_cases(seed):
    g = generator(seed, 14)
    cases = []
    for label, lead, d_in, d_h, scale in [
        ("batch 3, d_in = 5, d_h = 4", (3,), 5, 4, 1.0),
        ("no batch dimension: x (6,), h and c (3,)", (), 6, 3, 1.0),
        ("leading dimensions (2, 3): x (2, 3, 4), d_h = 2", (2, 3), 4, 2, 1.0),
        ("batch 4, d_in = d_h = 4, large inputs (|x| up to several hundred, saturated gates)", (4,), 4, 4, 150.0),
    ]:
        W_xh = torch.randn(d_in, 4 * d_h, generator=g) / math.sqrt(d_in)
        W_hh = torch.randn(d_h, 4 * d_h, generator=g) / math.sqrt(d_h)
        b = 0.5 * torch.randn(4 * d_h, generator=g)
        x = scale * torch.randn(*lead, d_in, generator=g)
        h = torch.randn(*lead, d_h, generator=g).tanh()
        c = torch.randn(*lead, d_h, generator=g)
        cases.append(Case(label, (x, h, c, W_xh, W_hh, b)))
    return cases


CHECKS = {
    "rnn_forward_hidden": function_check(
        ref.rnn_forward, _rnn_cases, ("outputs", "h_T"), {**RNN_MISTAKES, **RNN_LARGE_MISTAKES},
        RNN_ERROR_HINTS, FORBIDDEN, categories=("values", "shape", "dtype", "device", "large", "gradient"),
        shape_mistakes=RNN_SHAPE_MISTAKES, gradient_mistakes=RNN_GRADIENT_MISTAKES,
    ),
    "grad_norms_wrt_inputs_hidden": function_check(
        ref.grad_norms_wrt_inputs, _grad_norm_cases, ("norms",), GRAD_MISTAKES, GRAD_ERROR_HINTS, FORBIDDEN,
        callees=("rnn_forward",), shape_mistakes=GRAD_SHAPE_MISTAKES,
    ),
    "path_length_hidden": Check("path_length", _path_plan, _path_judge, {}, (), ("values",)),
    "lstm_cell_step_hidden": function_check(
        ref.lstm_cell_step, _lstm_cases, ("h_new", "c_new"), {**LSTM_MISTAKES, **LSTM_LARGE_MISTAKES}, LSTM_ERROR_HINTS,
        FORBIDDEN, categories=("values", "shape", "dtype", "device", "large"),
    ),
}


def check_rnn_forward(fn):
    run_local(CHECKS["rnn_forward_hidden"], fn)


def check_grad_norms_wrt_inputs(fn):
    run_local(CHECKS["grad_norms_wrt_inputs_hidden"], fn)


def check_path_length(fn):
    run_local(CHECKS["path_length_hidden"], fn)


def check_lstm_cell_step(fn):
    run_local(CHECKS["lstm_cell_step_hidden"], fn)


# --- Helpers for the visible checks (evaluated when the notebook is built) ---------------------------


def h_T_sum_grad(fn, x, h0, W_xh, W_hh, b):
    """d(h_T.sum())/dx for an rnn_forward-like fn: what the visible gradient check expects (or a mistake gives)."""
    x = x.detach().clone().requires_grad_(True)
    _, h_T = fn(x, h0, W_xh, W_hh, b)
    if not h_T.requires_grad:
        return torch.zeros_like(x)
    (grad,) = torch.autograd.grad(h_T.sum(), x)
    return grad


def path_mistakes(cases):
    """{(n, kind, k): {wrong answer: mistake}} for the visible check's diagnoses (answers equal to the right
    one are left out)."""
    table = {}
    for n, kind, k in cases:
        right = ref.path_length(n, kind, k)
        table[(n, kind, k)] = {}
        for description, fn in PATH_MISTAKES.items():
            wrong = fn(n, kind, k)
            if wrong != right and wrong not in table[(n, kind, k)]:
                table[(n, kind, k)][wrong] = description
    return table


# For the visible gradient check: what d(h_T.sum())/dx is under each gradient mistake (called as
# mistake(rnn_forward, x, h0, W_xh, W_hh, b), like h_T_sum_grad).
RNN_GRADIENT_VISIBLE = {d: (lambda w: lambda fn, *a: h_T_sum_grad(w, *a))(w) for d, w in RNN_GRADIENT_MISTAKES.items()}


def path_table(cases):
    """[(n, kind, k, the reference's answer)] for the visible check."""
    return [(n, kind, k, ref.path_length(n, kind, k)) for n, kind, k in cases]


def visible_inputs(name):
    """Small seeded inputs for a visible check (the notebook shows them as literals; no hidden case uses them)."""
    g = torch.Generator().manual_seed({"rnn": 101, "grad": 102, "lstm": 104}[name])

    def r(*shape, scale=1.0):
        return (scale * torch.randn(*shape, generator=g, dtype=torch.float64)).round(decimals=2)

    if name == "rnn":  # batch 2 sentences of T = 4 words, d_in = 3, d_h = 2
        return dict(x=r(2, 4, 3), h0=r(2, 2, scale=0.5), W_xh=r(3, 2, scale=0.6), W_hh=r(2, 2, scale=0.7), b=r(2, scale=0.1))
    if name == "grad":  # batch 2, T = 5, d_in = 2, d_h = 3
        return dict(x=r(2, 5, 2), h0=r(2, 3, scale=0.5), W_xh=r(2, 3, scale=0.7), W_hh=r(3, 3, scale=0.6), b=r(3, scale=0.1))
    # lstm: batch 2, d_in = 3, d_h = 2
    return dict(x=r(2, 3), h=r(2, 2, scale=0.5), c=r(2, 2), W_xh=r(3, 8, scale=0.6), W_hh=r(2, 8, scale=0.7), b=r(8, scale=0.3))


# --- Typical wrong answers, as edits of the reference source (end-to-end and learner-trial tests) ------

_RNN_LOOP = """    outputs = []
    for t in range(T):  # the recurrence itself cannot be parallelised: h_t needs h_{t-1}
        h = torch.tanh(xw[:, t] + h @ W_hh)  # (batch, d_h)
        outputs.append(h)
    if not outputs:
        return x.new_zeros(batch, 0, W_hh.shape[0]), h
    return torch.stack(outputs, dim=1), h  # (batch, T, d_h), (batch, d_h)"""
_GRAD_BODY = """    outputs, _ = rnn_forward(x, h0, W_xh, W_hh, b)  # (batch, T, d_h)"""
_DILATED = """    layers, field = 0, 1  # dilated: integer loop, no floating-point log
    while field < n:
        field *= kernel_size
        layers += 1
    return layers"""

WRONG_ANSWERS = {
    # rnn_forward
    "rnn_outputs_shifted": WrongAnswer(
        "rnn_forward", "        h = torch.tanh(xw[:, t] + h @ W_hh)  # (batch, d_h)\n        outputs.append(h)",
        "        outputs.append(h)\n        h = torch.tanh(xw[:, t] + h @ W_hh)", "stored before it is updated"),
    "rnn_no_tanh": WrongAnswer("rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = xw[:, t] + h @ W_hh", "no tanh"),
    "rnn_w_hh_transposed": WrongAnswer("rnn_forward", "+ h @ W_hh)", "+ h @ W_hh.T)", "W_hh used transposed"),
    "rnn_layer_dimension": WrongAnswer(
        "rnn_forward", "return torch.stack(outputs, dim=1), h  #", "return torch.stack(outputs, dim=1), h.unsqueeze(0)  #",
        "layer dimension", category="shape"),
    "rnn_time_major": WrongAnswer(
        "rnn_forward", "return torch.stack(outputs, dim=1), h  #", "return torch.stack(outputs, dim=0), h  #",
        "batch-first", category="shape"),
    "rnn_state_on_cpu": WrongAnswer(
        "rnn_forward", "x.new_zeros(batch, W_hh.shape[0])", "torch.zeros(batch, W_hh.shape[0], dtype=x.dtype)",
        "device", category="device"),
    "rnn_float32_outputs": WrongAnswer(
        "rnn_forward", _RNN_LOOP,
        "    outputs = torch.zeros(batch, T, W_hh.shape[0], device=x.device)\n    for t in range(T):\n"
        "        h = torch.tanh(xw[:, t] + h @ W_hh)\n        outputs[:, t] = h\n    return outputs, h",
        "dtype", category="dtype"),
    "rnn_detached_state": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)", "h = torch.tanh(xw[:, t] + h.detach() @ W_hh)",
        "detached at every step", category="gradient"),
    "rnn_handwritten_tanh": WrongAnswer(
        "rnn_forward", "h = torch.tanh(xw[:, t] + h @ W_hh)",
        "a = xw[:, t] + h @ W_hh\n        h = (torch.exp(a) - torch.exp(-a)) / (torch.exp(a) + torch.exp(-a))",
        "overflows", category="large"),
    # grad_norms_wrt_inputs
    "grad_no_tanh_derivative": WrongAnswer(
        "grad_norms_wrt_inputs", "G_a = G * (1 - outputs[:, t] ** 2).unsqueeze(1)", "G_a = G", "tanh derivative"),
    "grad_squared_norm": WrongAnswer(
        "grad_norms_wrt_inputs", "torch.linalg.matrix_norm(G_a @ W_xh.T)", "torch.linalg.matrix_norm(G_a @ W_xh.T) ** 2", "squared"),
    "grad_local_jacobian": WrongAnswer("grad_norms_wrt_inputs", "G = G_a @ W_hh.T", "G = G", "local Jacobian"),
    "grad_of_the_sum": WrongAnswer(
        "grad_norms_wrt_inputs", _GRAD_BODY,
        "    x = x.detach().clone().requires_grad_(True)\n    _, h_T = rnn_forward(x, h0, W_xh, W_hh, b)\n"
        "    (g,) = torch.autograd.grad(h_T.sum(), x)\n    return g.norm(dim=-1)\n" + _GRAD_BODY,
        "sum of the Jacobian's rows"),
    "grad_result_on_cpu": WrongAnswer(
        "grad_norms_wrt_inputs", "norms = x.new_zeros(batch, T)", "norms = torch.zeros(batch, T, dtype=x.dtype)", "device",
        category="device"),
    "grad_float32_result": WrongAnswer(
        "grad_norms_wrt_inputs", "norms = x.new_zeros(batch, T)", "norms = torch.zeros(batch, T, device=x.device)", "dtype",
        category="dtype"),
    "grad_time_major": WrongAnswer("grad_norms_wrt_inputs", "    return norms", "    return norms.T", "(T, batch)", category="shape"),
    # path_length
    "path_float_log": WrongAnswer("path_length", _DILATED, "    return math.ceil(math.log(n, kernel_size))", "exact powers"),
    "path_attention_one_position": WrongAnswer(
        "path_length", '    if n == 1:\n        return 0\n    if kind == "rnn":',
        '    if kind == "attention":\n        return 1\n    if n == 1:\n        return 0\n    if kind == "rnn":', "n = 1"),
    "path_cnn_floor": WrongAnswer(
        "path_length", "return -(-(n - 1) // (kernel_size - 1))", "return (n - 1) // (kernel_size - 1)", "floor instead of ceiling"),
    "path_rnn_positions": WrongAnswer("path_length", "        return n - 1", "        return n", "n hops for the RNN"),
    "path_float_result": WrongAnswer(
        "path_length", "return -(-(n - 1) // (kernel_size - 1))", "return (n - 1) / (kernel_size - 1)", "Python int"),
    # lstm_cell_step
    "lstm_gate_order": WrongAnswer("lstm_cell_step", "i, f, g, o = gates.chunk(4, dim=-1)", "i, f, o, g = gates.chunk(4, dim=-1)",
                                   "gates in the order (i, f, o, g)"),
    "lstm_no_output_tanh": WrongAnswer("lstm_cell_step", "h_new = torch.sigmoid(o) * torch.tanh(c_new)",
                                       "h_new = torch.sigmoid(o) * c_new", "o * c_new"),
    "lstm_sigmoid_candidate": WrongAnswer("lstm_cell_step", "torch.sigmoid(i) * torch.tanh(g)", "torch.sigmoid(i) * torch.sigmoid(g)",
                                          "sigmoid on the cell candidate"),
    "lstm_swapped_outputs": WrongAnswer("lstm_cell_step", "return h_new, c_new", "return c_new, h_new", "returned (c_new, h_new)"),
    "lstm_chunk_first_dim": WrongAnswer("lstm_cell_step", "gates.chunk(4, dim=-1)", "gates.chunk(4, dim=0)", "along the last",
                                        category="shape"),
    "lstm_float32_outputs": WrongAnswer("lstm_cell_step", "return h_new, c_new", "return h_new.float(), c_new.float()",
                                        "dtype", category="dtype"),
    "lstm_ones_on_cpu": WrongAnswer("lstm_cell_step", "torch.sigmoid(f) * c", "(1 / (torch.ones(f.shape) + torch.exp(-f))) * c",
                                    "device", category="device"),
    "lstm_handwritten_tanh": WrongAnswer("lstm_cell_step", "torch.sigmoid(i) * torch.tanh(g)",
                                         "torch.sigmoid(i) * (torch.exp(g) - torch.exp(-g)) / (torch.exp(g) + torch.exp(-g))",
                                         "overflows", category="large"),
}
