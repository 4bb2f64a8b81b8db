"""The forbidden built-ins, in named groups: the one list every chapter composes its own from.

An exercise asks the learner to write something torch already has (softmax, attention, an RNN, LayerNorm, ...).
Three parts of the grader must then agree on what "the built-in" is, and each reads it from here:
- the judge (checks.outcome): `forbidden(*groups)`, {name: label}, is what Check.forbidden holds; the observers
  of a call (runner._forbidden_modes) note these names, and the judge tells the learner "calls <label>";
- the static reading of a solution cell (grading/shortcuts.py): `shortcut_names(*groups)`;
- the sandbox's guard (runner.arm_guard): `switched_off(forbidden)`, every ATen op of every group that a
  forbidden set touches, plus the Python-level functions and nn.Module classes with no ATen op of their own.
  The runner imports nothing of the course, so these names travel to it in job.json (grading/notebook.py).

A group is a family: built-ins that compute the same thing as one another, by any route (log_softmax gives
softmax, an instance norm on a reshaped input gives a LayerNorm, the fused encoder layer computes multi-head
attention). Forbidding one member forbids the family. Groups are fine-grained so that a chapter can forbid one
thing and keep another its honest code needs (chapter 07's label smoothing uses F.log_softmax, not
F.cross_entropy; its layers use nn.Dropout in eval mode while inverted dropout is the exercise).

Every ATen op named here exists in the course's torch (tests/test_builtins.py checks it). This module imports
no torch: the grading process reads it without loading torch.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Group:
    """One family of built-ins.

    torch_names: the functions as a torch function mode sees them (func.__name__: torch.softmax, F.softmax and
                 Tensor.softmax are all "softmax"); a learner writes them as torch.X, F.X or x.X.
    aten_ops:    every ATen op of the family (as the dispatcher and a dispatch mode see them); the guard switches
                 every kernel of each off.
    python:      Python-level functions with no ATen op of their own (the guard replaces them in F and torch)
                 and nn.Module classes (the guard replaces their forward).
    modules:     nn.Module classes a learner writes (nn.LSTM, nn.LayerNorm): read by the static scan only.
    label:       how a learner writes the built-in, for the judge's "calls <label>"; `labels` overrides it for
                 names a learner writes another way (torch._softmax).
    not_static:  names honest code also writes as attributes (self.dropout = nn.Dropout(p)): left to the
                 dynamic observers and the guard, never refused by the static reading.
    idle_identity: ops (input, p, train) that compute nothing when train is False or p == 0 (they return their
                 input): switched off, they still do that, so nn.Dropout keeps working in eval mode.
    by_name_only: of `modules`, names the guard does not switch off although the group has a Python
                 implementation it does switch off (their module is too costly to load at arming): refused by the
                 static reading alone, so a chapter that refuses them keeps computed access a refusal (static_only).
    """

    name: str
    label: str
    torch_names: tuple
    aten_ops: tuple
    python: tuple = ()
    modules: tuple = ()
    labels: dict = field(default_factory=dict)
    not_static: tuple = ()
    idle_identity: tuple = ()
    by_name_only: tuple = ()

    def names(self):
        """Every name the observers or the guard may report for this group."""
        return tuple(dict.fromkeys(self.torch_names + self.aten_ops + self.python))

    def static(self):
        """The names the static reading refuses: derived from the same entries."""
        return tuple(n for n in dict.fromkeys(self.torch_names + self.python + self.modules) if n not in self.not_static)


SOFTMAX = Group(
    "softmax",
    label="torch.softmax / F.softmax / Tensor.softmax",
    torch_names=("softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax", "special_softmax",
                 "special_log_softmax", "_masked_softmax"),
    aten_ops=("softmax", "_softmax", "_safe_softmax", "_log_softmax", "log_softmax", "special_softmax",
              "special_log_softmax", "_masked_softmax", "_sparse_softmax", "_sparse_log_softmax"),
    # torch's distributions over classes normalise their logits themselves (logits - logits.logsumexp(-1)): a
    # log_softmax of torch's own. torch.logsumexp itself stays allowed (exp(x - logsumexp(x)) is the learner's code).
    python=("Categorical", "OneHotCategorical", "ExpRelaxedCategorical", "RelaxedOneHotCategorical", "Multinomial"),
    labels={"Categorical": "torch.distributions.Categorical", "OneHotCategorical": "torch.distributions.OneHotCategorical",
            "ExpRelaxedCategorical": "torch.distributions.ExpRelaxedCategorical",
            "RelaxedOneHotCategorical": "torch.distributions.RelaxedOneHotCategorical",
            "Multinomial": "torch.distributions.Multinomial","_softmax": "torch._softmax / aten._softmax", "_safe_softmax": "torch._safe_softmax / aten._safe_softmax",
            "log_softmax": "log_softmax", "_log_softmax": "log_softmax", "special_log_softmax": "log_softmax",
            "_sparse_log_softmax": "log_softmax", "special_softmax": "torch.special.softmax",
            "_masked_softmax": "torch._masked_softmax", "_sparse_softmax": "torch.sparse.softmax"},
)

ATTENTION = Group(
    "attention",
    label="F.scaled_dot_product_attention",
    torch_names=("scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_fused_sdp_choice"),
    aten_ops=("scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
              "_efficient_attention_forward", "_flash_attention_forward", "_cudnn_attention_forward",
              "_scaled_dot_product_attention_math_for_mps", "_triton_scaled_dot_attention", "_fused_sdp_choice"),
    # Flex attention computes the same (its eager path is a higher-order operator's Python kernel).
    python=("flex_attention", "flex_attention_backward"),
    labels={"flex_attention": "torch.nn.attention.flex_attention", "flex_attention_backward": "torch.nn.attention.flex_attention"},
)

MULTI_HEAD_ATTENTION = Group(
    "multi_head_attention",
    label="nn.MultiheadAttention",
    torch_names=("multi_head_attention_forward", "_native_multi_head_attention"),
    # The fused encoder layer computes multi-head attention inside (it was in this family before the groups):
    # shared with TRANSFORMER_LAYERS, so it identifies neither group (see groups_touched).
    aten_ops=("_native_multi_head_attention", "_triton_multi_head_attention", "_transformer_encoder_layer_fwd"),
    # The class too: torch.ao.nn.quantizable.MultiheadAttention computes it in Python, from Linear layers and softmax.
    python=("multi_head_attention_forward", "MultiheadAttention"),
    modules=("MultiheadAttention",),
    labels={"MultiheadAttention": "nn.MultiheadAttention"},
)

RECURRENT = Group(
    "recurrent",
    label="nn.RNN / nn.LSTM / nn.GRU",
    torch_names=("rnn_tanh", "rnn_relu", "rnn_tanh_cell", "rnn_relu_cell", "lstm", "lstm_cell", "gru", "gru_cell"),
    aten_ops=("rnn_tanh", "rnn_relu", "rnn_tanh_cell", "rnn_relu_cell", "lstm", "lstm_cell", "_thnn_fused_lstm_cell",
              "gru", "gru_cell", "_thnn_fused_gru_cell", "_cudnn_rnn", "miopen_rnn", "mkldnn_rnn_layer",
              "quantized_lstm_cell", "quantized_gru_cell", "quantized_rnn_tanh_cell", "quantized_rnn_relu_cell"),
    # The classes too: torch.ao.nn.quantizable.LSTMCell computes an LSTM cell in Python from Linear layers.
    python=("RNN", "RNNCell", "LSTM", "LSTMCell", "GRU", "GRUCell", "RNNBase", "RNNCellBase"),
    modules=("RNN", "RNNCell", "LSTM", "LSTMCell", "GRU", "GRUCell"),
    labels={"RNN": "nn.RNN", "RNNCell": "nn.RNNCell", "LSTM": "nn.LSTM", "LSTMCell": "nn.LSTMCell", "GRU": "nn.GRU",
            "GRUCell": "nn.GRUCell", "RNNBase": "nn.RNN / nn.LSTM / nn.GRU", "RNNCellBase": "nn.RNNCell / nn.LSTMCell / nn.GRUCell","rnn_tanh": "nn.RNN", "rnn_relu": "nn.RNN", "rnn_tanh_cell": "nn.RNNCell", "rnn_relu_cell": "nn.RNNCell",
            "quantized_rnn_tanh_cell": "nn.RNNCell", "quantized_rnn_relu_cell": "nn.RNNCell", "lstm": "nn.LSTM",
            "lstm_cell": "nn.LSTMCell", "_thnn_fused_lstm_cell": "nn.LSTMCell", "quantized_lstm_cell": "nn.LSTMCell",
            "gru": "nn.GRU", "gru_cell": "nn.GRUCell", "_thnn_fused_gru_cell": "nn.GRUCell", "quantized_gru_cell": "nn.GRUCell",
            "_cudnn_rnn": "nn.RNN / nn.LSTM (cuDNN)", "miopen_rnn": "nn.RNN / nn.LSTM (MIOpen)",
            "mkldnn_rnn_layer": "nn.LSTM (oneDNN)"},
)

# Chapters 06-09 (asked once, now). Each normalisation below gives LayerNorm's values on a suitably shaped input:
# group norm with one group over (rows, d), instance norm over (rows, 1, d), batch norm in training mode over the
# transposed (d, rows), RMS norm of the centred input. So the family is every mean-and-variance normalisation.
LAYER_NORM = Group(
    "layer_norm",
    label="F.layer_norm / nn.LayerNorm",
    torch_names=("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm",
                 "instance_norm", "batch_norm", "native_batch_norm"),
    aten_ops=("layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm",
              "instance_norm", "batch_norm", "native_batch_norm", "_native_batch_norm_legit",
              "_native_batch_norm_legit_no_training", "_batch_norm_impl_index", "_batch_norm_with_update",
              "_batch_norm_no_update", "cudnn_batch_norm", "miopen_batch_norm"),
    modules=("LayerNorm", "RMSNorm", "GroupNorm", "InstanceNorm1d", "BatchNorm1d"),
    labels={"rms_norm": "F.rms_norm", "_fused_rms_norm": "F.rms_norm", "group_norm": "F.group_norm",
            "native_group_norm": "F.group_norm", "instance_norm": "F.instance_norm", "batch_norm": "F.batch_norm",
            "native_batch_norm": "F.batch_norm", "_native_batch_norm_legit": "F.batch_norm",
            "_native_batch_norm_legit_no_training": "F.batch_norm", "_batch_norm_impl_index": "F.batch_norm",
            "_batch_norm_with_update": "F.batch_norm", "_batch_norm_no_update": "F.batch_norm",
            "cudnn_batch_norm": "F.batch_norm", "miopen_batch_norm": "F.batch_norm"},
)

# F.cross_entropy (with or without label_smoothing) and nn.CrossEntropyLoss reach one composite op,
# cross_entropy_loss, which then calls log_softmax and nll_loss. Neither of those is this family: label smoothing
# by hand is -(q * F.log_softmax(logits)).sum(-1).mean(), and nll_loss is only a gather (its own group below).
CROSS_ENTROPY = Group(
    "cross_entropy",
    label="F.cross_entropy / nn.CrossEntropyLoss",
    torch_names=("cross_entropy", "kl_div"),
    # F.kl_div(log_probs, q) plus the targets' entropy is the cross-entropy with soft targets (label smoothing's).
    aten_ops=("cross_entropy_loss", "kl_div"),
    modules=("CrossEntropyLoss", "KLDivLoss"),
    labels={"kl_div": "F.kl_div / nn.KLDivLoss"},
)

NLL_LOSS = Group(
    "nll_loss",
    label="F.nll_loss / nn.NLLLoss",
    torch_names=("nll_loss",),
    aten_ops=("nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward", "nll_loss2d_forward"),
    modules=("NLLLoss",),
)

# nn.TransformerEncoderLayer reaches _transformer_encoder_layer_fwd only on its fast path (eval, no grad, ...);
# otherwise it is nn.MultiheadAttention, LayerNorm and Linear, so the guard replaces the classes' forward too.
TRANSFORMER_LAYERS = Group(
    "transformer_layers",
    label="nn.TransformerEncoderLayer / nn.TransformerDecoderLayer / nn.Transformer",
    torch_names=("_transformer_encoder_layer_fwd",),
    aten_ops=("_transformer_encoder_layer_fwd",),
    python=("TransformerEncoderLayer", "TransformerDecoderLayer", "TransformerEncoder", "TransformerDecoder", "Transformer"),
    labels={"TransformerEncoderLayer": "nn.TransformerEncoderLayer", "TransformerDecoderLayer": "nn.TransformerDecoderLayer",
            "TransformerEncoder": "nn.TransformerEncoder", "TransformerDecoder": "nn.TransformerDecoder",
            "Transformer": "nn.Transformer"},
)

# F.dropout, nn.Dropout, F.dropout1d/2d/3d, F.alpha_dropout and F.feature_alpha_dropout call these ops whether
# training or not; on the CPU they then decompose into bernoulli_ and mul, so the guard must switch off the entry
# ops themselves. Switched off, they still return their input where they compute nothing (train=False or p == 0):
# a module exercise compared in eval mode may keep its nn.Dropout while inverted dropout is the exercise.
# "dropout" and "Dropout" are what honest code writes (self.dropout = nn.Dropout(p)): not read statically.
DROPOUT = Group(
    "dropout",
    label="F.dropout / nn.Dropout",
    torch_names=("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
                 "native_dropout", "feature_dropout", "_fused_dropout"),
    aten_ops=("dropout", "dropout_", "feature_dropout", "feature_dropout_", "alpha_dropout", "alpha_dropout_",
              "feature_alpha_dropout", "feature_alpha_dropout_", "native_dropout", "_fused_dropout"),
    modules=("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"),
    not_static=("dropout", "Dropout"),
    idle_identity=("dropout", "dropout_", "feature_dropout", "feature_dropout_", "alpha_dropout", "alpha_dropout_",
                   "feature_alpha_dropout", "feature_alpha_dropout_"),
)

# Chapter 05's mask helpers: Python functions and a class with no op of their own (masks are ordinary tensors). The
# guard switches off the one `import torch` loads, the private helper behind nn.Transformer.generate_square_subsequent_mask
# (so every route to it, a copy of its module loaded again included, finds it off); torch.nn.attention.bias (the
# CausalBias helpers) takes seconds to import, too long for arming, so only the static reading refuses those.
CAUSAL_MASKS = Group(
    "causal_masks",
    label="torch's causal mask helpers",
    torch_names=(),
    aten_ops=(),
    python=("_generate_square_subsequent_mask",),
    modules=("causal_lower_right", "causal_upper_left", "CausalBias", "generate_square_subsequent_mask"),
    labels={"_generate_square_subsequent_mask": "nn.Transformer.generate_square_subsequent_mask"},
    by_name_only=("causal_lower_right", "causal_upper_left", "CausalBias"),
)

GROUPS = {g.name: g for g in (SOFTMAX, ATTENTION, MULTI_HEAD_ATTENTION, RECURRENT, LAYER_NORM, CROSS_ENTROPY, NLL_LOSS,
                              TRANSFORMER_LAYERS, DROPOUT, CAUSAL_MASKS)}


def _groups(names):
    unknown = [n for n in names if n not in GROUPS]
    if unknown:
        raise KeyError(f"no group of built-ins named {', '.join(unknown)} (groups: {', '.join(GROUPS)})")
    return [GROUPS[n] for n in names]


def forbidden(*groups) -> dict:
    """{name: how a learner writes it} for the named groups: what Check.forbidden holds (the observers note these
    names; the judge names the label)."""
    out = {}
    for group in _groups(groups):
        for name in group.names():
            out.setdefault(name, group.labels.get(name, group.label))
    return out


def shortcut_names(*groups) -> tuple:
    """The names the static reading of a solution cell refuses, for the named groups."""
    return tuple(dict.fromkeys(n for group in _groups(groups) for n in group.static()))


def groups_touched(names) -> list:
    """The groups a set of forbidden names reaches: those with a name of their own among them (a name two groups
    share, the fused encoder layer, identifies neither)."""
    names = set(names)
    counts = {}
    for group in GROUPS.values():
        for n in group.names():
            counts[n] = counts.get(n, 0) + 1
    return [g for g in GROUPS.values() if any(counts[n] == 1 for n in set(g.names()) & names)]


def switched_off(names) -> list:
    """What the sandbox's guard switches off for a forbidden set: every ATen op and Python-level name of every
    group it touches (sorted; the runner receives this list in job.json)."""
    return sorted({n for g in groups_touched(names) for n in g.aten_ops + g.python})


def idle_identity(names) -> list:
    """Of switched_off(names), the ops that still return their input when they compute nothing (train=False, p=0)."""
    return sorted({n for g in groups_touched(names) for n in g.idle_identity})


def static_only(shortcut_names) -> list:
    """Of the names the static reading refuses, those the guard cannot switch off at run time: every name of a group
    with no ATen op and no Python implementation, and a group's by_name_only names (chapter 05's CausalBias helpers
    compute with ordinary tensor operations in a module too costly to load at arming)."""
    shortcut_names = set(shortcut_names)
    return sorted({n for g in GROUPS.values() for n in g.static()
                   if n in shortcut_names and (not (g.aten_ops or g.python) or n in g.by_name_only)})


def enforced_at_run_time(forbidden, shortcut_names) -> bool:
    """Does the sandbox's guard decide an exercise's rule on its own: it switches something off for the exercise
    (`forbidden`, Check.forbidden) and no name its chapter refuses (`shortcut_names`) is refused by reading alone?
    Then a static note on code that hides what it calls (computed access to torch's or Python's namespaces, eval) is
    a hint in the feedback, not a penalty: what is really called is decided at run time."""
    return bool(switched_off(forbidden)) and not static_only(shortcut_names)
