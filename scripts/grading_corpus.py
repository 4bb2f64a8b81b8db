"""Grade the whole corpus once and write what it gave: the before/after comparison of a refactoring.

The corpus: for every chapter with exercises, the reference solution, the blank student notebook, each
catalogued wrong answer and each valid alternative, one student each (as tests/test_pipeline.py builds it).
Graded by the real CLI with a fixed seed on the CPU (or --device cuda); the outcome (score and first line of the message of every
graded cell, and each notebook's status) goes to a JSON file. With --compare OLD.json, the differences are
printed and the exit status is 1 when there are any.

    python scripts/grading_corpus.py out.json [--compare before.json] [--seed 7] [--device cuda] [--workers N]
    python scripts/grading_corpus.py --write-only DIR      # write the corpus's submissions and stop
    python scripts/grading_corpus.py out.json --corpus DIR  # grade a corpus written earlier (e.g. on a GPU machine)
"""

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

from autograder import registry
from autograder.authoring import demo


def write_corpus(folder: Path, chapters=None, cheats: bool = False, sample: int | None = None) -> int:
    """Write the corpus (of `chapters`, default all) into `folder`; with `cheats`, also the grading-safety cheat
    corpus of tests/test_grading_safety.py (its chapter's notebooks that try to earn what their code does not);
    with `sample`, only the first `sample` catalogued wrong and valid answers of each chapter."""
    notebooks = {}
    for chapter in chapters or registry.graded_chapters():
        notebooks[("reference", chapter)] = demo.filled_submission(chapter)
        notebooks[("blank", chapter)] = nbformat.read(registry.student_notebook(chapter), as_version=4)
        for name in list(demo.catalogue(chapter))[:sample]:
            notebooks[(f"{chapter[:2]}-{name}", chapter)] = demo.filled_submission(chapter, [name])
        for name in list(demo.valid_answers(chapter))[:sample]:
            notebooks[(f"{chapter[:2]}-valid-{name}", chapter)] = demo.filled_submission(chapter, valid=[name])
    if cheats:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        import test_grading_safety as safety

        # the listener port: one nothing listens on (a cheat that reaches the network is refused either way)
        for student, (nb, _) in safety.cheat_corpus(folder, port=9).items():
            if isinstance(nb, nbformat.NotebookNode):
                notebooks[(f"cheat-{student}", safety.CHAPTER)] = nb
    for (student, chapter), nb in notebooks.items():
        path = folder / student / chapter / "exercises.ipynb"
        path.parent.mkdir(parents=True)
        nbformat.write(nb, path)
    return len(notebooks)


def outcome(workdir: Path) -> dict:
    out = {}
    with (workdir / "summary.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            key = f"{row['student']}/{row['chapter']}/{row['cell']}"
            message = (row.get("message") or "").strip().splitlines()
            out[key] = {"score": row.get("score", ""), "status": row.get("status", ""), "message": message[0] if message else ""}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--compare", type=Path)
    parser.add_argument("--seed", default="7")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--workers", type=int)
    parser.add_argument("--write-only", type=Path, metavar="DIR", help="write the corpus's submissions into DIR and stop")
    parser.add_argument("--corpus", type=Path, metavar="DIR", help="grade the submissions written earlier into DIR")
    args = parser.parse_args(argv)
    if args.write_only:
        print(f"{write_corpus(args.write_only)} notebooks written to {args.write_only}")
        return 0
    if args.out is None:
        parser.error("the output file is required unless --write-only is given")
    with tempfile.TemporaryDirectory() as tmp:
        submissions, workdir = args.corpus or Path(tmp) / "submissions", Path(tmp) / "work"
        if not args.corpus:
            n = write_corpus(submissions)
            print(f"grading {n} notebooks...", flush=True)
        command = [sys.executable, "-m", "autograder", "grade", str(submissions), "--workdir", str(workdir),
                   "--device", args.device, "--seed", args.seed]
        if args.workers:
            command += ["--workers", str(args.workers)]
        result = subprocess.run(command, capture_output=True, text=True)
        print(result.stdout[-2000:], result.stderr[-2000:])
        got = outcome(workdir)
    args.out.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False), encoding="utf-8")
    print(f"{len(got)} rows written to {args.out}")
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text(encoding="utf-8"))
    differences = [(k, before.get(k), got.get(k)) for k in sorted(set(before) | set(got)) if before.get(k) != got.get(k)]
    for key, old, new in differences:
        print(f"DIFFERS {key}\n  before: {old}\n  after:  {new}")
    print(f"{len(before)} rows before, {len(got)} after, {len(differences)} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
