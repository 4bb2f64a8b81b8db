"""Measure (not a test) how long each chapter's visible checks take on CPU, as a learner runs them.

    python scripts/time_visible_checks.py

For each chapter with exercises: the reference notebook's cells are run in order in one process (as a
kernel would), and the time spent in the visible-check cells (`*_visible`) is summed. Median of 3 runs.
The course promises under 2 s per chapter on a laptop CPU.
"""

import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from autograder import registry
from autograder.authoring import demo  # noqa: E402


def visible_seconds(chapter: str) -> float:
    nb = demo.filled_submission(chapter)
    namespace, total = {"__name__": "__main__"}, 0.0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        gid = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(cell.source, f"<cell {i}>", "exec"), namespace)
        if gid.endswith("_visible"):
            total += time.perf_counter() - start
    return total


def main():
    torch.set_num_threads(1)
    print(f"visible checks, reference notebook, CPU ({torch.get_num_threads()} thread), median of 3 runs:")
    for chapter in registry.graded_chapters():
        runs = [visible_seconds(chapter) for _ in range(3)]
        print(f"  {chapter}: {statistics.median(runs):.2f} s")


if __name__ == "__main__":
    main()
