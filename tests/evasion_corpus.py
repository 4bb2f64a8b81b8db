"""Routes to torch's own implementation of a forbidden built-in, for every chapter with forbidden built-ins (issue 31).

Each route is a notebook: the reference, with one exercise's solution cell replaced by code that gets the forbidden
computation from torch, in one of three categories:
1. "implementation": torch's Python implementation of the op (a reference implementation, a decomposition, a
   distribution, a quantizable cell, flex attention's eager path), reached by a public or computed name in a cell the
   learner added (the static reading of the exercise does not read that cell);
2. "revived": torch's code rebuilt: the function loaded again from its compiled file (marshal), compiled again from
   torch's source, or copied under another name;
3. "computed": a computed name in the solution cell itself (functools.reduce(getattr, ...), vars(sys.modules[...]),
   operator.attrgetter, builtins.getattr): the static reading notes it as a hint only (no points lost), so what
   decides is the guard at run time.
Names that start with an underscore are built from strings: written out (`torch._refs`), the static reading would
refuse them as torch's private machinery for every exercise, and the route would prove nothing about the guard.

tests/test_evasion_batch.py grades them all through the real CLI, warm and cold, and shows each computes the right
values where no guard is armed (so each earned points before the guard switched torch's implementations off).
"""

from dataclasses import dataclass

# Shared by the helper cells: loading a function of torch again from its compiled file, or from its source.
REVIVE = '''import ast, importlib, importlib.util, marshal, operator, sys, types, torch
_get = operator.attrgetter


def _module(name):
    return importlib.import_module("torch." + name)


def _from_pyc(module, name, rename=False):
    code = marshal.loads(open(importlib.util.cache_from_source(module.__file__), "rb").read()[16:])
    found = next(c for c in code.co_consts if getattr(c, "co_name", None) == name)
    if rename:
        found = found.replace(co_name="mine", co_qualname="mine")
    return types.FunctionType(found, vars(module), "mine")


def _from_source(module, name):
    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    node.decorator_list = []
    space = dict(vars(module))
    exec(compile(ast.Module([node], []), module.__file__, "exec"), space)
    return space[name]
'''


@dataclass(frozen=True)
class Route:
    chapter: str
    grade_id: str  # the solution cell replaced (its function is the exercise's)
    category: str  # "implementation", "revived" or "computed"
    helper: str  # a cell the learner added after the imports ("" for none)
    solution: str  # the new source of the solution cell, or (anchor, replacement) applied to the reference's
    replace: tuple = ()


SOFTMAX_CELL = "def stable_softmax(x, dim=-1):\n    return _sm(x, dim)\n"
LSTM_CELL = "def lstm_cell_step(x, h, c, W_xh, W_hh, b):\n    return _cell(x, h, c, W_xh, W_hh, b)\n"
LAYER_NORM_CELL = "def layer_norm(x, weight, bias, eps=1e-5):\n    return _ln(x, weight, bias, eps)\n"
MASKED_CELL = ("def masked_attention(q, k, v, mask=None, fill_value=float('-inf')):\n"
               "    if mask is not None and mask.dtype != torch.bool:\n"
               "        raise TypeError('mask must be a bool tensor')\n"
               "    return _attend(q, k, v, mask, fill_value)\n")
STEP_ANCHOR = "torch.softmax(scores, dim=-1) @ v_new"

# Weights from flex attention's log-sum-exp (masked scores as the learner computes them; output from torch).
FLEX = '''from torch.nn.attention.flex_attention import flex_attention


def _flex(q, k, v, mask, fill):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is None:
        mask = torch.ones(scores.shape, dtype=torch.bool, device=q.device)
    mask = mask.expand(scores.shape)
    lead = scores.shape[:-2]
    q4, k4, v4, m4 = (t.reshape(-1, 1, *t.shape[-2:]) for t in (q.expand(*lead, *q.shape[-2:]), k.expand(*lead, *k.shape[-2:]),
                                                                v.expand(*lead, *v.shape[-2:]), mask))

    def score_mod(score, b, h, qi, ki):
        return torch.where(m4[b, h, qi, ki], score, fill)

    out, lse = flex_attention(q4, k4, v4, score_mod=score_mod, return_lse=True)
    weights = (scores.masked_fill(~mask, fill) - lse.reshape(*lead, -1, 1)).exp()
    out = out.reshape(*lead, *out.shape[-2:]) + 0 * weights.sum(-1, keepdim=True)  # a row with every key masked: NaN
    return out, weights
'''

ROUTES = {
    # --- chapter 01: the LSTM cell ----------------------------------------------------------------------------
    "ch01-quantizable-lstm-cell": Route("01-rnn-limits", "lstm_cell_step", "implementation", (
        "import torch\nfrom torch.ao.nn.quantizable import LSTMCell as _Q\n\n\n"
        "def _cell(x, h, c, W_xh, W_hh, b):\n"
        "    cell = _Q(W_xh.size(0), W_hh.size(0), dtype=x.dtype)\n"
        "    params = {'igates.weight': W_xh.T, 'igates.bias': b, 'hgates.weight': W_hh.T, 'hgates.bias': torch.zeros_like(b)}\n"
        "    flat = [t.reshape(-1, t.size(-1)) for t in (x, h, c)]\n"
        "    h_new, c_new = torch.func.functional_call(cell, params, (flat[0], (flat[1], flat[2])))\n"
        "    return h_new.reshape(h.shape), c_new.reshape(c.shape)\n"), LSTM_CELL),
    "ch01-decomposition-from-pyc": Route("01-rnn-limits", "lstm_cell_step", "revived", REVIVE + (
        "_f = _from_pyc(_module('_decomp.decompositions'), 'lstm_cell')\n\n\n"
        "def _cell(x, h, c, W_xh, W_hh, b):\n    return _f(x @ W_xh + b, h, c, W_hh.T, None, None, -1)\n"), LSTM_CELL),
    "ch01-reduce-getattr": Route("01-rnn-limits", "lstm_cell_step", "computed", "", (
        "import functools\n\n\ndef lstm_cell_step(x, h, c, W_xh, W_hh, b):\n"
        "    cell = functools.reduce(getattr, ('_' + 'decomp', 'decompositions', 'lstm' + '_cell'), torch)\n"
        "    return cell(x @ W_xh + b, h, c, W_hh.T, None, None, -1)\n")),
    # --- chapter 02: softmax ------------------------------------------------------------------------------------
    "ch02-one-hot-categorical": Route("02-qkv-attention", "stable_softmax", "implementation", (
        "import torch\n\n\ndef _sm(x, dim):\n"
        "    return torch.distributions.OneHotCategorical(logits=x.movedim(dim, -1)).probs.movedim(-1, dim)\n"), SOFTMAX_CELL),
    "ch02-log-softmax-from-pyc": Route("02-qkv-attention", "stable_softmax", "revived", REVIVE + (
        "_f = _from_pyc(_module('_refs'), 'log_softmax')\n\n\ndef _sm(x, dim):\n    return _f(x, dim, None).exp()\n"), SOFTMAX_CELL),
    "ch02-reduce-getattr": Route("02-qkv-attention", "stable_softmax", "computed", "", (
        "import functools\n\n\ndef stable_softmax(x, dim=-1):\n"
        "    return functools.reduce(getattr, ('_' + 'refs', 'special', 'soft' + 'max'), torch)(x, dim)\n")),
    # --- chapter 03: the attention steps' softmax --------------------------------------------------------------
    "ch03-decomposition-by-attrgetter": Route("03-worked-examples", "attention_steps", "implementation", (
        "import operator, torch\n_d = operator.attrgetter('_' + 'decomp.decompositions.' + '_soft' + 'max')(torch)\n\n\n"
        "def _sm(x, dim):\n    return _d(x, dim, False)\n"), "", ("stable_softmax(scaled, dim=-1)", "_sm(scaled, -1)")),
    "ch03-decomposition-from-source": Route("03-worked-examples", "attention_steps", "revived", REVIVE + (
        "_f = _from_source(_module('_decomp.decompositions'), '_soft' + 'max')\n\n\n"
        "def _sm(x, dim):\n    return _f(x, dim, False)\n"), "", ("stable_softmax(scaled, dim=-1)", "_sm(scaled, -1)")),
    "ch03-sys-modules-vars": Route("03-worked-examples", "attention_steps", "computed", "", "",
                                   ("stable_softmax(scaled, dim=-1)", "vars(__import__('sys').modules['torch.' + '_refs'])['soft' + 'max'](scaled, -1)")),
    # --- chapter 04: the SelfAttention's softmax ----------------------------------------------------------------
    "ch04-refs-functional": Route("04-multi-head", "SelfAttention", "implementation", (
        "import operator, torch\n_sm = operator.attrgetter('_' + 'refs.nn.functional.soft' + 'max')(torch)\n"), "",
        ("stable_softmax(energy / self.head_dim**0.5, dim=3)", "_sm(energy / self.head_dim**0.5, 3)")),
    "ch04-renamed-copy": Route("04-multi-head", "SelfAttention", "revived", REVIVE + (
        "_f = _from_pyc(_module('_refs'), 'soft' + 'max', rename=True)\n\n\ndef _sm(x, dim):\n    return _f(x, dim, None)\n"), "",
        ("stable_softmax(energy / self.head_dim**0.5, dim=3)", "_sm(energy / self.head_dim**0.5, 3)")),
    "ch04-builtins-getattr": Route("04-multi-head", "SelfAttention", "computed", "", "",
                                   ("stable_softmax(energy / self.head_dim**0.5, dim=3)",
                                    "__import__('builtins').getattr(torch.special, 'soft' + 'max')(energy / self.head_dim**0.5, 3)")),
    # --- chapter 05: masked attention (SDPA forbidden; softmax allowed) -----------------------------------------
    "ch05-flex-attention": Route("05-masks", "masked_attention", "implementation", "import math, torch\n" + FLEX + (
        "\n\ndef _attend(q, k, v, mask, fill):\n    return _flex(q, k, v, mask, fill)\n"), MASKED_CELL),
    "ch05-sdpa-decomposition-from-pyc": Route("05-masks", "masked_attention", "revived", "import math\n" + REVIVE + (
        "_f = _from_pyc(_module('_decomp.decompositions'), 'scaled_dot_product_flash_attention_for_cpu')\n\n\n"
        "def _attend(q, k, v, mask, fill):\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, fill)\n"
        "    lead = scores.shape[:-2]\n"
        "    v4 = v.expand(*lead, *v.shape[-2:]).reshape(-1, 1, *v.shape[-2:])\n"
        "    zeros = v4.new_zeros(v4.shape[0], 1, scores.size(-2), v4.size(-1))  # the scores come in the mask\n"
        "    out, w = _f(zeros, torch.zeros_like(v4), v4, 0.0, False, attn_mask=scores.reshape(-1, 1, *scores.shape[-2:]), scale=1.0)\n"
        "    nan = 0 * scores.amax(-1, keepdim=True)  # NaN where every key is masked with -inf (torch's gives 0)\n"
        "    return out.reshape(*lead, *out.shape[-2:]) + nan, w.reshape(scores.shape) + nan\n"), MASKED_CELL),
    "ch05-attrgetter-in-solution": Route("05-masks", "masked_attention", "computed", "", (
        "import math, operator\n\n\ndef masked_attention(q, k, v, mask=None, fill_value=float('-inf')):\n"
        "    if mask is not None and mask.dtype != torch.bool:\n        raise TypeError('mask must be a bool tensor')\n"
        "    sdpa = operator.attrgetter('_' + 'decomp.decompositions.scaled_dot_product_flash_attention_for_cpu')(torch)\n"
        "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
        "    if mask is not None:\n        scores = scores.masked_fill(~mask, fill_value)\n"
        "    lead = scores.shape[:-2]\n"
        "    v4 = v.expand(*lead, *v.shape[-2:]).reshape(-1, 1, *v.shape[-2:])\n"
        "    zeros = v4.new_zeros(v4.shape[0], 1, scores.size(-2), v4.size(-1))  # the scores come in the mask\n"
        "    out, w = sdpa(zeros, torch.zeros_like(v4), v4, attn_mask=scores.reshape(-1, 1, *scores.shape[-2:]))\n"
        "    nan = 0 * scores.amax(-1, keepdim=True)  # NaN where every key is masked with -inf (torch's gives 0)\n"
        "    return out.reshape(*lead, *out.shape[-2:]) + nan, w.reshape(scores.shape) + nan\n")),
    # --- chapter 07: layer norm ---------------------------------------------------------------------------------
    "ch07-refs-layer-norm": Route("07-ffn-layernorm", "layer_norm", "implementation", (
        "import operator, torch\n_f = operator.attrgetter('_' + 'refs.nn.functional.layer' + '_norm')(torch)\n\n\n"
        "def _ln(x, weight, bias, eps):\n    return _f(x, (x.size(-1),), weight, bias, eps)\n"), LAYER_NORM_CELL),
    "ch07-native-layer-norm-from-pyc": Route("07-ffn-layernorm", "layer_norm", "revived", REVIVE + (
        "_f = _from_pyc(_module('_refs'), 'native_layer' + '_norm')\n\n\n"
        "def _ln(x, weight, bias, eps):\n    return _f(x, (x.size(-1),), weight, bias, eps)[0]\n"), LAYER_NORM_CELL),
    "ch07-sys-modules-dict": Route("07-ffn-layernorm", "layer_norm", "computed", "", (
        "import sys\n\n\ndef layer_norm(x, weight, bias, eps=1e-5):\n"
        "    f = sys.modules['torch.' + '_refs'].__dict__['native_layer' + '_norm']\n"
        "    return f(x, (x.size(-1),), weight, bias, eps)[0]\n")),
    # --- chapter 09: one attention step with a KV cache (SDPA forbidden) ----------------------------------------
    "ch09-flex-attention": Route("09-complexity-kv-cache", "attention_step", "implementation", "import math, torch\n" + FLEX, "",
                                 (STEP_ANCHOR, "_flex(q_new, k_new, v_new, mask, float('-inf'))[0]")),
    "ch09-sdpa-decomposition-from-source": Route("09-complexity-kv-cache", "attention_step", "revived", REVIVE + (
        "_f = _from_source(_module('_decomp.decompositions'), 'scaled_dot_product_flash_attention_for_cpu')\n"), "",
        (STEP_ANCHOR, "_f(q_new, k_new, v_new, attn_mask=torch.zeros(mask.shape, dtype=q_new.dtype).masked_fill(~mask, "
                      "float('-inf')))[0]")),
    "ch09-reduce-getattr": Route("09-complexity-kv-cache", "attention_step", "computed", "", "",
                                 (STEP_ANCHOR, "__import__('functools').reduce(getattr, ('_' + 'decomp', 'decompositions', "
                                               "'scaled_dot_product_flash_attention_for_cpu'), torch)(q_new, k_new, v_new, "
                                               "attn_mask=torch.zeros(mask.shape, dtype=q_new.dtype).masked_fill(~mask, "
                                               "float('-inf')))[0]")),
}

# Good-faith code the static reading notes at most as a hint: each keeps full marks.
GOOD_FAITH = {
    # getattr on the learner's own module: not even a hint.
    "ch08-decoder-norms-by-name": ("08-encoder-decoder", "DecoderLayer", [
        ("x = self.norm1(x + self._self_block(x, tgt_mask))", "x = getattr(self, f'norm{1}')(x + self._self_block(x, tgt_mask))"),
        ("x = self.norm2(x + self._cross_block(x, memory, memory_mask))",
         "x = getattr(self, f'norm{2}')(x + self._cross_block(x, memory, memory_mask))"),
    ]),
    # A computed name on torch's nn namespace (a hint in the feedback, no points lost).
    "ch08-decoder-layer-norm-class-by-name": ("08-encoder-decoder", "DecoderLayer", [
        ("self.norm1 = nn.LayerNorm(d_model)", "self.norm1 = getattr(nn, 'Layer' + 'Norm')(d_model)"),
    ]),
    # getattr(F, activation): ordinary code for an activation chosen by name (a hint, no points lost).
    "ch07-feedforward-activation-by-name": ("07-ffn-layernorm", "FeedForward", [
        ('h = F.relu(h) if self.activation == "relu" else F.gelu(h)', "h = getattr(F, self.activation)(h)"),
    ]),
}

CHAPTER_MODULES = {"01-rnn-limits": "ch01_rnn_limits", "02-qkv-attention": "ch02_qkv_attention", "03-worked-examples": "ch03_worked_examples",
                   "04-multi-head": "ch04_multi_head", "05-masks": "ch05_masks", "07-ffn-layernorm": "ch07_ffn_layernorm",
                   "08-encoder-decoder": "ch08_encoder_decoder", "09-complexity-kv-cache": "ch09_complexity_kv_cache"}


def _cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def solution_source(route, reference):
    """The new source of the route's solution cell, given the reference's."""
    if route.replace:
        anchor, replacement = route.replace
        assert anchor in reference, f"{route.grade_id}: the reference no longer contains {anchor!r}"
        return reference.replace(anchor, replacement)
    return route.solution


def route_notebook(route):
    import nbformat

    from autograder.authoring import demo

    nb = demo.filled_submission(route.chapter)
    cell = _cell(nb, route.grade_id)
    cell.source = solution_source(route, cell.source)
    if route.helper:
        index = 1 + next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "imports")
        nb.cells.insert(index, nbformat.v4.new_code_cell(route.helper))
    return nb


def good_faith_notebook(name):
    from autograder.authoring import demo

    chapter, grade_id, edits = GOOD_FAITH[name]
    nb = demo.filled_submission(chapter)
    cell = _cell(nb, grade_id)
    for anchor, replacement in edits:
        assert anchor in cell.source, f"{name}: the reference no longer contains {anchor!r}"
        cell.source = cell.source.replace(anchor, replacement)
    return nb
