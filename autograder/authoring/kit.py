"""The authoring kit: build-time helpers for any chapter's visible checks (a template sees it as `kit`).

The builder (autograder/authoring/build.py) renders a chapter's instructor source with `kit` in scope, so a
source uses these helpers without importing another chapter's checks. Everything here runs at build time, on the
instructor's machine: it computes the literals, inputs and named-mistake tables written into the notebook.
The grading host never imports it; what a hidden check also needs (large_score_inputs) lives in
autograder.checks.cases, and the kit imports it from there (the kit may import from checks, never the reverse).

- Inputs: visible_randn (seeded float64 literals), self_naming (entries that say where they came from).
- Module exercises: demo_weights (its source, DEMO_WEIGHTS_SOURCE, is copied into the notebook), parameter_shapes,
  demo_module / demo_run / demo_variants (the module, the reference and each wrong class with demo weights),
  demo_large_inputs (the large-score inputs for those weights), class_solution (a class with each method's body
  between nbgrader's solution markers).
- Views of an output for mistakes() and literal(): view, view_all.
"""

import ast
import inspect
import math

import torch

from autograder.checks import runner
from autograder.checks.cases import large_score_inputs
from autograder.checks.visible import CheckFailed


def demo_weights(module, shapes, salt=0):
    """Check that `module` has exactly the parameters `shapes` ({name: shape}), then load fixed, readable
    weights into it: entry i of the p-th parameter is sin(1.3 i + 0.3 i² + 0.7 p + salt) / sqrt(its last size)."""
    found = {name: tuple(p.shape) for name, p in module.named_parameters()}
    if found != shapes:
        missing = [f"{n} {s}" for n, s in shapes.items() if found.get(n) != s]
        extra = [f"{n} {s}" for n, s in found.items() if shapes.get(n) != s]
        raise CheckFailed(
            f"{type(module).__name__} must have exactly the parameters the exercise names (the grader loads its "
            f"weights by name): missing or of another shape: {', '.join(missing) or 'none'}; not expected: "
            f"{', '.join(extra) or 'none'}."
        )
    state = {}
    for p, (name, shape) in enumerate(shapes.items()):
        n = math.prod(shape)
        i = torch.arange(n, dtype=torch.float64)
        state[name] = (torch.sin(1.3 * i + 0.3 * i * i + 0.7 * p + salt) / math.sqrt(shape[-1])).reshape(shape)
    # Loaded as the grader loads them: by parameter name, not strict (a sublayer also kept in a ModuleList, or a
    # weight shared by two names, appears twice in state_dict() and once in named_parameters(): both are loaded).
    torch.nn.Module.load_state_dict(module, state, strict=False)
    return module


DEMO_WEIGHTS_SOURCE = inspect.getsource(demo_weights).rstrip()


# The grader's dropout (runner.seeded_dropout), copied into a notebook that checks a module in train() mode: the
# visible checks draw the same masks as the hidden ones, and the literals below are computed under it.
SEEDED_DROPOUT_SOURCE = inspect.getsource(runner.seeded_dropout).rstrip()


def under_grader_dropout(run, seed):
    """run, called under the grader's dropout masks drawn from `seed` (runner.seeded_dropout): a train() module's
    output as the notebook's `with seeded_dropout(seed):` sees it (for literal() and mistakes())."""

    def wrapped(*args, **kwargs):
        with runner.seeded_dropout(seed):
            return run(*args, **kwargs)

    return wrapped


def under_grader_dropout_all(variants, seed):
    """{mistake: under_grader_dropout(run, seed)} for a table of demo_variants."""
    return {description: under_grader_dropout(run, seed) for description, run in variants.items()}


def demo_module(cls, init, salt=0, dtype=torch.float64, train=False):
    """cls(**init) with demo_weights, in dtype and train()/eval() (the visible checks' module, at build time).

    The weights are what the notebook's module holds: demo_weights' float64 values rounded to float32 (the
    learner's module is built in float32, loads them, then .double()). The module is built in float64 and the
    weights are cast, never computed, in float32, so no float32 arithmetic reaches a value written into the
    notebook (the builder refuses those)."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        module = cls(**init)
    finally:
        torch.set_default_dtype(default)
    demo_weights(module, {name: tuple(p.shape) for name, p in module.named_parameters()}, salt)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.float().double())  # rounded to float32 by casts, no arithmetic
    return (module if dtype == torch.float64 else module.to(dtype)).train(train)


def demo_run(cls, init, salt=0, train=False):
    """A function running cls(**init) with demo weights on its inputs (for the builder's mistakes())."""

    def run(*args, **kwargs):
        with torch.no_grad():
            return demo_module(cls, init, salt, args[0].dtype, train)(*args, **kwargs)

    return run


def demo_variants(catalogue, init, salt=0, train=False):
    """{mistake: demo_run of its wrong class}, for the builder's mistakes()."""
    return {description: demo_run(cls, init, salt, train) for description, cls in catalogue.items()}


def demo_large_inputs(cls, init, q_name, k_name, n_heads, batch, seq, seed=0, salt=0):
    """large_score_inputs for the module with demo weights (the visible large-score check)."""
    state = {name: p.detach() for name, p in demo_module(cls, init, salt).named_parameters()}
    return large_score_inputs(state, q_name, k_name, n_heads, batch, seq, torch.Generator().manual_seed(seed))


def parameter_shapes(cls, init):
    """{parameter name: shape} of cls(**init): what the notebook's demo_weights call checks the learner's module has."""
    return {name: tuple(p.shape) for name, p in cls(**init).named_parameters()}


def self_naming(a, b, c):
    """A float64 (a, b, c) tensor whose entry (i, j, k) is 100 i + 10 j + k: each number says where it came from."""
    return (100 * torch.arange(a)[:, None, None] + 10 * torch.arange(b)[None, :, None] + torch.arange(c)).double()


def visible_randn(*shape, seed):
    """Build-time inputs of the visible checks (written into the notebook as literals)."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def view(fn, index=None, shape=None, dtype=None):
    """fn's output (its [index] for a tuple), reshaped to `shape`, with float inputs first cast to `dtype`
    ('float32': what a float32 module computes): a builder-side helper for mistakes() and literal()."""

    def run(*args, **kwargs):
        if dtype:
            args = tuple(a.to(getattr(torch, dtype)) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        out = fn(*args, **kwargs)
        out = out[index] if index is not None else out
        out = out.reshape(shape) if shape else out  # fails (and the mistake is left out) if the sizes differ
        return out.double() if dtype else out  # compared with float64 expectations in the notebook

    return run


def view_all(catalogue, index=None, shape=None, dtype=None):
    """view() of each entry of a mistake catalogue ({description: function})."""
    return {description: view(fn, index, shape, dtype) for description, fn in catalogue.items()}


def class_solution(cls):
    """The source of class `cls` with the body of each method between nbgrader's solution markers (after the
    docstring, and after a leading super().__init__()): learners get the class and its method signatures,
    and a blank class still builds, so that a visible check can say "not implemented yet"."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    regions = []
    for node in ast.parse(source).body[0].body:
        if not isinstance(node, ast.FunctionDef):
            continue
        body = node.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body = body[1:]
        if body and ast.unparse(body[0]) == "super().__init__()":
            body = body[1:]
        regions.append((body[0].lineno - 1, body[-1].end_lineno))
    for first, last in reversed(regions):
        indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
        lines[first:last] = [f"{indent}### BEGIN SOLUTION", *lines[first:last], f"{indent}### END SOLUTION"]
    return "\n".join(lines)
