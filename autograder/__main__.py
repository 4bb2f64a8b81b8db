"""python -m autograder {build,grade} — see README.md, "For instructors"."""

import argparse
import sys
from pathlib import Path

from autograder import course
from autograder.config import CELL_TIMEOUT_S


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Build and grade the course's exercise notebooks.")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="regenerate chapters/*/exercises.ipynb and the demo submissions from the instructor sources")
    b.add_argument("--chapter", action="append", choices=course.graded_chapters(), metavar="ID",
                   help="build only this chapter's notebook (repeatable; default: every chapter with exercises, and the demo)")
    b.add_argument("--workdir", type=Path, default=None, help="nbgrader working directory (default: grading/build, or grading/build-<id> with one --chapter)")

    g = sub.add_parser("grade", help="autograde a folder <student>/<chapter-id>/exercises.ipynb")
    g.add_argument("submissions", type=Path, help="folder of submissions, e.g. autograder/demo")
    g.add_argument("--workdir", type=Path, default=course.ROOT / "grading" / "run", help="where the gradebook, feedback and CSVs go (default: grading/run)")
    g.add_argument("--seed", type=int, default=None, help="seed for the hidden checks' inputs (default: a fresh random one, printed)")
    g.add_argument("--cell-timeout", type=int, default=CELL_TIMEOUT_S, help=f"seconds a cell may run before it is interrupted (default {CELL_TIMEOUT_S})")
    g.add_argument("--device", default=None, help="torch device for the hidden checks (default: cuda if available, else cpu)")
    g.add_argument("--workers", type=int, default=None, help="notebooks graded at once (default: all cores)")
    g.add_argument("--notebook-timeout", type=int, default=None, help="seconds a whole notebook may run (default 120)")
    g.add_argument("--memory-mb", type=int, default=None, help="address-space limit of a learner's process in MiB (default 4096; none on cuda)")
    g.add_argument("--restart", action="store_true", help="ignore the results of an earlier (interrupted) run in this workdir and grade everything again")
    g.add_argument("--allow-unsandboxed", action="store_true", help="grade even if no sandbox is available (trusted submissions only; a loud warning is printed)")

    args = parser.parse_args(argv)
    if args.command == "build":
        from autograder import build, demo

        workdir = args.workdir or course.ROOT / "grading" / (f"build-{args.chapter[0]}" if args.chapter and len(args.chapter) == 1 else "build")
        build.clean_workdir(workdir)
        for path in build.build_student_notebooks(workdir, chapters=args.chapter):
            print(f"wrote {path.relative_to(course.ROOT)}")
        if not args.chapter:
            for path in demo.write_demo():
                print(f"wrote {path.relative_to(course.ROOT)}")
        return 0
    if args.command == "grade":
        from autograder.grade import grade

        try:
            results = grade(
                args.submissions, args.workdir, seed=args.seed, device=args.device, cell_timeout=args.cell_timeout,
                workers=args.workers, allow_unsandboxed=args.allow_unsandboxed, restart=args.restart,
                memory_mb=args.memory_mb, notebook_timeout=args.notebook_timeout,
            )
        except KeyboardInterrupt:
            return 130
        return 0 if all(r.status == "graded" for r in results) else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
