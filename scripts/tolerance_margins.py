"""Measure (not a test) the margins of the hidden checks' float tolerances, on both sides:

    python scripts/tolerance_margins.py [--seeds 12]

1. Rounding: for every hidden check with a reference, every float32 call is computed again from the same
   inputs in float64; the float32 reference's largest distance from it, in units of the float32 tolerance
   (autograder.checks.TOLERANCES). Valid learner code that orders the arithmetic differently lies about as
   far again, so this should stay well below 0.5.
2. Mistakes: every catalogued wrong answer of every chapter, graded in-process (as the chapter contract, tests/chapter_contract.py,
   does); the smallest "largest difference" any hidden check reports for it. It should stay far above the
   float32 tolerance, so that no machine's rounding can turn a mistake into full marks.
"""

import argparse
import contextlib
import importlib
import io
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

from autograder import registry
from autograder.authoring import demo  # noqa: E402
from autograder.checks import TOLERANCES  # noqa: E402
from autograder.checks.judge import _as_tuple  # noqa: E402


def rounding_margins(seeds: int) -> dict:
    """{(hidden check, case label): float32 reference's distance from float64, in float32 tolerances}."""
    tol = TOLERANCES[torch.float32]
    worst = {}
    for chapter in registry.graded_chapters():
        checks = importlib.import_module(f"autograder.checks.{registry.module_name(chapter)}")
        for gid, check in checks.CHECKS.items():
            if check.reference_call is None:
                continue
            for seed in range(seeds):
                calls = check.plan(seed, "cpu")
                by_label = {c.label: c for c in calls}
                for call in calls:
                    twin = by_label.get(call.label.replace("float32", "float64"))
                    if call.dtype != torch.float32 or call.device != "cpu" or call.raises or call.module or twin is None:
                        continue
                    with torch.no_grad():
                        got, truth = _as_tuple(check.reference_call(call)), _as_tuple(check.reference_call(twin))
                    for a, b in zip(got, truth):
                        if not (isinstance(a, torch.Tensor) and a.is_floating_point() and a.shape == b.shape):
                            continue
                        finite = torch.isfinite(b)
                        if finite.any():
                            error = (a.double()[finite] - b[finite]).abs() / (tol["atol"] + tol["rtol"] * b[finite].abs())
                            key = (gid, call.label.split(", float32")[0])
                            worst[key] = max(worst.get(key, 0.0), error.max().item())
    return worst


def mistake_margins() -> list:
    """[(smallest reported difference, chapter, mistake)] for every catalogued wrong answer."""
    import harness  # tests/harness.py: the chapter contract's notebook harness

    rows = []
    for chapter in registry.graded_chapters():
        material = harness.material(chapter)
        for name in demo.catalogue(chapter):
            with contextlib.redirect_stdout(io.StringIO()):
                run = harness.run_notebook(harness.filled(material, [name]))
                messages = [m for m in harness.lost(harness.hidden(material, run.namespace)).values() if m]
            diffs = [float(d) for m in messages for d in re.findall(r"largest difference ([0-9.e+-]+|inf)", m)]
            rows.append((min(diffs) if diffs else None, chapter, name))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=12, help="grading seeds to try (default 12)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    tol = TOLERANCES[torch.float32]
    print(f"float32 tolerance: atol {tol['atol']:g}, rtol {tol['rtol']:g}\n")
    worst = rounding_margins(args.seeds)
    print(f"1. float32 reference vs float64, in float32 tolerances (largest over {args.seeds} seeds), top 8 of {len(worst)} cases:")
    for (gid, label), value in sorted(worst.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {value:6.3f}  {gid}: {label[:90]}")
    rows = mistake_margins()
    numeric = sorted(r for r in rows if r[0] is not None)
    print(f"\n2. catalogued mistakes: {len(rows)}; {len(numeric)} reported with a numeric difference; the 8 closest:")
    for diff, chapter, name in numeric[:8]:
        print(f"  {diff:10.3g}  {chapter}: {name}")
    print(f"  (the others fail on shape, dtype, device, exact entries, errors or forbidden calls: {len(rows) - len(numeric)})")


if __name__ == "__main__":
    main()
