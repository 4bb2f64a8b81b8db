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

Every chapter with forbidden built-ins has at least three routes per category, each a different torch function or a
different way of reaching or reviving it (ROUTES and PACKS together). tests/test_evasion_batch.py grades them all through the real CLI, warm and cold, and shows each computes the right
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


# --- Packed routes: one notebook per chapter and category, a different route in each of several exercises ----------
# Grading a notebook warm costs about a second whatever it holds, so the second and third routes of a category sit
# together in one notebook, each in its own exercise, and each routed exercise must earn nothing on its own: the
# routed exercises do not call one another (self_attention computes its attention itself, attention_step its mask).

def lit(name):
    """A string literal for `name` built in two parts, so that neither torch's private names nor a forbidden
    built-in's name is written out in the cell (the static reading would refuse those for every exercise)."""
    return f"{name[:2]!r} + {name[2:]!r}"


# More ways to revive torch's code: a function copied from its code object, its source text run again, its module's
# file loaded again as a new module.
REVIVE_MORE = '''import ast, importlib, importlib.util, inspect, operator, types, torch


def _copied(function):
    copy = types.FunctionType(function.__code__, function.__globals__, "mine", function.__defaults__, function.__closure__)
    copy.__kwdefaults__ = function.__kwdefaults__
    return copy


def _exec_source(module, name):
    text = inspect.getsource(module)
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    space = dict(vars(module))
    exec(ast.get_source_segment(text, node), space)
    return space[name]


def _module_again(module):
    spec = importlib.util.spec_from_file_location(module.__name__.rsplit(".", 1)[0] + ".mine", module.__file__)
    again = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(again)
    return again
'''

# self_attention and a MultiHeadAttention written with the softmax of a route `{sm}` (no call to the learner's own
# scaled_dot_product_attention, so that each routed exercise fails or succeeds on its own route).
SELF_ATTENTION_ANCHOR = "return scaled_dot_product_attention(q, k, v, mask)"
SELF_ATTENTION = ("if mask is not None and mask.dtype != torch.bool:\n"
                  "        raise TypeError('mask must be a bool tensor')\n"
                  "    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
                  "    if mask is not None:\n        s = s.masked_fill(~mask, float('-inf'))\n"
                  "    w = {sm}\n    return w @ v, w")
SDPA_ANCHOR = "stable_softmax(scores, dim=-1)"
MHA_ANCHOR = "scaled_dot_product_attention(q, k, v, mask)  # (B, H, Tq, d_k), (B, H, Tq, Tk)"
MHA_ATTEND = ("(lambda s: (lambda w: (w @ v, w))({sm}))(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5 if mask is None else "
              "(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).masked_fill(~mask, float('-inf')))")
SELF_ANCHOR = "stable_softmax(energy / self.head_dim**0.5, dim=3)"
ENCODER_ANCHOR = "x = self.norm1(x + self._attn_branch(x, mask))"
ENCODER_NORM = "x = (lambda t, n: {ln}(t, (t.size(-1),), n.weight, n.bias, n.eps)[0])(x + self._attn_branch(x, mask), self.norm1)"
LOSS_ANCHOR = "-(q * torch.log_softmax(logits, dim=-1)).sum(dim=-1)"
LOSS = "(lambda lp: (1.0 - eps) * {nll} - eps * lp.mean(-1))(torch.log_softmax(logits, dim=-1))"
STEP_MASK_ANCHOR = "causal_mask_with_offset(s, total - s, device=q_new.device)"
STEP_MASK = "torch.ones(s, total, dtype=torch.bool, device=q_new.device).tril(diagonal=total - s)"
MASK_OFFSET_ANCHOR = "torch.ones(n_new, n_past + n_new, dtype=torch.bool, device=device).tril(diagonal=n_past)"
SQUARE = "_ge" + "nerate_square_subsequent_mask"
SDPA_CPU = "scaled_dot_product_flash_attention_for_cpu"
# attention_step's output from torch's SDPA decomposition `{f}` (the mask as an additive one).
STEP_SDPA = ("{f}(q_new, k_new, v_new, attn_mask=torch.zeros(mask.shape, dtype=q_new.dtype).masked_fill(~mask, "
             "float('-inf')))[0]")

# The DecoderLayer's self-attention through torch's multi_head_attention_forward `f`, on the learner's parameters.
MHA_ADAPTER = '''

def _torch_mha(f, attn, query, key, value, mask):
    (B, Tq, D), Tk, H = query.shape, key.size(1), attn.n_heads
    additive = None if mask is None else (~mask.expand(B, H, Tq, Tk)).reshape(B * H, Tq, Tk)
    w_in = torch.cat([attn.w_q.weight, attn.w_k.weight, attn.w_v.weight])
    b_in = torch.cat([attn.w_q.bias, attn.w_k.bias, attn.w_v.bias])
    out, w = f(query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), D, H, w_in, b_in, None, None, False, 0.0,
               attn.w_o.weight, attn.w_o.bias, training=False, key_padding_mask=None, need_weights=True, attn_mask=additive,
               use_separate_proj_weight=False, q_proj_weight=None, k_proj_weight=None, v_proj_weight=None, static_k=None,
               static_v=None, average_attn_weights=False, is_causal=False)
    return out.transpose(0, 1), w
'''
DECODER_ANCHOR = "out, w = self.self_attn(x, x, x, mask)"
DECODER_ROUTE = "out, w = _torch_mha({f}, self.self_attn, x, x, x, mask)"


@dataclass(frozen=True)
class Pack:
    chapter: str
    category: str
    helper: str  # a cell the learner added after the imports
    edits: tuple  # ((grade_id, anchor, replacement), ...): the routed exercises are their grade_ids

    @property
    def routed(self):
        return tuple(dict.fromkeys(gid for gid, _, _ in self.edits))


def _refs(path):
    return f"importlib.import_module('torch.' + {lit(path)})"


PACKS = {
    # --- chapter 02: softmax in scaled_dot_product_attention and self_attention --------------------------------
    "ch02-pack-implementation": Pack("02-qkv-attention", "implementation", (
        "import importlib, torch\n_special = " + _refs("_refs.special") + "\n"
        "_table = " + _refs("_decomp") + ".decomposition_table\n"), (
        ("scaled_dot_product_attention", SDPA_ANCHOR, "_special.softmax(scores, -1)"),
        ("self_attention", SELF_ATTENTION_ANCHOR,
         SELF_ATTENTION.format(sm="_table[torch.ops.aten._log_softmax.default](s, -1, False).exp()")))),
    "ch02-pack-revived": Pack("02-qkv-attention", "revived", REVIVE_MORE + (
        "_copy = _copied(operator.attrgetter(" + lit("_refs.softmax") + ")(torch))\n"
        "_again = _exec_source(" + _refs("_decomp.decompositions") + ", " + lit("_log_softmax") + ")\n"), (
        ("scaled_dot_product_attention", SDPA_ANCHOR, "_copy(scores, -1, None)"),
        ("self_attention", SELF_ATTENTION_ANCHOR, SELF_ATTENTION.format(sm="_again(s, -1, False).exp()")))),
    "ch02-pack-computed": Pack("02-qkv-attention", "computed", "", (
        ("scaled_dot_product_attention", SDPA_ANCHOR,
         "dict(__import__('inspect').getmembers(__import__('sys').modules['torch.' + " + lit("_refs") + "]))[" + lit("softmax")
         + "](scores, -1, None)"),
        ("self_attention", SELF_ATTENTION_ANCHOR, SELF_ATTENTION.format(
            sm="__import__('operator').methodcaller('__getattribute__', " + lit("log_softmax") + ")(torch.__dict__[" + lit("_refs")
               + "])(s, -1, None).exp()")))),
    # --- chapter 04: MultiHeadAttention's attention and SelfAttention's softmax ----------------------------------
    "ch04-pack-implementation": Pack("04-multi-head", "implementation", (
        "import importlib, torch\n_special = " + _refs("_refs.special") + "\n"
        "_table = " + _refs("_decomp") + ".decomposition_table\n"), (
        ("MultiHeadAttention", MHA_ANCHOR, MHA_ATTEND.format(sm="_table[torch.ops.aten._softmax.default](s, -1, False)")),
        ("SelfAttention", SELF_ANCHOR, "_special.log_softmax(energy / self.head_dim**0.5, 3).exp()"))),
    "ch04-pack-revived": Pack("04-multi-head", "revived", REVIVE_MORE + (
        "_copy = _copied(operator.attrgetter(" + lit("_decomp.decompositions._softmax") + ")(torch))\n"
        "_again = _exec_source(" + _refs("_refs") + ", " + lit("softmax") + ")\n"), (
        ("MultiHeadAttention", MHA_ANCHOR, MHA_ATTEND.format(sm="_copy(s, -1, False)")),
        ("SelfAttention", SELF_ANCHOR, "_again(energy / self.head_dim**0.5, 3)"))),
    "ch04-pack-computed": Pack("04-multi-head", "computed", "", (
        ("MultiHeadAttention", MHA_ANCHOR, MHA_ATTEND.format(
            sm="__import__('importlib').import_module('torch.' + " + lit("_refs") + ").__dict__[" + lit("softmax") + "](s, -1, None)")),
        ("SelfAttention", SELF_ANCHOR, "__import__('operator').attrgetter(" + lit("_refs.special.log_softmax")
         + ")(torch)(energy / self.head_dim**0.5, 3).exp()"))),
    # --- chapter 07: layer norm inside EncoderLayer, the loss inside label_smoothed_cross_entropy ----------------
    "ch07-pack-implementation": Pack("07-ffn-layernorm", "implementation", (
        "import importlib, torch\n_table = " + _refs("_decomp") + ".decomposition_table\n"
        "_nll = " + _refs("_refs.nn.functional") + ".nll_loss\n"), (
        ("EncoderLayer", ENCODER_ANCHOR, ENCODER_NORM.format(ln="_table[torch.ops.aten.native_layer_norm.default]")),
        ("label_smoothed_cross_entropy", LOSS_ANCHOR, LOSS.format(nll="_nll(lp, safe, reduction='none')")))),
    "ch07-pack-revived": Pack("07-ffn-layernorm", "revived", REVIVE_MORE + (
        "_again = _exec_source(" + _refs("_refs") + ", " + lit("native_layer_norm") + ")\n"
        "_copy = _copied(operator.attrgetter(" + lit("_decomp.decompositions.nll_loss_forward") + ")(torch))\n"), (
        ("EncoderLayer", ENCODER_ANCHOR, ENCODER_NORM.format(ln="_again")),
        ("label_smoothed_cross_entropy", LOSS_ANCHOR, LOSS.format(nll="_copy(lp, safe, None, 0, -100)[0]")))),
    "ch07-pack-computed": Pack("07-ffn-layernorm", "computed", "", (
        ("EncoderLayer", ENCODER_ANCHOR, ENCODER_NORM.format(
            ln="__import__('builtins').vars(__import__('importlib').import_module('torch.' + " + lit("_refs") + "))[" + lit("native_layer_norm") + "]")),
        ("label_smoothed_cross_entropy", LOSS_ANCHOR, LOSS.format(
            nll="__import__('functools').reduce(getattr, (" + lit("_refs") + ", 'nn', 'functional', " + lit("nll_loss")
                + "), torch)(lp, safe, reduction='none')")))),
    # --- chapter 09: causal_mask_with_offset and attention_step --------------------------------------------------
    "ch09-pack-implementation": Pack("09-complexity-kv-cache", "implementation", (
        "import torch\nfrom torch.nn import Transformer as _T\n"
        "_table = __import__('importlib').import_module('torch.' + " + lit("_decomp") + ").decomposition_table\n"
        "_sdpa = _table[getattr(torch.ops.aten, '_' + " + lit(SDPA_CPU) + ").default]\n"), (
        ("causal_mask_with_offset", MASK_OFFSET_ANCHOR, "(_T.generate_square_subsequent_mask(n_past + n_new)[n_past:] == 0).to(device)"),
        ("attention_step", STEP_MASK_ANCHOR, STEP_MASK),
        ("attention_step", STEP_ANCHOR, STEP_SDPA.format(f="_sdpa")))),
    "ch09-pack-revived": Pack("09-complexity-kv-cache", "revived", REVIVE_MORE + (
        # (the copy first: the module loaded again is refused, and a refused line ends the cell)
        "_sdpa = _copied(operator.attrgetter(" + lit("_decomp.decompositions." + SDPA_CPU) + ")(torch))\n"
        "_transformer = _module_again(importlib.import_module('torch.nn.modules.transformer'))\n"), (
        ("causal_mask_with_offset", MASK_OFFSET_ANCHOR, "(getattr(_transformer, " + lit(SQUARE) + ")(n_past + n_new)[n_past:] == 0).to(device)"),
        ("attention_step", STEP_MASK_ANCHOR, STEP_MASK),
        ("attention_step", STEP_ANCHOR, STEP_SDPA.format(f="_sdpa")))),
    "ch09-pack-computed": Pack("09-complexity-kv-cache", "computed", "", (
        ("causal_mask_with_offset", MASK_OFFSET_ANCHOR,
         "(vars(__import__('importlib').import_module('torch.nn.modules.' + 'transformer'))[" + lit(SQUARE)
         + "](n_past + n_new)[n_past:] == 0).to(device)"),
        ("attention_step", STEP_MASK_ANCHOR, STEP_MASK),
        ("attention_step", STEP_ANCHOR, STEP_SDPA.format(
            f="__import__('operator').attrgetter(" + lit("_decomp.decompositions." + SDPA_CPU) + ")(torch)")))),
    # --- chapter 08: the DecoderLayer's self-attention through torch's multi_head_attention_forward --------------
    "ch08-decoder-mha-forward": Pack("08-encoder-decoder", "implementation",
                                     "import importlib, torch\n_mhaf = importlib.import_module('torch.nn.functional').multi_head_attention_forward\n"
                                     + MHA_ADAPTER, (("DecoderLayer", DECODER_ANCHOR, DECODER_ROUTE.format(f="_mhaf")),)),
    "ch08-decoder-mha-forward-from-pyc": Pack("08-encoder-decoder", "revived", REVIVE + (
        "_mhaf = _from_pyc(_module('nn.functional'), 'multi_head_attention_forward')\n") + MHA_ADAPTER,
        (("DecoderLayer", DECODER_ANCHOR, DECODER_ROUTE.format(f="_mhaf")),)),
    "ch08-decoder-mha-forward-reduce-getattr": Pack("08-encoder-decoder", "computed", "import torch\n" + MHA_ADAPTER, (
        ("DecoderLayer", DECODER_ANCHOR, DECODER_ROUTE.format(
            f="__import__('functools').reduce(getattr, ('nn', 'functional', 'multi_head_' + 'attention_forward'), torch)")),)),
}

# --- More routes for chapters 01, 03, 05 and 08: three per category in each (issue 31) --------------------------------
# These chapters have one routable exercise each (chapter 05's other exercises build masks, whose built-ins the guard
# leaves on there), so each route is one notebook. `lit` keeps torch's private names and the forbidden names out of the
# cells' text, as above.

def _import(path):
    return f"__import__('importlib').import_module('torch.' + {lit(path)})"


# Chapter 01: lstm_cell_step through a recurrent built-in's Python implementation: torch's LSTM decomposition (one
# time step of a one-layer LSTM), or a quantizable LSTM (the layer or its cell) called on the learner's weights.
LSTM_IMPL = '''

def _by_lstm_impl(f, x, h, c, W_xh, W_hh, b):
    flat = [t.reshape(-1, t.size(-1)) for t in (x, h, c)]  # (N, d_in), (N, d_h), (N, d_h)
    params = [W_xh.T, W_hh.T, b, torch.zeros_like(b)]  # PyTorch's weight_ih, weight_hh, bias_ih, bias_hh
    _, h_new, c_new = f(flat[0][None], (flat[1][None], flat[2][None]), params, True, 1, 0.0, False, False, False)
    return h_new[0].reshape(h.shape), c_new[0].reshape(c.shape)


def _by_quantizable(cls, x, h, c, W_xh, W_hh, b, prefix=""):
    module = cls(W_xh.size(0), W_hh.size(0), dtype=x.dtype)
    params = {prefix + 'igates.weight': W_xh.T, prefix + 'igates.bias': b, prefix + 'hgates.weight': W_hh.T,
              prefix + 'hgates.bias': torch.zeros_like(b)}
    flat = [t.reshape(-1, t.size(-1)) for t in (x, h, c)]
    if prefix:  # the layer: a sequence of one step, its state (layers, N, d_h)
        _, (h_new, c_new) = torch.func.functional_call(module, params, (flat[0][None], (flat[1][None], flat[2][None])))
        h_new, c_new = h_new[0], c_new[0]
    else:
        h_new, c_new = torch.func.functional_call(module, params, (flat[0], (flat[1], flat[2])))
    return h_new.reshape(h.shape), c_new.reshape(c.shape)
'''
LSTM_BY = "def lstm_cell_step(x, h, c, W_xh, W_hh, b):\n    return {call}\n"
LAYER_PREFIX = "'layers.0.layer_fw.cell.'"

# Chapter 05: masked_attention's output and weights from an attention built-in that is given the masked scores as its
# additive mask (queries and keys projected to zero, values projected as they are): what it returns is torch's.
MASKED_BY = '''import math, torch


def _scores(q, k, mask, fill):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (..., Tq, Tk)
    return scores if mask is None else scores.masked_fill(~mask, fill)


def _by_mha_forward(f, q, k, v, mask, fill):
    scores = _scores(q, k, mask, fill)
    lead, (Tq, Tk), E = scores.shape[:-2], scores.shape[-2:], v.size(-1)
    v3 = v.expand(*lead, *v.shape[-2:]).reshape(-1, Tk, E).transpose(0, 1)  # (Tk, N, E)
    N = v3.size(1)
    zero, eye = v.new_zeros(E, E), torch.eye(E, dtype=v.dtype, device=v.device)
    out, w = f(v.new_zeros(Tq, N, E), v.new_zeros(Tk, N, E), v3, E, 1, None, v.new_zeros(3 * E), None, None, False, 0.0, eye,
               v.new_zeros(E), training=False, need_weights=True, attn_mask=scores.reshape(N, Tq, Tk),
               use_separate_proj_weight=True, q_proj_weight=zero, k_proj_weight=zero, v_proj_weight=eye,
               average_attn_weights=False)  # (Tq, N, E), (N, 1, Tq, Tk)
    return out.transpose(0, 1).reshape(*lead, Tq, E), w.reshape(scores.shape)


def _by_quantizable_mha(cls, q, k, v, mask, fill):
    scores = _scores(q, k, mask, fill)
    lead, (Tq, Tk), E = scores.shape[:-2], scores.shape[-2:], v.size(-1)
    v3 = v.expand(*lead, *v.shape[-2:]).reshape(-1, Tk, E)  # (N, Tk, E)
    N = v3.size(0)
    module = cls(E, 1, batch_first=True, dtype=v.dtype)
    zero, eye, bias = v.new_zeros(E, E), torch.eye(E, dtype=v.dtype, device=v.device), v.new_zeros(E)
    params = {'linear_Q.weight': zero, 'linear_Q.bias': bias, 'linear_K.weight': zero, 'linear_K.bias': bias,
              'linear_V.weight': eye, 'linear_V.bias': bias, 'out_proj.weight': eye, 'out_proj.bias': bias}
    out, w = torch.func.functional_call(module, params, (v.new_zeros(N, Tq, E), v.new_zeros(N, Tk, E), v3),
                                        {'attn_mask': scores.reshape(N, Tq, Tk), 'average_attn_weights': False})
    return out.reshape(*lead, Tq, E), w.reshape(scores.shape)


def _by_sdpa_for_cpu(f, q, k, v, mask, fill):
    scores = _scores(q, k, mask, fill)
    lead = scores.shape[:-2]
    v4 = v.expand(*lead, *v.shape[-2:]).reshape(-1, 1, *v.shape[-2:])
    zeros = v4.new_zeros(v4.shape[0], 1, scores.size(-2), v4.size(-1))  # the scores come in the mask
    out, w = f(zeros, torch.zeros_like(v4), v4, attn_mask=scores.reshape(-1, 1, *scores.shape[-2:]))
    nan = 0 * scores.amax(-1, keepdim=True)  # NaN where every key is masked with -inf (torch's gives 0)
    return out.reshape(*lead, *out.shape[-2:]) + nan, w.reshape(scores.shape) + nan
'''
MASKED_BY_CELL = ("def masked_attention(q, k, v, mask=None, fill_value=float('-inf')):\n"
                  "    if mask is not None and mask.dtype != torch.bool:\n"
                  "        raise TypeError('mask must be a bool tensor')\n"
                  "    return {call}\n")
MHAF = "multi_head_attention_forward"

# Chapter 08: the DecoderLayer's self-attention through nn.MultiheadAttention's own code called on a module of the
# learner's that holds the learner's weights under torch's names (a method of torch's layer called on your own module),
# or through a quantizable MultiheadAttention given the learner's weights.
MHA_OWN = '''import torch
from torch import nn


class _Own(nn.Module):
    """The learner's self-attention weights under the names nn.MultiheadAttention's code reads."""

    def __init__(self, attn):
        super().__init__()
        self.embed_dim = self.kdim = self.vdim = attn.d_model
        self.num_heads, self.head_dim, self.dropout, self.batch_first = attn.n_heads, attn.d_model // attn.n_heads, 0.0, True
        self._qkv_same_embed_dim, self.bias_k, self.bias_v, self.add_zero_attn = True, None, None, False
        self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        self.in_proj_weight = torch.cat([attn.w_q.weight, attn.w_k.weight, attn.w_v.weight])
        self.in_proj_bias = torch.cat([attn.w_q.bias, attn.w_k.bias, attn.w_v.bias])
        self.out_proj = attn.w_o


def _own_mha(forward, attn, x, mask):
    B, T = x.shape[:2]
    refused = None if mask is None else ~mask.expand(B, attn.n_heads, T, T).reshape(-1, T, T)  # torch's: True = may NOT attend
    return forward(_Own(attn).eval(), x, x, x, attn_mask=refused, need_weights=True, average_attn_weights=False)


def _quantizable_mha(cls, attn, x, mask):
    module = cls(attn.d_model, attn.n_heads, dtype=x.dtype)  # sequence first: its batch_first mixes the heads up
    params = {'linear_Q.weight': attn.w_q.weight, 'linear_Q.bias': attn.w_q.bias, 'linear_K.weight': attn.w_k.weight,
              'linear_K.bias': attn.w_k.bias, 'linear_V.weight': attn.w_v.weight, 'linear_V.bias': attn.w_v.bias,
              'out_proj.weight': attn.w_o.weight, 'out_proj.bias': attn.w_o.bias}
    B, T = x.shape[:2]
    additive = None if mask is None else x.new_zeros(B * attn.n_heads, T, T).masked_fill(
        ~mask.expand(B, attn.n_heads, T, T).reshape(-1, T, T), float('-inf'))
    xt = x.transpose(0, 1)  # (T, B, D)
    out, w = torch.func.functional_call(module, params, (xt, xt, xt), {'attn_mask': additive, 'average_attn_weights': False})
    return out.transpose(0, 1), w  # (B, T, D), (B, H, T, T)
'''

ROUTES.update({
    # --- chapter 01 ---------------------------------------------------------------------------------------------
    "ch01-lstm-decomposition-table": Route("01-rnn-limits", "lstm_cell_step", "implementation", (
        "import torch\n_lstm = " + _import("_decomp") + ".decomposition_table[getattr(torch.ops.aten, " + lit("lstm") + ").input]\n"
        + LSTM_IMPL), LSTM_BY.format(call="_by_lstm_impl(_lstm, x, h, c, W_xh, W_hh, b)")),
    "ch01-quantizable-lstm-layer": Route("01-rnn-limits", "lstm_cell_step", "implementation", (
        "import torch\nfrom torch.ao.nn.quantizable import LSTM as _QL\n" + LSTM_IMPL),
        LSTM_BY.format(call="_by_quantizable(_QL, x, h, c, W_xh, W_hh, b, " + LAYER_PREFIX + ")")),
    "ch01-lstm-cell-source-again": Route("01-rnn-limits", "lstm_cell_step", "revived", REVIVE_MORE + (
        "_f = _exec_source(" + _import("_decomp.decompositions") + ", " + lit("lstm_cell") + ")\n"),
        LSTM_BY.format(call="_f(x @ W_xh + b, h, c, W_hh.T, None, None, -1)")),
    "ch01-quantizable-module-again": Route("01-rnn-limits", "lstm_cell_step", "revived", REVIVE_MORE + (
        "_cell_class = getattr(_module_again(importlib.import_module('torch.ao.nn.quantizable.modules.rnn')), " + lit("LSTMCell") + ")\n"
        + LSTM_IMPL), LSTM_BY.format(call="_by_quantizable(_cell_class, x, h, c, W_xh, W_hh, b)")),
    "ch01-getmembers-one-layer": Route("01-rnn-limits", "lstm_cell_step", "computed", "", (
        "import inspect, sys\n\n\ndef lstm_cell_step(x, h, c, W_xh, W_hh, b):\n"
        "    layer = dict(inspect.getmembers(sys.modules['torch.' + " + lit("_decomp.decompositions") + "]))[" + lit("one_layer_lstm") + "]\n"
        "    flat = [t.reshape(-1, t.size(-1)) for t in (x, h, c)]\n"
        "    _, (h_new, c_new) = layer(flat[0][None], (flat[1], flat[2]), [W_xh.T, W_hh.T, b, torch.zeros_like(b)], True)\n"
        "    return h_new.reshape(h.shape), c_new.reshape(c.shape)\n")),
    "ch01-builtins-getattr-quantizable": Route("01-rnn-limits", "lstm_cell_step", "computed", "import torch\n" + LSTM_IMPL, (
        "def lstm_cell_step(x, h, c, W_xh, W_hh, b):\n"
        "    cell = __import__('builtins').getattr(__import__('torch.ao.nn.quantizable').ao.nn.quantizable, " + lit("LSTMCell") + ")\n"
        "    return _by_quantizable(cell, x, h, c, W_xh, W_hh, b)\n")),
    # --- chapter 03 ---------------------------------------------------------------------------------------------
    "ch03-categorical": Route("03-worked-examples", "attention_steps", "implementation", (
        "import torch\n\n\ndef _sm(x, dim):\n"
        "    return torch.distributions.Categorical(logits=x.movedim(dim, -1), validate_args=False).probs.movedim(-1, dim)\n"), "",
        ("stable_softmax(scaled, dim=-1)", "_sm(scaled, -1)")),
    "ch03-refs-softmin": Route("03-worked-examples", "attention_steps", "implementation", (
        "import torch\n_functional = " + _import("_refs.nn.functional") + "\n\n\n"
        "def _sm(x, dim):\n    return _functional.softmin(-x, dim)\n"), "", ("stable_softmax(scaled, dim=-1)", "_sm(scaled, -1)")),
    "ch03-refs-softmax-copied": Route("03-worked-examples", "attention_steps", "revived", REVIVE_MORE + (
        "_copy = _copied(operator.attrgetter(" + lit("_refs.softmax") + ")(torch))\n\n\n"
        "def _sm(x, dim):\n    return _copy(x, dim, None)\n"), "", ("stable_softmax(scaled, dim=-1)", "_sm(scaled, -1)")),
    "ch03-refs-log-softmax-from-pyc-renamed": Route("03-worked-examples", "attention_steps", "revived", REVIVE + (
        "_f = _from_pyc(_module(" + lit("_refs") + "), " + lit("log_softmax") + ", rename=True)\n\n\n"
        "def _sm(x, dim):\n    return _f(x, dim, None).exp()\n"), "", ("stable_softmax(scaled, dim=-1)", "_sm(scaled, -1)")),
    "ch03-reduce-getattr-log-softmax": Route("03-worked-examples", "attention_steps", "computed", "", "", (
        "stable_softmax(scaled, dim=-1)",
        "__import__('functools').reduce(getattr, (" + lit("_refs") + ", 'special', " + lit("log_softmax") + "), torch)(scaled, -1).exp()")),
    "ch03-builtins-getattr-softmin": Route("03-worked-examples", "attention_steps", "computed", "", "", (
        "stable_softmax(scaled, dim=-1)",
        "__import__('builtins').getattr(" + _import("_refs.nn.functional") + ", " + lit("softmin") + ")(-scaled, -1)")),
    # --- chapter 05 ---------------------------------------------------------------------------------------------
    "ch05-sdpa-decomposition-table": Route("05-masks", "masked_attention", "implementation", MASKED_BY + (
        "_sdpa = " + _import("_decomp") + ".decomposition_table[getattr(torch.ops.aten, '_' + " + lit(SDPA_CPU) + ").default]\n"),
        MASKED_BY_CELL.format(call="_by_sdpa_for_cpu(_sdpa, q, k, v, mask, fill_value)")),
    "ch05-quantizable-mha": Route("05-masks", "masked_attention", "implementation", MASKED_BY + (
        "from torch.ao.nn.quantizable import MultiheadAttention as _QM\n"),
        MASKED_BY_CELL.format(call="_by_quantizable_mha(_QM, q, k, v, mask, fill_value)")),
    "ch05-sdpa-decomposition-copied": Route("05-masks", "masked_attention", "revived", MASKED_BY + REVIVE_MORE + (
        "_sdpa = _copied(operator.attrgetter(" + lit("_decomp.decompositions." + SDPA_CPU) + ")(torch))\n"),
        MASKED_BY_CELL.format(call="_by_sdpa_for_cpu(_sdpa, q, k, v, mask, fill_value)")),
    "ch05-quantizable-module-again": Route("05-masks", "masked_attention", "revived", MASKED_BY + REVIVE_MORE + (
        "_mha_class = _module_again(importlib.import_module('torch.ao.nn.quantizable.modules.activation')).MultiheadAttention\n"),
        MASKED_BY_CELL.format(call="_by_quantizable_mha(_mha_class, q, k, v, mask, fill_value)")),
    # Chapter 05's static reading refuses computed access itself (its mask built-ins are refused by reading alone, so
    # a note that hides what the code calls costs the points there): these two are written so that it notes nothing,
    # and the guard decides at run time.
    "ch05-object-getattribute-mha-forward": Route("05-masks", "masked_attention", "computed", MASKED_BY, MASKED_BY_CELL.format(
        call="_by_mha_forward(object.__getattribute__(torch.nn.functional, " + lit(MHAF) + "), q, k, v, mask, fill_value)")),
    "ch05-getmembers-quantizable": Route("05-masks", "masked_attention", "computed", MASKED_BY, (
        "import inspect\nimport torch.ao.nn.quantizable\n\n\n" + MASKED_BY_CELL.format(
            call="_by_quantizable_mha(dict(inspect.getmembers(torch.ao.nn.quantizable))[" + lit("MultiheadAttention")
                 + "], q, k, v, mask, fill_value)"))),
})

PACKS.update({
    # --- chapter 08 ---------------------------------------------------------------------------------------------
    "ch08-decoder-quantizable-mha": Pack("08-encoder-decoder", "implementation",
                                         MHA_OWN + "from torch.ao.nn.quantizable import MultiheadAttention as _QM\n",
                                         (("DecoderLayer", DECODER_ANCHOR, "out, w = _quantizable_mha(_QM, self.self_attn, x, mask)"),)),
    "ch08-decoder-mha-method-on-own-module": Pack("08-encoder-decoder", "implementation",
                                                  MHA_OWN + "_forward = nn.MultiheadAttention.forward\n",
                                                  (("DecoderLayer", DECODER_ANCHOR, "out, w = _own_mha(_forward, self.self_attn, x, mask)"),)),
    "ch08-decoder-mha-forward-copied": Pack("08-encoder-decoder", "revived", REVIVE_MORE + (
        "_mhaf = _copied(torch.nn.functional." + MHAF + ")\n") + MHA_ADAPTER,
        (("DecoderLayer", DECODER_ANCHOR, DECODER_ROUTE.format(f="_mhaf")),)),
    "ch08-decoder-mha-forward-source-again": Pack("08-encoder-decoder", "revived", REVIVE_MORE + (
        "_mhaf = _exec_source(importlib.import_module('torch.nn.functional'), " + lit(MHAF) + ")\n") + MHA_ADAPTER,
        (("DecoderLayer", DECODER_ANCHOR, DECODER_ROUTE.format(f="_mhaf")),)),
    "ch08-decoder-attrgetter-mha-forward": Pack("08-encoder-decoder", "computed", "import torch\n" + MHA_ADAPTER, (
        ("DecoderLayer", DECODER_ANCHOR, DECODER_ROUTE.format(
            f="__import__('operator').attrgetter('nn.functional.' + " + lit(MHAF) + ")(torch)")),)),
    "ch08-decoder-vars-sys-modules-quantizable": Pack("08-encoder-decoder", "computed", MHA_OWN + "import torch.ao.nn.quantizable\n", (
        ("DecoderLayer", DECODER_ANCHOR, "out, w = _quantizable_mha(vars(__import__('sys').modules['torch.ao.nn.quantizable'])["
         + lit("MultiheadAttention") + "], self.self_attn, x, mask)"),)),
    # --- chapter 05: causal_mask from nn.Transformer's mask helper, aliased in a helper cell (an open gap: see OPEN_GAPS)
    "ch05-causal-mask-helper-alias": Pack("05-masks", "implementation", (
        "import torch\nfrom torch.nn import Transformer as _T\n_square = _T.generate_square_subsequent_mask\n"), (
        ("causal_mask", "torch.ones(n, n, dtype=torch.bool, device=device).tril()", "(_square(n) == 0).to(device)"),)),
})


# Routes the guard does not block yet (found by this corpus): {pack: {grade_id: why}}. tests/test_evasion_batch.py
# checks that each still earns its points, so closing one fails that test until the entry is removed here.
OPEN_GAPS = {
}


def pack_source(pack, grade_id, reference):
    """The new source of the solution cell `grade_id` in `pack`, given the reference's."""
    source = reference
    for gid, anchor, replacement in pack.edits:
        if gid == grade_id:
            assert anchor in source, f"{grade_id}: the reference no longer contains {anchor!r}"
            source = source.replace(anchor, replacement)
    return source


def pack_notebook(pack):
    import nbformat

    from autograder.authoring import demo

    nb = demo.filled_submission(pack.chapter)
    for grade_id in pack.routed:
        cell = _cell(nb, grade_id)
        cell.source = pack_source(pack, grade_id, cell.source)
    index = 1 + next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "imports")
    nb.cells.insert(index, nbformat.v4.new_code_cell(pack.helper))
    return nb
