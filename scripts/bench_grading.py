"""Benchmark (not a test): grade N copies of the reference submission and print seconds per notebook.

    python scripts/bench_grading.py [-n 10] [--chapter 02-qkv-attention] [--no-stock]

Two measurements on the same submissions, in one run on one machine:
1. our CLI (`python -m autograder grade`: autograde + feedback per notebook, through nbgrader's API);
2. stock `nbgrader autograde <chapter>` on the same course directory (one command for all students,
   no feedback), the reference point for any faster grader.
Both must give every copy full marks, or the timing means nothing.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbgrader.api import Gradebook  # noqa: E402

from autograder import demo  # noqa: E402
from autograder.config import nbgrader_config  # noqa: E402
from autograder.grade import grade  # noqa: E402


def make_submissions(folder: Path, chapter: str, n: int):
    nb = demo.filled_submission(chapter)
    for i in range(n):
        path = folder / f"student{i:03d}" / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)


def stock_nbgrader(workdir: Path, chapter: str) -> tuple[float, int]:
    """Time `nbgrader autograde` over every submitted notebook; return (seconds, notebooks with full marks)."""
    # The child inherits PYTHONPATH, the seed and the device that grade() set for the hidden checks.
    start = time.perf_counter()
    result = subprocess.run(
        ["nbgrader", "autograde", chapter, "--force"], cwd=workdir, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"stock nbgrader autograde failed:\n{result.stderr[-3000:]}")
    with Gradebook(nbgrader_config(workdir).CourseDirectory.db_url) as gradebook:
        scores = [gradebook.find_submission(chapter, s.id) for s in gradebook.students]
        full = sum(sub.score == sub.max_score for sub in scores)
    return seconds, full


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="number of copies to grade (default 10)")
    parser.add_argument("--chapter", default=demo.DEMO_CHAPTER)
    parser.add_argument("--no-stock", action="store_true", help="skip the stock `nbgrader autograde` measurement")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        submissions, workdir = Path(tmp) / "submissions", Path(tmp) / "work"
        make_submissions(submissions, args.chapter, args.n)
        start = time.perf_counter()
        results = grade(submissions, workdir, seed=0, device="cpu")
        ours = time.perf_counter() - start
        ours_full = sum(r.score == r.max_score for r in results)
        lines = [f"our CLI (autograde + feedback): {ours:.1f} s, {ours / args.n:.2f} s per notebook, {ours_full}/{args.n} full marks"]
        if not args.no_stock:
            stock, stock_full = stock_nbgrader(workdir, args.chapter)
            lines.append(f"stock nbgrader autograde:       {stock:.1f} s, {stock / args.n:.2f} s per notebook, {stock_full}/{args.n} full marks")
            lines.append(f"throughput, ours / stock:       {stock / ours:.2f}x")
    print(f"\nbenchmark: {args.n} copies of the reference solution of {args.chapter}, {os.cpu_count()} CPU cores")
    print("\n".join(lines))
    return 0 if ours_full == args.n and (args.no_stock or stock_full == args.n) else 1


if __name__ == "__main__":
    sys.exit(main())
