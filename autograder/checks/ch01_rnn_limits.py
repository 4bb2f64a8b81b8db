"""Checks for chapter 01-rnn-limits.

- *_MISTAKES: the typical wrong implementations, used to name a learner's mistake. The builder evaluates
  them on the visible-check inputs (so a notebook can say "this is what a missing tanh gives"), and the
  hidden checks evaluate them on grading-time inputs.
- FORBIDDEN: the built-ins these exercises ask the learner to write instead of calling (nn.RNN, nn.LSTMCell,
  ...), as the torch function mode sees them (their `_VF` names).
- CHECKS: the hidden check of each graded cell, by grade id (run in this process by checks.run_check).
- The chapter's test data (WRONG_ANSWERS, VALID_ANSWERS, PENDING_WRONG_ANSWERS) is in
  autograder/source/01-rnn-limits/answers.py.
- grad_norms_reference: the reference of grad_norms_wrt_inputs as the hidden check uses it, which grades a
  chain-rule caller on the states its own rnn_forward returned, whether called per batch, sequence or step.
"""

import math

import torch

from autograder.checks import builtins
from autograder.checks import Call, Case, Check, function_check, generator, outcome
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
    "the bias b is missing: h_t = tanh(x_t W_xh + h_{t-1} W_hh + b), with b added at every step":
        lambda x, h0, W_xh, W_hh, b: _rnn_variant(x, h0, W_xh, W_hh, torch.zeros_like(b)),
    "h_T is not the last hidden state (it is the first, h_1): return h_T = h of the last step, outputs[:, -1]":
        lambda x, h0, W_xh, W_hh, b: (lambda o, h: (o, o[:, 0]))(*_rnn_variant(x, h0, W_xh, W_hh, b)),
}
RNN_SHAPE_MISTAKES = {
    "h_T squeezed: .squeeze() also drops the batch dimension when batch = 1; return h_T of shape (batch, d_h)":
        lambda x, h0, W_xh, W_hh, b: (lambda o, h: (o, h.squeeze()))(*ref.rnn_forward(x, h0, W_xh, W_hh, b)),
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
                        squared=False, reverse=False, rows_summed=False, spectral=False):
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
            value = torch.linalg.matrix_norm(J, ord=2 if spectral else "fro")
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
    "the spectral norm (ord=2, the largest singular value), not the Frobenius norm (the square root of the sum of "
    "squared entries: torch.linalg.matrix_norm's default, ord='fro')":
        lambda *a: _grad_norms_variant(*a, spectral=True),
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

# --- The reference of grad_norms_wrt_inputs, for any call pattern of rnn_forward ------------------------------


def _chain_rule_norms(outputs, x, W_xh, W_hh):
    """The reference's chain rule on given hidden states (batch, T, d_h)."""
    batch, T, d_h = outputs.shape
    G = torch.eye(d_h, dtype=x.dtype, device=x.device).expand(batch, d_h, d_h)
    norms = x.new_zeros(batch, T)
    for t in range(T - 1, -1, -1):
        G_a = G * (1 - outputs[:, t] ** 2).unsqueeze(1)
        norms[:, t] = torch.linalg.matrix_norm(G_a @ W_xh.T)
        G = G_a @ W_hh.T
    return norms


def _states_per_sequence(x, h0, W_xh, W_hh, b):
    """rnn_forward called once per sequence of the batch."""
    return torch.cat([ref.rnn_forward(x[i:i + 1], None if h0 is None else h0[i:i + 1], W_xh, W_hh, b)[0]
                      for i in range(x.shape[0])])


def _states_per_step(x, h0, W_xh, W_hh, b, zeros=False):
    """rnn_forward called once per time step (T = 1 slices), the state it returns passed on as h0; zeros=True:
    a None h0 is given as explicit zeros."""
    h = x.new_zeros(x.shape[0], W_hh.shape[0]) if (h0 is None and zeros) else h0
    states = []
    for t in range(x.shape[1]):
        _, h = ref.rnn_forward(x[:, t:t + 1], h, W_xh, W_hh, b)
        states.append(h)
    return torch.stack(states, dim=1)


def grad_norms_reference(x, h0, W_xh, W_hh, b):
    """The hidden check's reference of grad_norms_wrt_inputs: the reference itself, which calls rnn_forward once
    on the whole batch. When a learner's grad_norms_wrt_inputs is graded on its own (its callee's recorded
    results composed in the reference's place, see autograder.checks.composed), the learner may have called
    rnn_forward in another pattern: once per sequence, or once per time step. The states are then read in the
    pattern whose composed results differ from the plain reference loop (the pattern the learner used), so that
    a correct caller does not pay for its callee's mistake. With a right callee every pattern gives the
    reference's states, and the reference is what is returned."""
    try:
        whole = ref.grad_norms_wrt_inputs(x, h0, W_xh, W_hh, b)
    except Exception:
        whole = None
    if x.device.type == "meta" or not x.is_floating_point():
        if whole is None:
            raise RuntimeError("the reference failed on these inputs")
        return whole
    plain = _rnn_variant(x, h0, W_xh, W_hh, b)[0]  # the reference loop, never composed with a learner's results
    tolerance = dict(atol=1e-10, rtol=1e-8) if x.dtype == torch.float64 else dict(atol=1e-5, rtol=1e-4)

    def same_as_plain(states):
        return (isinstance(states, torch.Tensor) and states.shape == plain.shape
                and torch.allclose(states.to(plain.dtype), plain, **tolerance))

    if whole is not None:
        try:
            if not same_as_plain(ref.rnn_forward(x, h0, W_xh, W_hh, b)[0]):
                return whole  # the learner called rnn_forward on the whole batch: the reference's own pattern
        except Exception:
            return whole
    for pattern in (_states_per_sequence, _states_per_step, lambda *a: _states_per_step(*a, zeros=True)):
        try:
            states = pattern(x, h0, W_xh, W_hh, b)
        except Exception:
            continue
        if isinstance(states, torch.Tensor) and states.shape == plain.shape and not same_as_plain(states):
            return _chain_rule_norms(states, x, W_xh, W_hh)
    if whole is None:
        raise RuntimeError("the reference failed on these inputs")
    return whole


grad_norms_reference.__name__ = "grad_norms_wrt_inputs"
grad_norms_reference.__module__ = ref.__name__  # its callee rnn_forward is looked up (and composed) there

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
    "kind compared with `is` (object identity) instead of ==: two equal strings need not be the same object (a kind "
    "built at run time, or sent by the grader, is not the literal in your code), so `kind is \"rnn\"` can be False "
    "when kind == \"rnn\"; compare strings with ==":
        _path_variant(**{kind: (lambda n, k: ref.path_length(n, "dilated_cnn", k)) for kind in ("rnn", "attention", "cnn")}),
}


def fresh_string(text):
    """An equal string that is a new object (not the interned literal): what a kind read from a file, typed by a
    user or sent to the sandbox is. Code that compares kinds with `is` fails on it, as it would in use."""
    return "".join(list(text)) if len(text) > 1 else text


def other_kind_answers(n, kind, kernel_size):
    """{answer: other kind} for the answers that another kind gives on (n, kernel_size) and this kind does not:
    a wrong answer found there usually means the kind was compared wrongly (e.g. with `is`)."""
    right = ref.path_length(n, kind, kernel_size)
    table = {}
    for other in ref.PATH_KINDS:
        answer = ref.path_length(n, other, kernel_size)
        if other != kind and answer != right:
            table.setdefault(answer, other)
    return table


def other_kind_hint(kind, other):
    return (f"kind {kind!r} is not recognised, so the rule of kind {other!r} answers: compare kind with == (not `is`, "
            "which compares object identity: an equal string built at run time is another object)")

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

FORBIDDEN = builtins.forbidden("recurrent")
# Names whose appearance in a solution cell's code earns no points (read by autograder.grading.shortcuts, never run).
SHORTCUT_NAMES = builtins.shortcut_names("recurrent")


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
    """Plain-value calls: no tensors, no dtypes, no device (each case once). The kind is a string built at run
    time, as it is once sent to the sandbox, so that comparing it with `is` fails here too (in-process grading)."""
    return [Call(f"path_length({c.args[0]}, {c.args[1]!r}, kernel_size={c.kwargs['kernel_size']})",
                 (c.args[0], fresh_string(c.args[1])), c.kwargs, "cpu", None)
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
    other = other_kind_answers(*call.args, **call.kwargs).get(got)
    if mistake:
        message += f"\nLikely mistake: {mistake}."
    elif other:
        message += f"\nLikely mistake: {other_kind_hint(kind, other)}."
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
        grad_norms_reference, _grad_norm_cases, ("norms",), GRAD_MISTAKES, GRAD_ERROR_HINTS, FORBIDDEN,
        callees=("rnn_forward",), shape_mistakes=GRAD_SHAPE_MISTAKES,
    ),
    "path_length_hidden": Check("path_length", _path_plan, _path_judge, {}, (), ("values",)),
    "lstm_cell_step_hidden": function_check(
        ref.lstm_cell_step, _lstm_cases, ("h_new", "c_new"), {**LSTM_MISTAKES, **LSTM_LARGE_MISTAKES}, LSTM_ERROR_HINTS,
        FORBIDDEN, categories=("values", "shape", "dtype", "device", "large"),
    ),
}


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
        for wrong, other in other_kind_answers(n, kind, k).items():
            table[(n, kind, k)].setdefault(wrong, other_kind_hint(kind, other))
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
