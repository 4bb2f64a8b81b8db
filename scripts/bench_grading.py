"""Benchmark (not a test): grade N submissions with our grader and with stock nbgrader; print the ratio.

    python scripts/bench_grading.py [-n 10] [--chapter ID ...] [--workers N] [--no-stock]

The submissions cycle through the chapters (default: every chapter with exercises, a mixed batch) and,
within each, through the reference solution, two typical wrong answers of its catalogue and the untouched
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


def kinds(chapter):
    """The reference, two catalogued wrong answers, and the untouched notebook (None)."""
    return [[], *([name] for name in list(demo.catalogue(chapter))[:2]), None]


def make_submissions(folder: Path, chapters, n: int):
    """n notebooks: student i hands in chapter chapters[i % len] with kind i // len (cycling)."""
    from autograder import course

    for i in range(n):
        chapter = chapters[i % len(chapters)]
        options = kinds(chapter)
        wrong = options[(i // len(chapters)) % len(options)]
        nb = nbformat.read(course.student_notebook(chapter), as_version=4) if wrong is None else demo.filled_submission(chapter, wrong)
        path = folder / f"student{i:03d}" / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)


def stock_nbgrader(workdir: Path, chapters) -> tuple[float, dict]:
    """Time `nbgrader autograde` over every submitted notebook, chapter by chapter; return (seconds, {(student,
    chapter): score})."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COURSE_GRADING_SEED="0", COURSE_DEVICE="cpu")
    start = time.perf_counter()
    for chapter in chapters:
        result = subprocess.run(["nbgrader", "autograde", chapter, "--force"], cwd=workdir, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise SystemExit(f"stock nbgrader autograde failed for {chapter}:\n{result.stderr[-3000:]}")
    seconds = time.perf_counter() - start
    scores = {}
    with Gradebook(nbgrader_config(workdir).CourseDirectory.db_url) as gradebook:
        for chapter in chapters:
            for submission in gradebook.assignment_submissions(chapter):
                scores[(submission.student.id, chapter)] = submission.score
    return seconds, scores


def main():
    from autograder import course

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="number of notebooks to grade (default 10)")
    parser.add_argument("--chapter", action="append", default=None, help="chapter id (repeatable; default: every chapter with exercises)")
    parser.add_argument("--workers", type=int, default=None, help="our grader's workers (default: all cores)")
    parser.add_argument("--no-stock", action="store_true", help="skip the stock `nbgrader autograde` measurement")
    args = parser.parse_args()
    chapters = args.chapter or course.graded_chapters()

    with tempfile.TemporaryDirectory() as tmp:
        submissions, workdir = Path(tmp) / "submissions", Path(tmp) / "work"
        make_submissions(submissions, chapters, args.n)
        start = time.perf_counter()
        results = grade(submissions, workdir, seed=0, device="cpu", workers=args.workers)
        ours = time.perf_counter() - start
        our_scores = {(r.student, r.chapter): r.score for r in results}
        lines = [f"our grader (sandboxed, {args.workers or os.cpu_count()} workers, feedback included): {ours:.1f} s, {ours / args.n:.2f} s per notebook"]
        for chapter in chapters:
            mine = [r.seconds for r in results if r.chapter == chapter]
            if mine:
                lines.append(f"  {chapter}: {len(mine)} notebooks, {sum(mine) / len(mine):.2f} s per notebook in one worker (median {sorted(mine)[len(mine) // 2]:.2f} s)")
        same = True
        if not args.no_stock:
            stock, stock_scores = stock_nbgrader(workdir, sorted({c for _, c in our_scores}))
            same = stock_scores == our_scores
            lines.append(f"stock nbgrader autograde (in-kernel, serial, no feedback): {stock:.1f} s, {stock / args.n:.2f} s per notebook")
            lines.append(f"throughput, ours / stock: {stock / ours:.2f}x")
            lines.append(f"same score for every submission: {same} (total {sum(our_scores.values()):g} vs {sum(stock_scores.values()):g})")
            if not same:
                lines += [f"  differs: {k}: ours {our_scores.get(k)} stock {stock_scores.get(k)}" for k in sorted(set(our_scores) | set(stock_scores)) if our_scores.get(k) != stock_scores.get(k)]
    print(f"\nbenchmark: {args.n} submissions of {', '.join(chapters)}, {os.cpu_count()} CPU cores")
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
