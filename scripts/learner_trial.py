"""The learner trial of issue 30: new answers to chapters 06-09, written as learners would, graded through the
real CLI on two seeds, and a table of what each learner saw.

The answers are the chapters' test data (autograder/source/<chapter>/answers.py: WRONG_ANSWERS and VALID_ANSWERS,
which the chapter contract keeps); TRIAL below names the ones this trial added. Each is one notebook: the chapter's
blank student notebook with every solution cell filled in with the reference plus the answer's edits (as
scripts/grading_corpus.py and the demo build them), graded by `python -m autograder grade` on each seed.

Verdict per case and seed:
  valid  full marks on every graded cell, else "REFUSED";
  wrong  its own cells (the answer's failing_cells) lose points, every other cell keeps full marks, else
         "REWARDED" (a failing cell kept its points) or "DOUBLE PENALTY" (another cell lost points).

    python scripts/learner_trial.py [--chapter 06-positional-encoding ...] [--seeds 1 2] [--markdown]
Exit status 1 when any case is not as expected.
"""

import argparse
import csv
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder import registry
from autograder.authoring import demo

# The answers the trial added to each chapter's test data (wrong: WRONG_ANSWERS; valid: VALID_ANSWERS).
TRIAL = {
    "06-positional-encoding": [
        "rope_positions_in_float32", "rope_cast_before_angles", "layer_table_in_float32", "layer_dropout_before_adding",
        "rotation_wrong_rope_right", "alibi_queries_at_start", "pe_positions_from_one",
        "pe_outer_product_stack", "layer_table_as_plain_slice_then_dropout_module", "rope_einsum_rotation_blocks",
        "rope_via_rotation_matrix_per_position", "alibi_slopes_by_broadcast_abs_diff",
        "rope_rotates_backwards", "layer_rows_cast_to_float32", "alibi_slopes_reversed", "rotation_base_ignored",
        "rotation_loop_blocks_preallocated", "alibi_nested_loops",
    ],
    "07-ffn-layernorm": [
        "ln_weight_and_bias_both_or_none", "ff_dropout_on_output", "ff_relu_whatever_activation", "enc_ff_branch_not_dropped",
        "enc_attention_branch_dropped_twice", "ff_wrong_but_layer_right", "ls_mean_over_all_positions", "noam_max_not_min",
        "drop_rescaled_by_p",
        "ff_sequential_forward", "ln_var_mean_builtin", "enc_getattr_norms", "enc_norms_also_in_a_module_list",
        "ls_log_softmax_gather", "drop_float_mask_from_generator", "ff_activation_by_name",
    ],
    "08-encoder-decoder": [
        "train_own_sgd_always", "train_no_zero_grad", "train_loss_after_step", "greedy_src_mask_not_in_decode",
        "greedy_src_mask_not_in_encode", "decoder_dropout_after_residual", "decoder_ff_input_dropped", "count_final_norm_once",
        "decoder_getattr_sublayers", "decoder_norms_also_in_a_module_list", "train_step_zero_first_sum_over_real_tokens",
        "greedy_preallocated", "count_from_own_decoder_layer", "train_eps_ignored",
        "train_class_dim_second_model_zero_grad", "count_per_layer_loop", "train_losses_preallocated_float32",
        "greedy_leaves_eval_mode", "greedy_train_at_end",
    ],
    "09-complexity-kv-cache": [
        "cache_append_returns_whole_buffer", "matmul_flops_true_division", "step_scaled_by_d_k",
        "mask_wrong_step_right", "bytes_batch_ignored", "generate_prompt_each_step",
        "matmul_flops_by_loop", "cache_index_copy", "mask_by_arange_compare", "step_scaled_queries_where", "bytes_by_math_prod",
        "attn_out_proj_always", "attn_n_kv_ignored", "generate_logits_softmaxed", "matmul_batch_ignored_attention_right",
        "generate_preallocated_ids", "step_manual_softmax",
    ],
}


def trial_notebooks(chapters) -> dict:
    """{(case, chapter): (kind, notebook, failing cells or None)} for the TRIAL names that the test data holds."""
    out = {}
    for chapter in chapters:
        wrong, valid = demo.catalogue(chapter), demo.valid_answers(chapter)
        for name in TRIAL.get(chapter, []):
            if name in wrong:
                out[(name, chapter)] = ("wrong", demo.filled_submission(chapter, [name]), wrong[name].failing_cells)
            elif name in valid:
                out[(name, chapter)] = ("valid", demo.filled_submission(chapter, valid=[name]), None)
    return out


def grade(notebooks: dict, seed: int, tmp: Path) -> dict:
    """{(case, chapter): {cell: (score, max, first line of the message)}} from the real CLI on `seed`."""
    submissions, workdir = tmp / f"submissions-{seed}", tmp / f"work-{seed}"
    for (case, chapter), (_, nb, _) in notebooks.items():
        path = submissions / case / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, path)
    command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--seed", str(seed)]
    result = subprocess.run(command, capture_output=True, text=True)
    if not (workdir / "summary.csv").exists():
        raise SystemExit(f"grading failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    rows = {}
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if not row.get("cell"):
                continue  # the notebook's own row (its status), not a graded cell
            lines = (row.get("message") or "").strip().splitlines()
            rows.setdefault((row["student"], row["chapter"]), {})[row["cell"]] = (
                float(row.get("score") or 0), float(row.get("max_score") or row.get("points") or 0), lines[0] if lines else "")
    return rows


def verdict(kind, failing, cells) -> tuple:
    """(as expected?, what went wrong, points lost)."""
    lost = {c for c, (score, most, _) in cells.items() if most and score < most}
    if kind == "valid":
        return (not lost, "REFUSED " + ", ".join(sorted(lost)) if lost else "", lost)
    kept = {c for c in failing if c in cells and c not in lost}
    extra = lost - set(failing)
    problems = ([f"REWARDED {', '.join(sorted(kept))}"] if kept else []) + ([f"DOUBLE PENALTY {', '.join(sorted(extra))}"] if extra else [])
    return (not problems, "; ".join(problems), lost)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", action="append", help="chapter id (repeatable; default: every chapter of TRIAL)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = parser.parse_args(argv)
    chapters = args.chapter or list(TRIAL)
    missing = [f"{c}: {n}" for c in chapters for n in TRIAL.get(c, []) if n not in demo.catalogue(c) and n not in demo.valid_answers(c)]
    notebooks = trial_notebooks(chapters)
    with tempfile.TemporaryDirectory() as tmp:
        graded = {seed: grade(notebooks, seed, Path(tmp)) for seed in args.seeds}
    bad = 0
    header = ["case", "kind", "expected", *(f"seed {s}" for s in args.seeds), "first feedback line"]
    print(("| " + " | ".join(header) + " |\n|" + "---|" * len(header)) if args.markdown else "\t".join(header))
    for (case, chapter), (kind, _, failing) in notebooks.items():
        cells_by_seed = {s: graded[s].get((case, chapter), {}) for s in args.seeds}
        points, notes, first = [], [], ""
        for s, cells in cells_by_seed.items():
            ok, note, lost = verdict(kind, failing or (), cells)
            got, most = sum(v[0] for v in cells.values()), sum(v[1] for v in cells.values())
            points.append(f"{got:g}/{most:g}" + ("" if ok else " !"))
            if not ok:
                notes.append(f"seed {s}: {note}")
            first = first or next((cells[c][2] for c in sorted(lost) if cells[c][2]), "")
        bad += bool(notes)
        expected = "full marks" if kind == "valid" else "loses " + ", ".join(sorted(failing))
        row = [f"{chapter[:2]} {case}", kind, expected, *points, (first[:150] + ("  [" + "; ".join(notes) + "]" if notes else ""))]
        print(("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |") if args.markdown else "\t".join(row))
    for m in missing:
        print(f"not in the test data (not graded): {m}")
    print(f"{len(notebooks)} cases, {bad} not as expected, {len(missing)} missing")
    return 1 if bad or missing else 0


if __name__ == "__main__":
    sys.exit(main())
