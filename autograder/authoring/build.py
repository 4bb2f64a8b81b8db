"""Build the exercise notebooks from their instructor sources.

instructor source (autograder/source/<chapter>/exercises.md, Jinja + MyST Markdown)
  -> instructor notebook (<workdir>/source/<chapter>/exercises.ipynb, solutions filled in from solutions/)
  -> nbgrader generate_assignment -> student notebook (chapters/<chapter>/exercises.ipynb)

Every expected value in a visible check is computed here, from solutions/, when the notebook is built.
"""

import ast
import importlib
import inspect
import json
import math
import pprint
import shutil
from pathlib import Path

import jinja2
import jupytext
import nbformat
import torch

from autograder import registry
from autograder.authoring import kit
from autograder.authoring.release import BuildError, generate_assignments  # noqa: F401 (BuildError: raised and caught as build.BuildError)

NBGRADER_SCHEMA = 3


# --- Template helpers ------------------------------------------------------------------------------


def solution_source(module, name: str) -> str:
    """The source of function `name` in `module`, its body (after the docstring) between solution markers."""
    source = inspect.getsource(getattr(module, name))
    lines = source.splitlines()
    func = ast.parse(source).body[0]
    body = func.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]  # keep the docstring visible to learners
    if not body:
        raise BuildError(f"{module.__name__}.{name} has no body after its docstring")
    first, last = body[0].lineno - 1, body[-1].end_lineno  # 0-based start, exclusive end
    indent = lines[first][: len(lines[first]) - len(lines[first].lstrip())]
    return "\n".join(
        lines[:first] + [f"{indent}### BEGIN SOLUTION"] + lines[first:last] + [f"{indent}### END SOLUTION"] + lines[last:]
    )


def tensor(data, dtype=None):
    """A tensor for a template: bools stay bool, numbers default to float64 (dtype='float32' to override).

    A float32 tensor made here is data (each number correctly rounded from its decimal text), so literal()
    may write it."""
    flat = torch.tensor(data)
    if flat.dtype == torch.bool:
        return flat
    return torch.tensor(data, dtype=getattr(torch, dtype or "float64"))


# --- Values written into notebooks are the same on every machine ---------------------------------------
#
# A number written into a notebook must not depend on the rounding of the machine that builds it: float32
# matrix products, softmaxes and sums round differently with the BLAS/oneDNN kernels a CPU selects (chapter
# 04 once wrote 0.075591326 on one machine and 0.07557109 on another). The rules, enforced while a template
# renders:
#   1. Every tensor that went through float32 (or float16/bfloat16) arithmetic is marked as such
#      (_Float32Arithmetic below watches every torch call); literal() refuses a marked tensor, and so does
#      .item()/.tolist()/float() of one. Data and casts are not arithmetic: tensor(..., dtype="float32"),
#      x64.float(), views, indexing, cat... stay writable; so do the elementwise +, -, *, / and sqrt, which
#      IEEE 754 rounds correctly (the same result on every machine). Sums, matrix products, exp, softmax...
#      are marked.
#   2. A float32 case's values come from expected(fn, *inputs): fn runs on float64 copies of the inputs (the
#      values written). An ill-conditioned case is refused: one where float32 kernels that round differently
#      would move the result by more than CONDITIONING of the visible check's tolerance. That is estimated in
#      float64 (_OtherKernels moves every result that kernels may round differently by KERNEL_NOISE), not by
#      this machine's float32 run, so that the decision is the same on every machine: a float32 run decides
#      differently near the threshold (chapter 03's softmax-over-queries variant: exact here, 1.02 tolerances
#      off with other kernels). expected() also refuses a case whose float32 run here is that far from
#      float64 (a correct float32 answer must pass with a margin); mistakes() decides on the simulation only,
#      and may leave out the ill-conditioned variants.
#   3. Numbers are written to 8 significant digits of the float64 value (float64 -> float32 happens when the
#      notebook parses the text, correctly rounded, so it is the same everywhere). Float64 kernels also differ
#      between machines, by a few units in the last place (ulps) of float64, and values computed from short
#      decimal data are often exactly on a rounding boundary of the 8th digit (-0.751696585 in chapter 01):
#      such a value, within BOUNDARY_ULPS float64 ulps of the boundary, is written to 7 digits, whichever side
#      of the boundary this machine's kernels put it (the 7-digit boundaries are half a unit of the 8th digit
#      away, so the 7-digit text is the same everywhere). What is left is a value that lands within a few ulps
#      of the edge of that band (BOUNDARY_ULPS ulps from the boundary): about 1e-7 of values drawn at random
#      (the chance of any rounding to 8 digits), and exact data does not land there.

VISIBLE_TOLERANCE = (1e-4, 1e-4)  # (atol, rtol): checks.visible.expect_close's defaults, used by the float32 checks
CONDITIONING = 0.1  # a float32 case is refused when other kernels' rounding moves a result by more than this
#                     fraction of the visible check's tolerance
KERNEL_NOISE = 2.0**-21  # other kernels' rounding of a float32 result, relative (about 4 float32 ulps)
BOUNDARY_ULPS = 64  # float64 ulps from an 8th-digit rounding boundary under which a value is written to 7 digits
_LOW_PRECISION = (torch.float32, torch.float16, torch.bfloat16)
_MARK = "_built_with_float32_arithmetic"
_WRITE_AS = "_written_as_dtype"

# torch functions that compute no new float value (data, casts, views, copies, selections, comparisons):
# a float32 tensor they return is as writable as their inputs.
_EXACT = frozenset(
    """tensor as_tensor zeros ones full eye empty zeros_like ones_like full_like empty_like
    to float double half type type_as view view_as reshape reshape_as transpose permute contiguous clone detach
    detach_ __getitem__ __setitem__ cat concat concatenate stack hstack vstack expand expand_as squeeze
    unsqueeze flatten unflatten split chunk unbind t T mT narrow select index_select gather flip roll repeat
    tile movedim swapaxes tril triu diag diagonal masked_fill masked_fill_ where neg __neg__ abs copy_
    requires_grad_ tolist item numpy size dim shape dtype device is_floating_point numel __len__ __iter__
    __repr__ __format__ __bool__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ eq ne lt le gt ge isnan isinf
    isfinite amax amin argmax argmin sort argsort topk equal allclose isclose __hash__ data requires_grad
    is_leaf grad_fn ndim names layout is_cuda is_meta __reduce_ex__ __deepcopy__""".split()
)


# elementwise operations that IEEE 754 rounds correctly, so every machine gives the same float32 result
# (sums, products of matrices, exp, tanh, softmax... are not: their order of operations and their
# approximations differ between kernels)
_CORRECTLY_ROUNDED = frozenset(
    """add __add__ __radd__ __iadd__ add_ sub __sub__ __rsub__ __isub__ sub_ rsub mul __mul__ __rmul__ __imul__
    mul_ div __truediv__ __rtruediv__ __itruediv__ div_ true_divide sqrt sqrt_ maximum minimum clamp clamp_
    relu""".split()
)

# the ways a number leaves a tensor for Python (and then for a template's text)
_TO_PYTHON = frozenset("item tolist numpy __float__ __int__ __index__ __format__ __array__".split())


def _same_everywhere(name, kwargs) -> bool:
    """Whether torch function `name` gives the same float32 result on every machine (see _EXACT and
    _CORRECTLY_ROUNDED; add/sub with an alpha other than 1 may be computed with a fused multiply-add)."""
    return name in _EXACT or (name in _CORRECTLY_ROUNDED and kwargs.get("alpha", 1) in (1, -1))


def _name(func) -> str:
    name = getattr(func, "__name__", "")
    if name == "__get__":  # a property of Tensor (x.T, x.grad): the name of the property
        name = getattr(getattr(func, "__self__", None), "__name__", name)
    return name


def _tensors(tree) -> list:
    """The tensors in a tree of tuples, lists and dicts."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        tree = list(tree.values())
    if isinstance(tree, (tuple, list)):
        return [t for x in tree for t in _tensors(x)]
    return []


def computed_in_float32(t) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, _MARK, False)


class _Float32Arithmetic(torch.overrides.TorchFunctionMode):
    """Marks every tensor that float32 arithmetic produced, or that was computed from such a tensor."""

    def __init__(self):
        super().__init__()
        self.gradients_marked = False  # a backward() through float32 arithmetic: every .grad read is marked

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name in _TO_PYTHON and args and computed_in_float32(args[0]) and (name != "__format__" or args[1:2] != ("",)):
            raise BuildError(
                f"{name}() of a {args[0].dtype} tensor computed with float32 arithmetic: a number taken out of it "
                "depends on the machine's rounding. Compute it in float64 (expected(fn, *float32 inputs))."
            )
        out = func(*args, **kwargs)
        inputs, outputs = _tensors((args, kwargs)), _tensors(out)
        marked = any(computed_in_float32(t) for t in inputs)
        if not _same_everywhere(name, kwargs):
            marked = marked or any(t.dtype in _LOW_PRECISION for t in inputs + outputs)
        if name == "grad" and self.gradients_marked:
            marked = True
        if name == "copy_" and inputs:  # dest.copy_(src) overwrites dest: dest is now what src is
            setattr(inputs[0], _MARK, any(computed_in_float32(t) for t in inputs[1:]))
            return out
        if marked:
            if name == "backward":
                self.gradients_marked = True
            if name.endswith("_") or name == "__setitem__":  # in place: the tensor changed
                outputs = outputs + inputs[:1]
            for t in outputs:
                if t.is_floating_point():
                    setattr(t, _MARK, True)
        return out


def _map(fn, tree):
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        return type(tree)(_map(fn, v) for v in tree)
    return fn(tree)


def _as(dtype, tree):
    """Float tensors of tree cast to dtype (exact from float32 to float64), other leaves unchanged."""
    return _map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, tree)


def _has_float32(tree) -> bool:
    return any(t.dtype in _LOW_PRECISION for t in _tensors(tree))


def _pick(out, index):
    return out[index] if index is not None else out


def _deviation(r64, r32, atol, rtol):
    """Largest |r32 - r64| / (atol + rtol |r64|) over the finite entries, and whether non-finite entries agree."""
    r64, r32 = r64.detach().double(), r32.detach().double()
    setattr(r32, _MARK, False)  # this copy only measures how far float32 is from float64; nothing is written
    if r64.shape != r32.shape:
        raise BuildError(f"the float64 and float32 results have different shapes {tuple(r64.shape)} and {tuple(r32.shape)}")
    finite = r64.isfinite() & r32.isfinite()
    same_nonfinite = bool(((r64 == r32) | (r64.isnan() & r32.isnan()) | finite).all())
    if not finite.any():
        return 0.0, same_nonfinite
    ratio = (r32 - r64).abs()[finite] / (atol + rtol * r64.abs()[finite])
    return ratio.max().item(), same_nonfinite


class _OtherKernels(torch.overrides.TorchFunctionMode):
    """Float64 arithmetic in which every result computed from the case's inputs that kernels may round
    differently (all but the data, casts, views and correctly rounded operations of _EXACT and
    _CORRECTLY_ROUNDED) is moved by KERNEL_NOISE times itself, signs alternating: what another machine's
    float32 kernels could do to the float32 run, simulated in float64, so that the estimate, and every
    decision taken on it, is the same on every machine. Values not computed from the inputs (a module's
    weights, made in float64 and cast) are left alone, as they are in the float32 run."""

    FROM_INPUTS = "_computed_from_the_case_inputs"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = _name(func)
        inputs = _tensors((args, kwargs))
        if name in _TO_PYTHON or not any(getattr(t, self.FROM_INPUTS, False) for t in inputs):
            return out
        outputs = _tensors(out) + (inputs[:1] if name.endswith("_") or name == "__setitem__" else [])
        if not _same_everywhere(name, kwargs or {}):
            shared = {t.untyped_storage().data_ptr() for t in inputs if t.device.type == "cpu"}
            for t in _tensors(out):
                if t.dtype == torch.float64 and t.device.type == "cpu" and t.numel() and t.untyped_storage().data_ptr() not in shared:
                    signs = 1.0 - 2.0 * (torch.arange(t.numel(), dtype=torch.float64) % 2)
                    t.data.mul_(1.0 + signs.reshape(t.shape) * KERNEL_NOISE)
        for t in outputs:
            setattr(t, self.FROM_INPUTS, True)
        return out

    @classmethod
    def inputs(cls, tree):
        """float64 copies of the case's inputs, marked as such."""

        def copy(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x = x.detach().to(torch.float64, copy=True)
                setattr(x, cls.FROM_INPUTS, True)
            return x

        return _map(copy, tree)


def _three_ways(fn, args, kwargs, index):
    """fn on float64 copies of the arguments (the values written), on float32 copies (how far this machine's
    float32 is), and on float64 copies with other kernels' rounding simulated (_OtherKernels: the
    conditioning estimate)."""
    with torch.no_grad():
        r64 = _pick(fn(*_as(torch.float64, args), **_as(torch.float64, kwargs)), index)
        r32 = _pick(fn(*_as(torch.float32, args), **_as(torch.float32, kwargs)), index)
        with _OtherKernels():
            noisy = _pick(fn(*_OtherKernels.inputs(args), **_OtherKernels.inputs(kwargs)), index)
    return r64, r32, noisy


def _ill_conditioned(r64, r32, noisy, atol, rtol, float32_run=True) -> str:
    """Why a float32 case's value r64 can't be a fixed expectation ('' when it can).

    The simulation (noisy) measures what differs between machines; the float32 run (r32, with float32_run)
    also measures the roundings that are the same everywhere (a correct float32 answer must be within the
    tolerance), but a decision taken on it alone could differ on another machine near the threshold."""
    elsewhere, same_nonfinite = _deviation(r64, noisy, atol, rtol)
    if elsewhere > CONDITIONING or not same_nonfinite:
        return (f"a float32 rounding by other kernels (simulated) moves the result by {elsewhere:.3g} times the visible "
                f"tolerance (at most {CONDITIONING} allowed)")
    in_float32, same_nonfinite = _deviation(r64, r32, atol, rtol)
    if float32_run and in_float32 > CONDITIONING:
        return (f"the float32 result differs from the float64 one by {in_float32:.3g} times the visible tolerance "
                f"(at most {CONDITIONING} allowed)")
    if float32_run and not same_nonfinite:
        return "float32 overflows (inf or NaN) where float64 does not"
    return ""


def expected(fn, *args, index=None, atol=VISIBLE_TOLERANCE[0], rtol=VISIBLE_TOLERANCE[1], **kwargs):
    """fn(*args)[index] for a float32 case, computed in float64 and written as float32 by literal().

    The float32 inputs are data (tensor(..., dtype="float32") or casts of float64 values). The case is refused
    (BuildError) when it is ill-conditioned: when the rounding of other kernels (simulated in float64 by
    _OtherKernels) moves the result by more than CONDITIONING of the visible check's tolerance
    atol + rtol |value| (pass the check's atol/rtol when it sets its own), or when this machine's float32
    result is that far from the float64 one, or overflows where float64 does not: such a case's float32
    result depends on the machine's rounding, so it can't be a fixed expectation.
    Tensors, tuples, lists and dicts of tensors keep their structure."""
    r64, r32, noisy = _three_ways(fn, args, kwargs, index)

    def check(a, b, c):
        if not isinstance(a, torch.Tensor) or not a.is_floating_point():
            return a
        why = _ill_conditioned(a, b, c, atol, rtol)
        if why:
            raise BuildError(
                f"expected({getattr(fn, '__name__', fn)}, ...): an ill-conditioned float32 case: {why}, so the "
                "expected values would depend on the machine's rounding. Change the inputs (e.g. scores so far "
                "apart that the softmax is one-hot in both precisions) or make the case float64."
            )
        setattr(a, _WRITE_AS, torch.float32)
        return a

    if isinstance(r64, dict):
        return {k: check(v, r32[k], noisy[k]) for k, v in r64.items()}
    if isinstance(r64, (tuple, list)):
        return type(r64)(check(*abc) for abc in zip(r64, r32, noisy))
    return check(r64, r32, noisy)


def _number(x, float32=False) -> str:
    if float32 and 0.0 < abs(x) <= 2.0**-150:  # parsed as float32 it is 0: write what the notebook will hold
        x = math.copysign(0.0, x)
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else 'float("-inf")'
    text = f"{x:.8g}"
    if x != 0.0:
        # the nearest rounding boundary of the 8th digit, and the distance to it in float64 ulps of x
        step = 10.0 ** (math.floor(math.log10(abs(x))) - 7)
        boundary = (math.floor(x / step) + 0.5) * step
        if abs(x - boundary) < BOUNDARY_ULPS * math.ulp(x):
            text = f"{x:.7g}"  # 8-digit boundaries lie half a unit of the 8th digit away from 7-digit ones
    return text if "e" in text or "." in text else f"{text}.0"


def literal(t: torch.Tensor, indent: str = "", dtype=None) -> str:
    """Python source that recreates tensor t (values to 8 significant digits); matrices one row per line.

    dtype: the dtype written (default: the one expected() marked, else t's). A tensor that went through float32
    arithmetic is refused: its digits depend on the machine (compute it with expected() instead)."""
    if computed_in_float32(t):
        raise BuildError(
            f"literal() of a {t.dtype} tensor {tuple(t.shape)} computed with float32 arithmetic: its digits depend "
            "on the machine's rounding. Compute it in float64 with expected(fn, *float32 inputs) (the mistakes' "
            "outputs with mistakes(...)), or write float32 data made by tensor(..., dtype=\"float32\") or x64.float()."
        )
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype or getattr(t, _WRITE_AS, None) or t.dtype
    dtype_text = "" if t.dtype == torch.bool else f", dtype=torch.{str(dtype).replace('torch.', '')}"

    def nested(v):
        if not isinstance(v, list):
            return str(v) if isinstance(v, bool) else _number(v, float32=dtype == torch.float32)
        return "[" + ", ".join(nested(x) for x in v) + "]"

    if t.dim() < 2:
        return f"torch.tensor({nested(t.tolist())}{dtype_text})"
    rows = "".join(f"{indent}    {nested(row)},\n" for row in t.tolist())
    return f"torch.tensor([\n{rows}{indent}]{dtype_text})"


def mistakes(reference, variants: dict, *args, index=None, dtype=None, ill_conditioned="refuse", **kwargs) -> str:
    """A dict literal {mistake: what it outputs on these inputs}, for the visible checks' diagnoses.

    Variants that fail on these inputs, or agree with the reference here, are left out (they could not be
    told apart); so are duplicates of an earlier variant.

    With float32 inputs (a float32 case), every output is computed as expected() does: the float64 values are
    written, except where float32 overflows (inf or NaN) and float64 does not, which is the mistake's float32
    behaviour and is written as such. A variant that other kernels' rounding (simulated in float64, as in
    expected()) moves by more than CONDITIONING of the visible tolerance is refused, or left out with
    ill_conditioned="leave out". Only the simulation decides, so every machine keeps the same variants (this
    machine's float32 run is not consulted: near a threshold it would decide differently elsewhere).
    dtype: the dtype written (default: float32 for a float32 case, else the output's).
    """
    float32_case = _has_float32((args, kwargs))

    def run(fn, label):
        if not float32_case:
            out = _pick(fn(*args, **kwargs), index)
            return out.to(getattr(torch, dtype)) if dtype else out
        r64, r32, noisy = _three_ways(fn, args, kwargs, index)
        why = _ill_conditioned(r64, r32, noisy, *VISIBLE_TOLERANCE, float32_run=False)  # the same everywhere
        if why and ill_conditioned == "leave out":
            return None
        if why:
            raise BuildError(
                f"mistakes(): {label!r} is ill-conditioned in this float32 case: {why}: its values would depend "
                "on the machine's rounding. Change the inputs, or pass ill_conditioned=\"leave out\"."
            )
        overflow = ~r32.isfinite() & r64.isfinite()
        out = torch.where(overflow, r32.double(), r64.double()).detach()
        setattr(out, _MARK, False)  # the float64 values and float32's inf/NaN: no rounding of float32 is kept
        setattr(out, _WRITE_AS, getattr(torch, dtype or "float32"))
        return out

    correct = run(reference, "the reference")
    if correct is None:
        raise BuildError("mistakes(): the reference itself is ill-conditioned in this float32 case: change the inputs")
    seen = [correct]
    entries = []
    for description, fn in variants.items():
        try:
            wrong = run(fn, description)
        except BuildError:
            raise
        except Exception:
            continue
        if wrong is None:
            continue
        if any(w.shape == wrong.shape and torch.allclose(w, wrong, equal_nan=True, atol=1e-6) for w in seen):
            continue
        seen.append(wrong)
        entries.append(f"    {description!r}: {literal(wrong, indent='    ')},")
    return "{\n" + "\n".join(entries) + "\n}" if entries else "{}"


HIDDEN_TESTS_CELL = """```{{code-cell}} ipython3
:kind: tests
:grade_id: {grade_id}
:points: {points}
# Hidden checks run here when your notebook is graded{note}.
### BEGIN HIDDEN TESTS
from autograder.checks import run_check
run_check({chapter_id!r}, {grade_id!r}, globals())
### END HIDDEN TESTS
```"""


def hidden_tests_cell(chapter_id: str, checks, grade_id: str, points: int, note: str = "") -> str:
    """The graded cell of an exercise, the same in every chapter: `{{ hidden_tests("f_hidden", points=3) }}` in a
    source (note: words on what the check runs on, shown in the student notebook). Its hidden part (stripped
    from the student notebook) runs the check of CHECKS[grade_id]."""
    if grade_id not in checks.CHECKS:
        raise BuildError(f"{chapter_id}: hidden_tests({grade_id!r}): the chapter's checks have no CHECKS[{grade_id!r}]")
    return HIDDEN_TESTS_CELL.format(chapter_id=chapter_id, grade_id=grade_id, points=points, note=f" ({note})" if note else "")


def render_source(chapter_id: str, template_text: str | None = None) -> str:
    name = registry.module_name(chapter_id)
    reference = importlib.import_module(f"solutions.{name}")
    checks = importlib.import_module(f"autograder.checks.{name}")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    if template_text is None:
        template_text = registry.instructor_source(chapter_id).read_text(encoding="utf-8")
    template = env.from_string(template_text)
    helpers = (registry.ROOT / "autograder" / "checks" / "visible.py").read_text(encoding="utf-8")
    with _Float32Arithmetic():
        return template.render(
            check_helpers=helpers.strip(),
            hidden_tests=lambda grade_id, points, note="": hidden_tests_cell(chapter_id, checks, grade_id, points, note),
            solution=lambda fn_name: solution_source(reference, fn_name),
            answer=lambda grade_id: "### BEGIN SOLUTION\n" + reference.ANSWER_CELLS[grade_id].strip() + "\n### END SOLUTION",
            source=lambda fn_name, module=None: inspect.getsource(getattr(importlib.import_module(f"solutions.{module}") if module else reference, fn_name)).rstrip(),
            tensor=tensor,
            literal=literal,
            mistakes=mistakes,
            expected=expected,
            pretty=lambda obj: pprint.pformat(obj, width=110, sort_dicts=False),
            ref=reference,
            checks=checks,
            kit=kit,  # build-time helpers for any chapter's visible checks
            math=math,
            torch=torch,
        )


# --- Notebooks --------------------------------------------------------------------------------------

_KINDS = {
    "solution": dict(grade=False, solution=True, locked=False),
    "tests": dict(grade=True, solution=False, locked=True),
    "readonly": dict(grade=False, solution=False, locked=True),
}


def instructor_notebook(chapter_id: str, template_text: str | None = None) -> nbformat.NotebookNode:
    """The rendered instructor notebook, with nbgrader metadata and deterministic cell ids."""
    nb = jupytext.reads(render_source(chapter_id, template_text), fmt="md:myst")
    nb.metadata = nbformat.from_dict(
        {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        }
    )
    seen = set()
    for i, cell in enumerate(nb.cells):
        meta = dict(cell.metadata)
        cell.metadata = nbformat.from_dict({})
        kind = meta.pop("kind", None)
        grade_id = meta.pop("grade_id", None)
        points = meta.pop("points", None)
        if meta:
            raise BuildError(f"{chapter_id}: cell {i} has unknown options {sorted(meta)}")
        cell.id = grade_id or f"cell-{i:02d}"
        if kind is None:
            continue
        if kind not in _KINDS or not grade_id:
            raise BuildError(f"{chapter_id}: cell {i} needs :kind: one of {sorted(_KINDS)} and a :grade_id:")
        if grade_id in seen:
            raise BuildError(f"{chapter_id}: duplicated grade_id {grade_id!r}")
        seen.add(grade_id)
        nbgrader = dict(_KINDS[kind], grade_id=grade_id, schema_version=NBGRADER_SCHEMA)
        if kind == "tests":
            if points is None:
                raise BuildError(f"{chapter_id}: tests cell {grade_id!r} needs :points:")
            nbgrader["points"] = points
        cell.metadata["nbgrader"] = nbgrader
    nbformat.validate(nb)
    return nb


def normalized_json(nb) -> str:
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def build_student_notebooks(workdir: Path, out_root: Path = registry.ROOT, chapters=None) -> list[Path]:
    """Generate the student notebooks and copy them into chapters/<chapter>/exercises.ipynb."""
    written = []
    for chapter_id in generate_assignments(workdir, chapters, render=instructor_notebook):
        released = nbformat.read(workdir / "release" / chapter_id / f"{registry.NOTEBOOK}.ipynb", as_version=4)
        target = out_root / "chapters" / chapter_id / f"{registry.NOTEBOOK}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(normalized_json(released), encoding="utf-8")
        written.append(target)
    return written


def clean_workdir(workdir: Path):
    if workdir.exists():
        shutil.rmtree(workdir)
