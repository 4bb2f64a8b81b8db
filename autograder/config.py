"""The nbgrader course configuration, built in Python so that every command uses the same settings.

The course's runtime state (source/, release/, submitted/, autograded/, feedback/, gradebook.db) lives in
a working directory outside git (default: grading/).
"""

import os
import sys
from pathlib import Path

from traitlets.config import Config

COURSE_ID = "transformer-course"
CELL_TIMEOUT_S = 30  # per cell while autograding; checks take about a second


def nbgrader_config(workdir: Path, cell_timeout: int = CELL_TIMEOUT_S) -> Config:
    workdir = Path(workdir).resolve()
    c = Config()
    c.CourseDirectory.root = str(workdir)
    c.CourseDirectory.course_id = COURSE_ID
    c.CourseDirectory.db_url = f"sqlite:///{workdir / 'gradebook.db'}"
    c.CourseDirectory.notebook_id = "*"
    c.Execute.timeout = cell_timeout
    c.Execute.interrupt_on_timeout = True
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    # The submitted notebook's check cells are replaced by the instructor's (hidden checks restored).
    c.Autograde.exclude_overwriting = {}
    c.CsvExportPlugin.to = str(workdir / "grades.csv")
    return c


def write_config_file(workdir: Path, config: Config) -> Path:
    """Write <workdir>/nbgrader_config.py with the same settings, so nbgrader's own commands
    (`nbgrader autograde`, `nbgrader formgrader`, ...) work in the working directory too."""
    lines = ["# Written by `python -m autograder` from autograder/config.py; edits are overwritten.", "c = get_config()"]
    for section, traits in config.items():
        for name, value in traits.items():
            lines.append(f"c.{section}.{name} = {value!r}")
    path = Path(workdir) / "nbgrader_config.py"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def ensure_venv_on_path():
    """nbgrader shells out to `alembic`, and kernels start as `python`: both must be this environment's."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def nbgrader_api(workdir: Path, cell_timeout: int = CELL_TIMEOUT_S):
    ensure_venv_on_path()
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = nbgrader_config(workdir, cell_timeout)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    write_config_file(workdir, config)
    return NbGraderAPI(CourseDirectory(config=config), config=config)
