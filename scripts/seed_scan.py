"""Does every catalogued wrong answer keep its diagnosis on other grading seeds? (for chapter authors)

Grading draws a fresh seed for every run, and the tests check the catalogue on a few fixed seeds only (harness.SEEDS,
the pipeline's CORPUS_SEED). This runs each wrong answer of WRONG_ANSWERS once (its notebook, as the chapter contract
does) and grades it on every seed given, printing the seeds where it loses other cells than its `failing_cells` or
where no message holds its diagnosis. A mistake named on some seeds only (e.g. a greedy decoding case whose path
changes on one seed and not another) shows up here long before a random seed finds it in someone's grades.

    python scripts/seed_scan.py                      # every chapter, seeds 5..12
    python scripts/seed_scan.py --chapters 08,09 --seeds 0-39

Run it with OMP_NUM_THREADS=1 beside other work: torch's threads spin when two processes share two cores.
Exit status 1 when any wrong answer lost its diagnosis on some seed.
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import harness  # noqa: E402  (tests/harness.py: the notebook harness the chapter contract uses)

from autograder import registry  # noqa: E402


def seeds_of(text):
    """'5-12' or '3,21,1234' -> a list of ints."""
    if "-" in text:
        first, last = (int(part) for part in text.split("-"))
        return list(range(first, last + 1))
    return [int(part) for part in text.split(",")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", default="", help="chapter numbers, e.g. 06,08 (default: every graded chapter)")
    parser.add_argument("--seeds", default="5-12", help="a range 5-12 or a list 3,21,1234 (default: 5-12)")
    args = parser.parse_args(argv)
    wanted = [c for c in args.chapters.split(",") if c]
    chapters = [c for c in registry.graded_chapters() if not wanted or c[:2] in wanted]
    seeds = seeds_of(args.seeds)
    problems = 0
    for chapter in chapters:
        m = harness.material(chapter)
        for index, (name, wrong) in enumerate(m.wrong_answers.items(), 1):
            started = time.time()
            run = harness.learner_run(m, wrong=(name,))
            bad = []
            for seed in seeds:
                lost = harness.lost(harness.hidden(m, run.namespace, seed))
                named = any(wrong.diagnosis in str(lost.get(cell, "")) for cell in wrong.failing_cells)
                if set(lost) != set(wrong.failing_cells) or not named:
                    bad.append((seed, sorted(lost), " | ".join(str(v) for v in lost.values())[:300].replace("\n", " ")))
            problems += bool(bad)
            print(f"[{chapter} {index}/{len(m.wrong_answers)}] {name}: "
                  f"{'as catalogued on every seed' if not bad else f'{len(bad)} seed(s) differ'} ({time.time() - started:.1f} s)",
                  flush=True)
            for seed, lost, message in bad:
                print(f"    seed {seed}: loses {lost}, expected {sorted(wrong.failing_cells)} with {wrong.diagnosis!r}: {message}")
    print(f"{problems} wrong answer(s) with a seed-dependent diagnosis, on seeds {args.seeds}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
