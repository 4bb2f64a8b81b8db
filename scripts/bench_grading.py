"""Benchmark (not a test): our grader (warm and cold start, on Dask with 1 and N workers), the plain process pool
it replaced, and stock nbgrader, in one run on the same submissions.

    python scripts/bench_grading.py [-n 36] [--chapter ID ...] [--workers N] [--no-stock] [--no-pool] [--no-one-worker]
        [--no-cold] [--no-only]

The submissions cycle through the chapters (default: every chapter with exercises whose checks train nothing, a mixed
batch; the capstone with --chapter 10-capstone) and,
within each, through the reference solution, two typical wrong answers of its catalogue and the untouched
notebook, so that the scores differ. Measurements on the same submissions, each in a fresh working directory,
in one run on one machine (each of ours in a process of its own, as an instructor runs it):
1. stock `nbgrader autograde <chapter>` (one command for all students, the hidden checks run inside each
   kernel, serial, no feedback);
2. our grader as shipped (`autograder.grading.grade.grade`: sandboxed runs on the embedded Dask cluster, judged
   outside the kernel, gradebook, feedback and reports included, and the assignment generation at its start)
   with N workers (default: all cores), and with 1 worker: the scaling efficiency is t1 / (N * tN);
3. the same grader with the plain process pool it used before Dask (`pool_grade_all` below, kept here only to
   measure what the Dask layer costs: cluster start, shipping each job and its files, the scheduler);
4. the same grader started cold (COURSE_WARM=off: a fresh sandbox, Python and `import torch` per notebook) beside
   the default warm start (each notebook forked from the worker's template, autograder/grading/warm.py);
5. an instructor's rerun of one student after a fix (`grade --only STUDENT` in the default run's working directory,
   the rest graded), for one student of the cheapest, a middle and the dearest chapter.
Seconds per notebook per chapter are given for each (stock: its per-chapter command's time over the chapter's
notebooks; ours: each notebook's time in one worker, from its result). The cache of rendered instructor notebooks is
filled before the runs (as on every run after an instructor's first); stock nbgrader's time does not include the
assignment generation at all (it grades in the course directory our first run made).
Every run must give every submission the same score, or the timing means nothing.
Each run's grading phase (`last_run.json`'s seconds) runs from the first notebooks handed to the workers to the last
result; the wait before it for the embedded cluster's workers to be ready (importing the grader, starting their warm
templates, beside the release) is a fixed cost, given apart (`waited_for_workers_s`) and included in the whole
command's time. The scaling efficiency is given on the grading phase, and with that wait counted too.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import multiprocessing

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nbgrader.api import Gradebook  # noqa: E402

from autograder.grading import cluster
from autograder.authoring import demo  # noqa: E402
from autograder.config import nbgrader_config  # noqa: E402
from autograder.grading.grade import GradeOptions, grade  # noqa: E402


def kinds(chapter):
    """The reference, two catalogued wrong answers, and the untouched notebook (None)."""
    return [[], *([name] for name in list(demo.catalogue(chapter))[:2]), None]


def make_submissions(folder: Path, chapters, n: int):
    """n notebooks: student i hands in chapter chapters[i % len] with kind i // len (cycling)."""
    from autograder import registry

    for i in range(n):
        chapter = chapters[i % len(chapters)]
        options = kinds(chapter)
        wrong = options[(i // len(chapters)) % len(options)]
        nb = nbformat.read(registry.student_notebook(chapter), as_version=4) if wrong is None else demo.filled_submission(chapter, wrong)
        path = folder / f"student{i:03d}" / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)


def stock_nbgrader(workdir: Path, chapters) -> tuple[float, dict]:
    """Time `nbgrader autograde` over every submitted notebook, chapter by chapter; return (seconds, {(student,
    chapter): score}, {chapter: seconds})."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COURSE_GRADING_SEED="0", COURSE_DEVICE="cpu")
    start = time.perf_counter()
    per_chapter = {}
    for chapter in chapters:
        begun = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", chapter, "--force"], cwd=workdir, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            raise SystemExit(f"stock nbgrader autograde failed for {chapter}:\n{result.stderr[-3000:]}")
        per_chapter[chapter] = time.perf_counter() - begun
    seconds = time.perf_counter() - start
    scores = {}
    with Gradebook(nbgrader_config(workdir).CourseDirectory.db_url) as gradebook:
        for chapter in chapters:
            for submission in gradebook.assignment_submissions(chapter):
                scores[(submission.student.id, chapter)] = submission.score
    return seconds, scores, per_chapter


# --- The plain process pool the grader used before Dask: here only to measure the Dask layer's cost -------------


def _pool_init():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    warnings.filterwarnings("ignore")


def _pool_job(args):
    from autograder.grading.notebook import grade_submission
    from autograder.results import Result

    student, chapter, notebook, settings = args
    try:
        return grade_submission(student, chapter, Path(notebook), settings)
    except Exception as exc:
        return Result(student, chapter, "error", error=f"grader error: {type(exc).__name__}: {exc}", seed=settings.seed, device=settings.device)


def pool_grade_all(subs, settings, workdir, *, scheduler=None, workers=None, stop=lambda: False, before_submit=None, started=None, out=sys.stdout,
                   early=None):
    """cluster.grade_all's contract on a forkserver ProcessPoolExecutor writing into the workdir directly. The embedded
    cluster grade() began early is stopped at once: this run measures the grader without it."""
    if early is not None:
        early.close()
    workers = workers or os.cpu_count() or 1
    with ProcessPoolExecutor(max_workers=workers, initializer=_pool_init, mp_context=multiprocessing.get_context("forkserver")) as pool:
        todo, pending = list(subs), {}
        while todo or pending:
            while todo and len(pending) < workers and not stop():
                sub = todo.pop(0)
                if before_submit is not None:
                    before_submit(sub)
                pending[pool.submit(_pool_job, (sub.student, sub.chapter, str(sub.path), settings))] = sub
            if started is not None and pending:
                started()
                started = None
            if not pending:
                break
            finished, _ = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            for future in finished:
                yield pending.pop(future), future.result()


def pool_command(submissions: str, workdir: str, workers: int):
    """Entry point of the pool run (in its own process, like the CLI): grade() with the old pool in place of Dask."""
    cluster.grade_all = pool_grade_all
    with open(os.devnull, "w") as quiet:
        grade(Path(submissions), Path(workdir), GradeOptions(seed=0, device="cpu", workers=workers), out=quiet)


def run_ours(submissions: Path, workdir: Path, workers: int, pool=False, cold=False) -> dict:
    """One run of our grader in a process of its own, as an instructor runs it: `python -m autograder grade` (on
    the embedded Dask cluster), or with `pool` the same grade() on the old process pool. Its timings and scores."""
    from autograder.reporting import reports

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if cold:
        env["COURSE_WARM"] = "off"
    if pool:
        code = (f"import sys; sys.path.insert(0, {str(ROOT / 'scripts')!r}); import bench_grading; "
                f"bench_grading.pool_command({str(submissions)!r}, {str(workdir)!r}, {workers})")
        command = [sys.executable, "-c", code]
    else:
        command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--seed", "0",
                   "--device", "cpu", "--workers", str(workers)]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    total = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    run = json.loads((workdir / "last_run.json").read_text())
    results = [result for result, _ in reports.load_results(workdir).values()]
    return {"total": total, "grading": run["seconds"], "waited": run["waited_for_workers_s"], "results": results,
            "scores": {(r.student, r.chapter): r.score for r in results}}


def only_reruns(submissions: Path, workdir: Path, students) -> list[tuple[str, str, float]]:
    """An instructor's rerun of one student after a fix: `grade --only STUDENT` in the working directory of the
    default run (everything else graded), each as its own command; (student, chapter, seconds of the whole command)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    times = []
    for student in students:
        chapter = next(p.name for p in (submissions / student).iterdir())
        command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--workdir", str(workdir), "--only", student]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"--only {student} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        times.append((student, chapter, seconds))
    return times


def cluster_start_stop(workers: int) -> float:
    """Seconds to start and stop the embedded cluster with nothing to grade, in a fresh process like the CLI's."""
    code = ("import time; from autograder.grading import cluster; t = time.perf_counter()\n"
            f"with cluster.connect(workers={workers}):\n    pass\nprint(time.perf_counter() - t)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def chapter_table(chapters, warm_results, cold_results, stock_per_chapter) -> list[str]:
    """Seconds per notebook by chapter: ours warm and cold (each notebook's time in one worker), stock (its
    per-chapter command's time over the chapter's notebooks), and stock / warm."""
    def mean(values):
        return sum(values) / len(values) if values else None

    def cell(value):
        return f"{value:6.2f}" if value is not None else f"{'-':>6}"

    lines = ["  seconds per notebook by chapter (ours: in one worker; stock: its command's time / notebooks):",
             f"  {'chapter':<24} {'n':>3} {'warm':>6} {'cold':>6} {'stock':>6} {'stock/warm':>10}"]
    for chapter in chapters:
        warm = [r.seconds for r in warm_results if r.chapter == chapter]
        cold = mean([r.seconds for r in cold_results if r.chapter == chapter])
        stock = stock_per_chapter[chapter] / len(warm) if chapter in stock_per_chapter and warm else None
        ratio = f"{stock / mean(warm):9.1f}x" if stock and warm else f"{'-':>10}"
        lines.append(f"  {chapter:<24} {len(warm):>3} {cell(mean(warm))} {cell(cold)} {cell(stock)} {ratio}")
    return lines


def main():
    from autograder import registry
    from autograder.checks import trains_a_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="number of notebooks to grade (default 10)")
    parser.add_argument("--chapter", action="append", default=None,
                        help="chapter id (repeatable; default: every chapter with exercises whose checks train nothing: the "
                             "capstone's notebooks train a model for 10-30 s each, so they are benchmarked on their own, "
                             "with --chapter 10-capstone)")
    parser.add_argument("--workers", type=int, default=None, help="our grader's workers (default: all cores, the grader's default)")
    parser.add_argument("--no-stock", action="store_true", help="skip the stock `nbgrader autograde` measurement")
    parser.add_argument("--no-pool", action="store_true", help="skip the old process pool (the Dask layer's cost)")
    parser.add_argument("--no-one-worker", action="store_true", help="skip the 1-worker run (the scaling efficiency)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-start run (a fresh sandbox per notebook)")
    parser.add_argument("--no-only", action="store_true", help="skip the reruns of one student with --only")
    args = parser.parse_args()
    chapters = args.chapter or [c for c in registry.graded_chapters() if not trains_a_model(c)]
    n_workers = args.workers or os.cpu_count() or 1
    load = os.getloadavg()[0]

    lines, same = [], True
    with tempfile.TemporaryDirectory() as tmp:
        submissions = Path(tmp) / "submissions"
        make_submissions(submissions, chapters, args.n)
        # Every run after an instructor's first reuses the rendered instructor notebooks (release.render_cache_path):
        # fill that cache first, so that no run below pays for rendering and the order of the runs does not matter.
        from autograder.authoring.build import instructor_notebook
        from autograder.authoring.release import write_instructor_sources

        write_instructor_sources(Path(tmp) / "render", chapters, cache=cluster.checks_version, render=instructor_notebook)
        runs = {}
        runs["dask-N"] = run_ours(submissions, Path(tmp) / "dask-N", n_workers)
        if not args.no_one_worker and n_workers > 1:
            runs["dask-1"] = run_ours(submissions, Path(tmp) / "dask-1", 1)
        if not args.no_cold:
            runs["cold-N"] = run_ours(submissions, Path(tmp) / "cold-N", n_workers, cold=True)
        if not args.no_pool:
            runs["pool-N"] = run_ours(submissions, Path(tmp) / "pool-N", n_workers, pool=True)
        ours = runs["dask-N"]
        if not args.no_only:
            # One student of each of three chapters (the cheapest, a middle one, the dearest per notebook in one worker).
            by_chapter = {}
            for r in ours["results"]:
                by_chapter.setdefault(r.chapter, []).append(r)
            costs = sorted(by_chapter, key=lambda c: sum(r.seconds for r in by_chapter[c]) / len(by_chapter[c]))
            picked = [by_chapter[c][0].student for c in (costs[0], costs[len(costs) // 2], costs[-1])]
            reruns = only_reruns(submissions, Path(tmp) / "dask-N", dict.fromkeys(picked))
        for name, run in runs.items():
            if run["scores"] != ours["scores"]:
                same = False
                lines.append(f"  SCORES DIFFER between dask-N and {name}")
        label = {"dask-N": f"warm start, Dask, {n_workers} workers (the default)", "dask-1": "warm start, Dask, 1 worker",
                 "cold-N": f"cold start, Dask, {n_workers} workers", "pool-N": f"warm start, plain process pool, {n_workers} workers"}
        for name, run in runs.items():
            lines.append(f"{label[name]:<48} {run['total']:7.1f} s in all, {run['total'] / args.n:5.2f} s per notebook "
                         f"(grading {run['grading']:.1f} s, {run['grading'] / args.n:.2f} s per notebook, after {run['waited']:.1f} s "
                         "waiting for the workers to start)")
        starts = sorted({r.start for r in ours["results"]})
        lines.append(f"  how the default run's sandboxes started: {', '.join(starts)}")
        per_notebook = [r.seconds for r in ours["results"]]
        lines.append(f"  one notebook in one worker: {sum(per_notebook) / len(per_notebook):.2f} s on average (warm)")
        if "cold-N" in runs:
            cold = [r.seconds for r in runs["cold-N"]["results"]]
            lines.append(f"  one notebook in one worker: {sum(cold) / len(cold):.2f} s on average (cold)")
        if "dask-1" in runs:
            t1, tn = runs["dask-1"]["grading"], ours["grading"]
            lines.append(f"scaling 1 -> {n_workers} workers (grading phase): {t1 / tn:.2f}x faster, efficiency {t1 / (n_workers * tn):.0%}")
            w1, wn = t1 + runs["dask-1"]["waited"], tn + ours["waited"]
            lines.append(f"  counting the wait for the workers to start as well: {w1 / wn:.2f}x faster, efficiency {w1 / (n_workers * wn):.0%}")
        if "pool-N" in runs:
            pool = runs["pool-N"]
            fixed = cluster_start_stop(n_workers)
            per_job = (ours["grading"] - pool["grading"] - fixed) / args.n
            lines.append(f"cost of the Dask layer ({n_workers} workers): {ours['grading'] - pool['grading']:+.1f} s on the grading phase "
                         f"({ours['grading'] / pool['grading'] - 1:+.0%}), {ours['total'] - pool['total']:+.1f} s on the whole command "
                         f"({(ours['total'] - pool['total']) / args.n:+.2f} s per notebook)")
            lines.append(f"  of which starting and stopping the embedded cluster ({n_workers} workers, nothing graded): {fixed:.1f} s; "
                         f"the rest, per notebook: {per_job:+.3f} s")
        if not args.no_only:
            lines.append("rerun of one student, the rest graded (`grade --only STUDENT`, the whole command): "
                         + ", ".join(f"{student} ({chapter}) {seconds:.1f} s" for student, chapter, seconds in reruns))
        stock_per_chapter = {}
        if not args.no_stock:
            stock, stock_scores, stock_per_chapter = stock_nbgrader(Path(tmp) / "dask-N", sorted({c for _, c in ours["scores"]}))
            lines.insert(0, f"{'stock nbgrader autograde (in-kernel, serial)':<48} {stock:7.1f} s in all, {stock / args.n:5.2f} s per notebook")
            lines.append(f"throughput, ours (warm, the default) / stock: {stock / ours['total']:.2f}x")
            if "cold-N" in runs:
                lines.append(f"throughput, ours (cold) / stock: {stock / runs['cold-N']['total']:.2f}x")
                lines.append(f"throughput, warm / cold: {runs['cold-N']['total'] / ours['total']:.2f}x")
            same = same and stock_scores == ours["scores"]
            lines.append(f"same score for every submission: {same} (total {sum(ours['scores'].values()):g} vs {sum(stock_scores.values()):g})")
            if stock_scores != ours["scores"]:
                keys = sorted(set(ours["scores"]) | set(stock_scores))
                lines += [f"  differs: {k}: ours {ours['scores'].get(k)} stock {stock_scores.get(k)}" for k in keys if ours["scores"].get(k) != stock_scores.get(k)]
        lines += chapter_table(chapters, ours["results"], runs.get("cold-N", {}).get("results", []), stock_per_chapter)
    print(f"\nbenchmark: {args.n} submissions of {', '.join(chapters)}; {os.cpu_count()} CPU cores; load average {load:.2f} at the start")
    print("\n".join(lines))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
