"""What a hidden check calls: its inputs, its calls, the grading settings and the hidden-input helpers.

A check's plan(seed, device) returns Calls built from Cases (or ModuleCases): CPU tensors and plain values,
with Seeded, Dev and Fn standing for a generator, the call's device and a notebook function, made where the call
runs. The tolerances per dtype, the grader's weights for module exercises, and inputs built for given weights
(large_score_inputs) live here too: the grading host needs them, the authoring kit reuses them.
"""

import contextlib
import hashlib
import math
import os
from dataclasses import dataclass, field
from typing import Callable

import torch


# Tolerances per dtype. Every case runs in float64 and float32. float64 is where mistakes are caught: valid
# orderings of the same arithmetic agree to ~1e-12 there, so its tolerance is tight. float32 checks that the
# dtype is kept and that nothing overflows; a valid reordering of the arithmetic (a per-head loop instead of
# one matmul, einsum, tanh written through sigmoid) moves float32 results by up to about 1e-5 absolute or
# relative on the hidden cases, more where a case amplifies rounding (a recurrence with gain 3), so float32
# allows ten times that. scripts/tolerance_margins.py measures both sides: how far the float32 reference
# lies from the float64 one, and how far each catalogued mistake lies from the reference.
TOLERANCES = {
    torch.float32: dict(atol=1e-4, rtol=1e-3),
    torch.float64: dict(atol=1e-10, rtol=1e-8),
}
DTYPES = (torch.float32, torch.float64)
ALLOWED_DTYPES = {"float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool"}


# --- Grading settings ----------------------------------------------------------------------------------


def grading_seed() -> int:
    """COURSE_GRADING_SEED (default 0): the seed run_local uses when given none (a hidden-tests cell under plain
    nbgrader, the tests). The grading CLI passes its own seed to check.plan and never reads this."""
    return int(os.environ.get("COURSE_GRADING_SEED", "0"))


def grading_device() -> str:
    """COURSE_DEVICE, else cuda when available, else cpu: the device run_local uses when given none."""
    name = os.environ.get("COURSE_DEVICE", "").strip()
    if name:
        return name
    return "cuda" if torch.cuda.is_available() else "cpu"


def generator(seed: int, salt: int | str) -> torch.Generator:
    """A CPU generator seeded from the grading seed; `salt` separates the draws of one notebook's checks.

    A new chapter passes a name as the salt, the grade id of the check (and `case_salt` for the cases of a module
    check): it is hashed with the seed, so there is nothing to pick by hand and two checks never share draws.
    Chapters 01-05 keep the integer salts they were written with (seed * 1000 + salt), so that their hidden inputs
    for a given seed stay what they were: a run resumed with its saved seed grades its remaining notebooks on the
    same inputs as the others, and scripts/grading_corpus.py compares runs of the same seed."""
    if isinstance(salt, str):
        digest = hashlib.sha256(f"{seed}/{salt}".encode("utf-8")).digest()
        return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
    return torch.Generator().manual_seed(seed * 1000 + salt)


def case_salt(salt: int | str, index: int) -> int | str:
    """The salt of case `index` of a check whose salt is `salt` (module checks draw each case's weights apart)."""
    return f"{salt}#{index}" if isinstance(salt, str) else salt + index


# --- Arguments, cases and calls ------------------------------------------------------------------------


@dataclass(frozen=True)
class Seeded:
    """An argument that is a torch.Generator seeded with `seed` (made fresh for each call)."""

    seed: int


@dataclass(frozen=True)
class Dev:
    """An argument that is the call's device (a torch.device): for functions that create tensors, e.g.
    causal_mask(n, device). On the meta pass it is torch.device('meta')."""


@dataclass(frozen=True)
class Fn:
    """An argument that is a function defined in the notebook, found by name where the call runs (the
    learner's own, or one the course gives in a read-only cell); the judge uses the reference's function of
    that name instead (from `reference`'s module, or `Fn(name, reference=fn)`)."""

    name: str
    reference: Callable | None = None


@dataclass
class Model:
    """An argument that is an nn.Module built where the call runs: the notebook's class `name` (a course-given
    class in a read-only cell, or the learner's own), as `cls(**init)`, with the parameters in `state` (CPU float
    tensors; names must match) loaded, cast to the call's dtype, moved to the call's device (meta on the meta
    pass), in train() or eval(). The judge builds `reference` (default: the class of that name in the reference's
    module) the same way, fresh for every call. For functions that take a model: greedy decoding, generation.
    state_after=True: the call's result is compared as (result, *the model's parameters after the call, in
    `state` order), for a function that updates the model (a training step). mode_after=True: then the model's
    train()/eval() mode after the call (model.training, a bool) is compared too, for a function that may switch
    the mode for its own work and must give it back as it found it (greedy decoding)."""

    name: str
    init: dict
    state: dict
    train: bool = False
    reference: Callable | None = None
    state_after: bool = False
    mode_after: bool = False

    def to(self, dtype):
        """A copy with the floating parameters in `dtype`."""
        state = {k: v.to(dtype) if v.is_floating_point() else v.clone() for k, v in self.state.items()}
        return Model(self.name, dict(self.init), state, self.train, self.reference, self.state_after, self.mode_after)

    def build(self, cls, device):
        """cls(**init) with these weights, on `device` (the judge's side; the runner has its own copy)."""
        module = cls(**self.init)
        dtype = next((v.dtype for v in self.state.values() if v.is_floating_point()), torch.float32)
        module.to(dtype)
        module.load_state_dict(dict(self.state), strict=False)
        module.train(self.train)
        return module.to(device)


@dataclass(frozen=True)
class Optim:
    """An argument that is an optimizer, torch.optim.<name>(the parameters of positional argument `model`, a
    Model, **settings), built fresh where the call runs (the judge builds the reference's the same way). A
    stateful one (Adam) makes a function that ignores the optimizer it is given, and makes its own, give other
    parameters after its steps. name: one of runner.OPTIMIZERS."""

    name: str
    settings: dict
    model: int = 0

    def __hash__(self):
        return hash((self.name, tuple(sorted(self.settings.items())), self.model))


@dataclass
class Case:
    """One set of inputs for a graded function: positional args (tensors or plain values) and a label.

    grad_wrt: indices of positional float-tensor args whose gradient is also graded (a gradient probe): the
    runner reports d(sum_j <out_j, R_j>)/d(arg) for seeded random R_j, and the judge compares it with the
    reference's.
    The probe runs in float64 only: there a valid reordering of the computation changes the gradient by far
    less than the tolerance, while float32 rounding, amplified by an ill-conditioned case (a long recurrence
    with gain > 1), can move valid code's gradient past it.
    raises: an exception class the function must raise on these inputs (invalid input, e.g. more queries
    than keys), with `why` saying what is wrong with them; such a case is called once, on the grading device."""

    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad_wrt: tuple = ()
    raises: type | None = None
    why: str = ""

    def to(self, dtype):
        """A copy with floating tensors in `dtype` (on the CPU; the runner moves them to the device)."""

        def move(a):
            if isinstance(a, torch.Tensor):
                return a.to(dtype=dtype if a.is_floating_point() else a.dtype).clone()
            if isinstance(a, Model):
                return a.to(dtype)
            return a

        return Case(self.label, tuple(move(a) for a in self.args), {k: move(v) for k, v in self.kwargs.items()}, self.grad_wrt,
                    self.raises, self.why)


@dataclass
class Call:
    """One call of the learner's function: CPU inputs, and the device the runner puts them on.

    module: for module exercises, {"init": constructor kwargs, "state": {parameter: CPU tensor}, "train": bool}.
    variable: for typed answers, the name of the notebook variable to report (no call is made).
    """

    label: str
    args: tuple
    kwargs: dict
    device: str
    dtype: torch.dtype | None = None
    grad_wrt: tuple = ()
    grad_seed: int = 0
    module: dict | None = None
    variable: str | None = None
    raises: type | None = None  # the exception the call must raise (see Case)
    why: str = ""
    # Dropout drawn by the grader (runner.seeded_dropout) from this seed, the same for the learner and the
    # reference: train()-mode calls compare where dropout sits. None: the built-in dropout.
    dropout_seed: int | None = None
    # False: the call runs without the observers of forbidden built-ins (a function mode and a dispatch mode on every
    # op), for a call that trains a model (chapter 10's learning check): the observers make a training run tens of
    # times slower. The sandbox's guard still switches the built-ins off; the notebook's other checks observe.
    observe: bool = True

    def updates_model(self) -> bool:
        """Does a Model argument of this call ask for its parameters after the call (a training step)? Such a
        function needs autograd, which the judge otherwise switches off around the reference."""
        return any(isinstance(a, Model) and a.state_after for a in (*self.args, *self.kwargs.values()))

    def run(self, fn, args, kwargs):
        """fn(*args, **kwargs) as the judge runs a reference or a catalogued mistake on this call's inputs: with
        autograd on when the function updates its model, and with the model's parameters after the call appended."""
        from autograder.checks.runner import seeded_dropout

        with torch.enable_grad() if self.updates_model() else contextlib.nullcontext(), seeded_dropout(self.dropout_seed):
            return self.with_state_after(fn(*args, **kwargs), args, kwargs)

    def with_state_after(self, out, args, kwargs):
        """`out`, or (out, *parameters after the call, then model.training) when a Model argument of this call is
        marked state_after (mode_after); `args`/`kwargs` are the built inputs the function was called with (what
        inputs() returned). The runner does the same on the learner's side (runner._state_after)."""
        extra = []
        for spec, built in list(zip(self.args, args)) + [(v, kwargs[k]) for k, v in self.kwargs.items()]:
            if isinstance(spec, Model) and spec.state_after:
                params = dict(built.named_parameters())
                extra += [params[name].detach() if name in params else None for name in spec.state]
            if isinstance(spec, Model) and spec.mode_after:
                extra.append(bool(built.training))
        if not extra:
            return out
        return (*(out if isinstance(out, tuple) else (out,)), *extra)

    def inputs(self, functions=None):
        """Fresh copies of the inputs as the learner's function saw them (meta tensors for device 'meta').
        functions: name -> callable, for Fn arguments (the judge passes the reference's)."""

        def make(a):
            if isinstance(a, Seeded):
                return torch.Generator().manual_seed(a.seed)
            if isinstance(a, Dev):
                return torch.device(self.device)
            if isinstance(a, Fn):
                return a.reference or (functions or {}).get(a.name)
            if isinstance(a, Model):
                cls = a.reference or (functions or {}).get(a.name)
                if cls is None:
                    raise LookupError(f"no reference class {a.name!r} for a Model argument")
                return a.build(cls, self.device)
            if isinstance(a, torch.Tensor):
                t = torch.empty(a.shape, dtype=a.dtype, device="meta") if self.device == "meta" else a.clone()
                return t
            return a

        args = [make(a) for a in self.args]
        for i in self.grad_wrt:
            args[i] = args[i].requires_grad_(True)
        kwargs = {k: make(v) for k, v in self.kwargs.items()}

        def optimizer(a):  # built once the model it steps is built
            return getattr(torch.optim, a.name)(args[a.model].parameters(), **a.settings) if isinstance(a, Optim) else a

        return tuple(optimizer(a) for a in args), {k: optimizer(v) for k, v in kwargs.items()}


# --- Module exercises ----------------------------------------------------------------------------------


@dataclass
class ModuleCase:
    """One check of a learner's nn.Module: constructor arguments, forward inputs, train() or eval()."""

    label: str
    init: dict
    inputs: tuple
    kwargs: dict = field(default_factory=dict)
    train: bool = False  # train(): dropout is the grader's seeded one (runner.seeded_dropout), the same for both
    # The inputs' floating dtype whatever the layer's (a layer used on inputs of another dtype than it was
    # converted to, e.g. a float64 layer on a float32 x); None: the layer's. The call's tolerance is the inputs'.
    input_dtype: torch.dtype | None = None


def grader_weights(module: torch.nn.Module, g: torch.Generator) -> dict:
    """Parameters drawn by the grader (uniform in ±1/sqrt(fan_in); 1-D ones around 1 or 0 at random), as a
    CPU state dict of parameters only (buffers are the learner's business)."""
    state = {}
    for name, p in module.named_parameters():
        bound = 1 / math.sqrt(p.shape[-1]) if p.dim() >= 2 else 0.5
        state[name] = (torch.rand(p.shape, generator=g, dtype=torch.float64) * 2 - 1) * bound
    return state


# --- Hidden-input helpers: inputs built for given weights ----------------------------------------------


def _solve(a, b):
    """x with a @ x = b (a square, float64), by Gauss-Jordan elimination with partial pivoting in plain tensor
    ops. Not torch.linalg: LAPACK may start OpenMP threads, which hang in a grading worker forked from a
    process that already used them."""
    n = a.shape[0]
    m = torch.cat([a, b], dim=1).clone()
    for col in range(n):
        pivot = col + int(m[col:, col].abs().argmax())
        m[[col, pivot]] = m[[pivot, col]]
        m[col] = m[col] / m[col, col]
        others = torch.arange(n) != col
        m[others] -= m[others, col:col + 1] * m[col]
    return m[:, n:]


def large_score_inputs(state, q_name, k_name, n_heads, batch, seq, g, low=200.0, high=2000.0):
    """Inputs (query_in, key_in) of shape (batch, seq, D) for which the module with these weights has scores
    of a few hundred to a few thousand: in every head, query t scores c_t (drawn in [low, high]) for one key
    and exactly 0 for the others (orthogonal keys: signed unit vectors), so exp overflows unless the softmax
    subtracts the row maximum, rows have different maxima, and the weights are one-hot whatever the rounding
    (no near ties). seq <= d_k."""
    w_q, w_k = state[f"{q_name}.weight"].double(), state[f"{k_name}.weight"].double()
    b_q, b_k = state.get(f"{q_name}.bias"), state.get(f"{k_name}.bias")
    d = w_q.shape[0]
    d_k = d // n_heads
    q = torch.zeros(batch, seq, d, dtype=torch.float64)  # the projected queries and keys we want
    k = torch.zeros(batch, seq, d, dtype=torch.float64)
    for b in range(batch):
        for h in range(n_heads):
            signs = torch.randint(0, 2, (d_k,), generator=g).double() * 2 - 1
            basis = torch.eye(d_k, dtype=torch.float64)[torch.randperm(d_k, generator=g)] * signs[:, None]  # orthonormal rows
            cols = slice(h * d_k, (h + 1) * d_k)
            k[b, :, cols] = math.sqrt(d_k) * basis[:seq]  # key j = sqrt(d_k) e_j: q.k / sqrt(d_k) = q's e_j part
            target = torch.randint(0, seq, (seq,), generator=g)  # the key each query picks
            c = low + (high - low) * torch.rand(seq, generator=g, dtype=torch.float64)
            q[b, :, cols] = c[:, None] * basis[target]

    def inputs_for(y, w, bias):  # y = x w^T + bias  ->  x
        y = y - (bias.double() if bias is not None else 0)
        return _solve(w, y.reshape(-1, d).T).T.reshape(y.shape)

    return inputs_for(q, w_q, b_q), inputs_for(k, w_k, b_k)
