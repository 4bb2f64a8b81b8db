"""How long the sandbox's guard takes to arm for each chapter's forbidden set (runner.arm_guard, in a fresh process
per chapter, as in the sandbox; three times each), given the list of torch's implementations the grader sends in the
job (runner.implementation_routes, computed here as the grading process does), and searching for them in place (the
fallback: `check` without a grader's list). Prints milliseconds; run: python scripts/arming_time.py"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = r"""
import sys, time, warnings
sys.path.insert(0, {checks!r})
warnings.simplefilter("ignore")
import json
import torch
import runner
implementations = json.loads(sys.stdin.read())
start = time.perf_counter()
armed = runner.arm_guard({names!r}, block_exec=False, idle_identity={idle!r}, implementations=implementations)
print((time.perf_counter() - start) * 1000, len(armed["implementations"]))
"""


def main():
    sys.path.insert(0, str(ROOT))
    import importlib

    from autograder.checks import builtins, runner

    for module in sorted((ROOT / "autograder" / "checks").glob("ch0*.py")):
        checks = importlib.import_module(f"autograder.checks.{module.stem}")
        forbidden = dict(getattr(checks, "FORBIDDEN", {}))
        for name in ("DROPOUT_FORBIDDEN",):
            forbidden.update(getattr(checks, name, {}))
        names = builtins.switched_off(forbidden)
        if not names:
            print(f"{module.stem}: nothing to arm")
            continue
        idle = builtins.idle_identity(forbidden)
        script = SCRIPT.format(checks=str(ROOT / "autograder" / "checks"), names=names, idle=idle)
        given = json.dumps(runner.implementation_routes(names, idle))
        line = []
        for what, sent in (("given the grader's list", given), ("searching in place", "null")):
            runs = [subprocess.run([sys.executable, "-c", script], input=sent, capture_output=True, text=True, check=True).stdout.split()
                    for _ in range(3)]
            times = sorted(float(r[0]) for r in runs)  # the machine may be shared: the least of three, and the most
            line.append(f"{what} {times[0]:.1f} ms (most {times[-1]:.1f})")
        print(f"{module.stem}: armed {'; '.join(line)}; {runs[0][1]} torch implementations switched off")


if __name__ == "__main__":
    main()
