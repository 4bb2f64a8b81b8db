"""The static reading of learner code (autograder.grading.shortcuts): forbidden built-ins and torch's private
machinery. Each rule is shown to flag the code it is for and to leave ordinary learner code alone."""

import pytest

from autograder.grading import shortcuts

PRIVATE = [
    "with torch._C.DisableTorchFunction():\n    y = torch.softmax(x, -1)",
    "import torch._C as c",
    "from torch._C import DisableTorchFunction",
    "from torch.overrides import _pop_mode_temporarily",
    "from torch.utils._python_dispatch import _disable_current_modes",
    "import torch as t\nt._C._set_torch_function_mode(None)",
    "T = torch\nwith T._C.DisableTorchFunctionSubclass():\n    pass",
    "x = getattr(torch, '_C')",
    "from torch.overrides import TorchFunctionMode\nclass Mine(TorchFunctionMode):\n    pass",
    "guard = DisableTorchFunction()",
]
ORDINARY = [
    "def stable_softmax(x, dim=-1):\n    m = x.amax(dim=dim, keepdim=True)\n    e = torch.exp(x - m)\n    return e / e.sum(dim=dim, keepdim=True)",
    "class MultiHeadAttention(nn.Module):\n    def __init__(self, d):\n        super().__init__()\n        self._cache = None\n        self.w_q = nn.Linear(d, d)",
    "print(torch.softmax(torch.randn(3), -1))  # comparing with the built-in, outside a function",
    "import torch.nn.functional as F\ny = F.relu(torch.randn(2))",
    "s = 'my _private note'",
]


@pytest.mark.parametrize("source", PRIVATE)
def test_private_machinery_is_flagged(source):
    assert shortcuts.private_machinery(source), f"not flagged:\n{source}"


@pytest.mark.parametrize("source", ORDINARY)
def test_ordinary_code_is_not_flagged(source):
    assert shortcuts.private_machinery(source) == []


def test_defined_names_sees_functions_classes_and_assignments():
    source = "import math\ndef f(x):\n    return x\nclass M:\n    pass\ng = f\nh, k = 1, 2\n"
    assert shortcuts.defined_names(source) == {"math", "f", "M", "g", "h", "k"}


def test_forbidden_scan_sees_built_ins_and_hiding():
    names = ("softmax", "scaled_dot_product_attention")
    assert shortcuts.scan("y = torch.softmax(x, -1)", names)
    assert shortcuts.scan("f = getattr(torch, name)", names)
    assert shortcuts.scan("y = x.exp() / x.exp().sum(-1, keepdim=True)", names) == []


def test_group_static_names_refuse_the_built_in_and_leave_honest_attributes_alone():
    from autograder.checks import builtins

    dropout = builtins.shortcut_names("dropout")
    assert shortcuts.scan("y = F.alpha_dropout(x, 0.5)", dropout)
    assert shortcuts.scan("self.drop = nn.Dropout1d(0.1)", dropout)
    assert shortcuts.scan("self.dropout = nn.Dropout(0.1)\ny = self.dropout(x)", dropout) == []  # honest layers write these
    layer_norm = builtins.shortcut_names("layer_norm")
    assert shortcuts.scan("y = F.layer_norm(x, (d,))", layer_norm)
    assert shortcuts.scan("y = layer_norm(x, w, b)", layer_norm) == []  # the learner's own function, by name


# Computed access to torch's or Python's namespaces (issue 31): noted. A learner's own objects: never.
COMPUTED_NAMESPACE = [
    "y = operator.attrgetter('_refs.soft' + 'max')(torch)(x, -1)",
    "from operator import attrgetter\nf = attrgetter('_refs.soft' + 'max')(torch)",
    "import functools\nf = functools.reduce(getattr, ['_refs', 'soft' + 'max'], torch)",
    "import builtins\nf = builtins.getattr(torch, n)",
    "f = vars(torch)[n]",
    "f = vars()[n]",
    "f = torch.__dict__[n]",
    "import sys\nf = sys.modules['torch._re' + 'fs'].softmax",
    "f = getattr(torch, n)",
    "t = torch\nf = getattr(t, 'soft' + 'max')",
    "f = getattr(__import__('torch'), n)",
]
OWN_OBJECTS = [
    "class Layer(nn.Module):\n    def forward(self, x):\n        for i in range(2):\n            x = getattr(self, f'norm{i}')(x)\n        return x",
    "h = self.__dict__['w']",
    "state = {k: v for k, v in vars(self).items() if not k.startswith('_')}",
    "y = getattr(layer, name)(x)",
    "blocks = [getattr(model, f'block{i}') for i in range(3)]",
]


@pytest.mark.parametrize("source", COMPUTED_NAMESPACE)
def test_computed_access_to_a_namespace_is_noted(source):
    assert shortcuts.scan(source, ("softmax",)), f"not noted:\n{source}"


@pytest.mark.parametrize("source", OWN_OBJECTS)
def test_computed_access_to_the_learners_own_objects_is_not_noted(source):
    assert shortcuts.scan(source, ("softmax",)) == [], source


# --- Notes that are hints -------------------------------------------------------------------------------


def test_a_note_on_hidden_calls_is_a_hint_only_where_the_guard_decides_the_rule():
    """Computed access is a hint (no points lost) where the sandbox's guard switches the exercise's built-ins off
    and no name its chapter refuses is refused by reading alone; a forbidden name written out is never a hint."""
    from autograder.checks import builtins, ch02_qkv_attention as ch02, ch05_masks as ch05, ch08_encoder_decoder as ch08

    computed = shortcuts.scan("def f(x):\n    return getattr(F, name)(x)", ch02.SHORTCUT_NAMES)
    assert computed and all(shortcuts.hides(n) for n in computed), computed
    named = shortcuts.scan("def f(x):\n    return torch.softmax(x, -1)", ch02.SHORTCUT_NAMES)
    assert named and not any(shortcuts.hides(n) for n in named), named
    assert builtins.enforced_at_run_time(ch02.FORBIDDEN, ch02.SHORTCUT_NAMES)
    assert builtins.enforced_at_run_time(ch08.FORBIDDEN, ch08.SHORTCUT_NAMES)
    # Chapter 05's mask helpers compute with ordinary tensor operations: the guard cannot switch them off, so a
    # computed name that could reach one stays refused by reading; an exercise that forbids nothing has no guard.
    assert builtins.static_only(ch05.SHORTCUT_NAMES)
    assert not builtins.enforced_at_run_time(ch05.FORBIDDEN, ch05.SHORTCUT_NAMES)
    assert not builtins.enforced_at_run_time({}, ch02.SHORTCUT_NAMES)
