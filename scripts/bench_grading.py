"""Benchmark (not a test): grade N copies of the reference submission and print seconds per notebook.

    python scripts/bench_grading.py [-n 10] [--chapter 02-qkv-attention]

The baseline for the grading work that follows: every later change to the grader is measured against it,
on the same machine, in one run.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autograder import demo  # noqa: E402
from autograder.grade import grade  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="number of copies to grade (default 10)")
    parser.add_argument("--chapter", default=demo.DEMO_CHAPTER)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        submissions, workdir = Path(tmp) / "submissions", Path(tmp) / "work"
        nb = demo.filled_submission(args.chapter)
        for i in range(args.n):
            path = submissions / f"student{i:03d}" / args.chapter / "exercises.ipynb"
            path.parent.mkdir(parents=True)
            nbformat.write(nb, path)
        start = time.perf_counter()
        results = grade(submissions, workdir, seed=0, device="cpu")
        total = time.perf_counter() - start
    full = sum(r.score == r.max_score for r in results)
    print(f"\nbenchmark: {args.n} notebooks, {full} with full marks, {total:.1f} s in all "
          f"(setup included), {total / args.n:.2f} s per notebook")
    return 0 if full == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
