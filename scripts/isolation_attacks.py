"""Grade each hostile notebook of tests/isolation_corpus.py alone (with the victims, the snoop, the accomplice and the
sentinel) through the real CLI, and print what it achieved, mode by mode (issue 29).

    python scripts/isolation_attacks.py [--modes warm-root-groups,cold-unprivileged] [--attacks a-nested-forge,...]

Run as root (the unprivileged modes run the grader as uid 65534). Used to show what each attack does on a given
version of the grader; the test suite grades all of them in one class per mode (tests/test_warm_sandbox.py).
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import isolation_corpus as corpus  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(corpus.MODES))
    parser.add_argument("--attacks", default=",".join(corpus.ATTACKS))
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for mode in args.modes.split(","):
        for attack in args.attacks.split(","):
            base = Path(tempfile.mkdtemp(prefix="course-attack-"))
            base.chmod(0o755)
            root, workdir = base / "class", base / "work"
            root.mkdir()
            students = corpus.class_folder(root, [attack])
            account = corpus.grade_class(root, workdir, mode, sys.executable, env)
            found = corpus.harms(account, students)
            rss = account["peak_rss_mib"]
            print(f"{mode:20} {attack:22} exit {account['returncode']} peak {rss or 0:6.0f} MiB  "
                  + ("; ".join(found) if found else "held"), flush=True)


if __name__ == "__main__":
    main()
