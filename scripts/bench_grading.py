"""Benchmark (not a test): grade N submissions with our grader and with stock nbgrader; print the ratio.

    python scripts/bench_grading.py [-n 10] [--chapter 02-qkv-attention] [--workers N] [--no-stock]

The submissions cycle through the reference solution, two typical wrong answers and the untouched
notebook, so that the scores differ. Two measurements on the same submissions, in one run on one machine:
1. our grader (`autograder.grade.grade`: sandboxed runs in N parallel workers, judged outside the kernel,
   gradebook, feedback and reports included, and the assignment generation at its start);
2. stock `nbgrader autograde <chapter>` on the same course directory (one command for all students, the
   hidden checks run inside each kernel, no feedback).
Both must give every submission the same score, or the timing means nothing.
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


KINDS = [[], ["missing_scale"], ["inverted_mask"], None]  # None: the untouched student notebook


def make_submissions(folder: Path, chapter: str, n: int):
    from autograder import course

    for i in range(n):
        wrong = KINDS[i % len(KINDS)]
        nb = nbformat.read(course.student_notebook(chapter), as_version=4) if wrong is None else demo.filled_submission(chapter, wrong)
        path = folder / f"student{i:03d}" / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)


def stock_nbgrader(workdir: Path, chapter: str) -> tuple[float, dict]:
    """Time `nbgrader autograde` over every submitted notebook; return (seconds, {student: score})."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COURSE_GRADING_SEED="0", COURSE_DEVICE="cpu")
    start = time.perf_counter()
    result = subprocess.run(
        ["nbgrader", "autograde", chapter, "--force"], cwd=workdir, capture_output=True, text=True, env=env
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"stock nbgrader autograde failed:\n{result.stderr[-3000:]}")
    with Gradebook(nbgrader_config(workdir).CourseDirectory.db_url) as gradebook:
        scores = {s.id: gradebook.find_submission(chapter, s.id).score for s in gradebook.students}
    return seconds, scores


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="number of copies to grade (default 10)")
    parser.add_argument("--chapter", default=demo.DEMO_CHAPTER)
    parser.add_argument("--workers", type=int, default=None, help="our grader's workers (default: all cores)")
    parser.add_argument("--no-stock", action="store_true", help="skip the stock `nbgrader autograde` measurement")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        submissions, workdir = Path(tmp) / "submissions", Path(tmp) / "work"
        make_submissions(submissions, args.chapter, args.n)
        start = time.perf_counter()
        results = grade(submissions, workdir, seed=0, device="cpu", workers=args.workers)
        ours = time.perf_counter() - start
        our_scores = {r.student: r.score for r in results}
        lines = [f"our grader (sandboxed, {args.workers or os.cpu_count()} workers, feedback included): {ours:.1f} s, {ours / args.n:.2f} s per notebook"]
        same = True
        if not args.no_stock:
            stock, stock_scores = stock_nbgrader(workdir, args.chapter)
            same = stock_scores == our_scores
            lines.append(f"stock nbgrader autograde (in-kernel, serial, no feedback): {stock:.1f} s, {stock / args.n:.2f} s per notebook")
            lines.append(f"throughput, ours / stock: {stock / ours:.2f}x")
            lines.append(f"same score for every submission: {same} (total {sum(our_scores.values()):g} vs {sum(stock_scores.values()):g})")
    print(f"\nbenchmark: {args.n} submissions of {args.chapter}, {os.cpu_count()} CPU cores")
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
