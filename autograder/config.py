"""The nbgrader course configuration, built in Python so that every command uses the same settings.

The course's runtime state (source/, release/, submitted/, autograded/, feedback/, gradebook.db or
the database `--db` names, see autograder/gradebook.py) lives in
a working directory outside git (default: grading/).

A class's own settings (due dates, extensions, the late penalty) live in a TOML file, by default
<workdir>/course.toml (see guides/instructors.md):

    timezone = "Europe/Berlin"                  # for due dates written without one (default UTC)
    [due]
    "02-qkv-attention" = "2025-03-01 23:59"
    [extensions."02-qkv-attention"]             # or [extensions."*"] for every chapter
    alice = "2d"                                 # d, h, m; "1d 12h"
    [late_penalty]                               # any nbgrader LateSubmissionPlugin, and its options
    plugin = "autograder.reporting.latepenalty.PerDayPenalty"
    percent_per_day = 10
"""

import importlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from traitlets.config import Config

from autograder import registry
from autograder.results import atomic_write

COURSE_ID = "transformer-course"
CELL_TIMEOUT_S = 30  # per cell while autograding; checks take about a second
COURSE_CONFIG = "course.toml"  # in the working directory, unless --course-config names another file
DEFAULT_PENALTY_PLUGIN = "autograder.reporting.latepenalty.PerDayPenalty"  # when [late_penalty] names none
NO_PENALTY_PLUGIN = "nbgrader.plugins.LateSubmissionPlugin"  # nbgrader's own; its default: no penalty
# The course's plugin under the name it had before the package was split into rooms: a course.toml written then
# still works.
MOVED_PLUGINS = {"autograder.latepenalty.PerDayPenalty": DEFAULT_PENALTY_PLUGIN}


class CourseConfigError(ValueError):
    """The course configuration file is wrong: the message says where and how."""


@dataclass
class CourseSettings:
    path: Path | None = None  # the file read, None when there is none
    due: dict = field(default_factory=dict)  # chapter -> naive UTC datetime
    extensions: dict = field(default_factory=dict)  # (chapter or "*", student) -> timedelta
    penalty_plugin: str = NO_PENALTY_PLUGIN
    penalty_options: dict = field(default_factory=dict)

    def extension(self, chapter: str, student: str):
        """The student's extension for the chapter (a chapter's own entry wins over "*"), or None."""
        return self.extensions.get((chapter, student), self.extensions.get(("*", student)))

    def describe(self) -> str:
        if self.path is None:
            return "no course configuration (no due dates)"
        penalty = self.penalty_plugin.rsplit(".", 1)[-1] + (f" {self.penalty_options}" if self.penalty_options else "")
        return f"course configuration {self.path}: {len(self.due)} due date(s), {len(self.extensions)} extension(s), late penalty {penalty}"


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(days?|d|hours?|h|minutes?|mins?|m)\s*", re.I)
_UNIT = {"d": 86400, "h": 3600, "m": 60}


def parse_duration(text) -> timedelta:
    """'2d', '36h', '90m', '1d 12h', '2 days' -> timedelta."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{text!r} is not a duration (write it like '2d', '36h', '1d 12h')")
    pos, seconds = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNIT[match.group(2)[0].lower()]
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"{text!r} is not a duration (write it like '2d', '36h', '1d 12h')")
    return timedelta(seconds=seconds)


def parse_due(value, tz_name: str | None) -> datetime:
    """A due date as nbgrader stores it (naive UTC). Strings without a zone are in `tz_name` (default UTC)."""
    import dateutil.parser
    import dateutil.tz
    from nbgrader.utils import parse_utc

    if isinstance(value, str) and len(value.split(" ")) == 3:
        return parse_utc(value)  # nbgrader's own form: "2025-03-01 23:59:00 Europe/Berlin"
    when = value if isinstance(value, datetime) else dateutil.parser.parse(value) if isinstance(value, str) else None
    if when is None:
        raise ValueError(f"{value!r} is not a date and time")
    if when.tzinfo is None and tz_name:
        zone = dateutil.tz.gettz(tz_name)
        if zone is None:
            raise ValueError(f"unknown time zone {tz_name!r}")
        when = when.replace(tzinfo=zone)
    return parse_utc(when)


def load_course_settings(path) -> CourseSettings:
    """Read the course configuration file; a missing file means no due dates. Raise CourseConfigError."""
    import tomllib

    if path is None or not Path(path).exists():
        return CourseSettings()
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise CourseConfigError(f"{path}: {exc}") from None
    unknown = set(data) - {"timezone", "due", "extensions", "late_penalty"}
    if unknown:
        raise CourseConfigError(f"{path}: unknown setting(s) {sorted(unknown)} (known: timezone, [due], [extensions], [late_penalty])")
    settings = CourseSettings(path=path)
    tz_name = data.get("timezone")

    def chapter_ok(chapter, where, star=False):
        if chapter not in registry.CHAPTER_IDS and not (star and chapter == "*"):
            raise CourseConfigError(f"{path}: [{where}] {chapter!r} is not a chapter id (chapters: {', '.join(registry.CHAPTER_IDS)})")

    try:
        for chapter, when in data.get("due", {}).items():
            chapter_ok(chapter, "due")
            settings.due[chapter] = parse_due(when, tz_name)
        for chapter, students in data.get("extensions", {}).items():
            chapter_ok(chapter, "extensions", star=True)
            if not isinstance(students, dict):
                raise ValueError(f"[extensions.{chapter!r}] must map student ids to durations")
            for student, duration in students.items():
                settings.extensions[(chapter, student)] = parse_duration(duration)
    except (ValueError, OverflowError) as exc:
        raise CourseConfigError(f"{path}: {exc}") from None
    penalty = dict(data.get("late_penalty", {}))
    if "late_penalty" in data:
        settings.penalty_plugin = penalty.pop("plugin", DEFAULT_PENALTY_PLUGIN)
        settings.penalty_plugin = MOVED_PLUGINS.get(settings.penalty_plugin, settings.penalty_plugin)
        plugin = penalty_plugin_class(settings.penalty_plugin, path)
        known = set(plugin.class_trait_names(config=True))
        unknown = set(penalty) - known
        if unknown:
            raise CourseConfigError(f"{path}: [late_penalty] {plugin.__name__} has no option(s) {sorted(unknown)} (its options: {sorted(known)})")
        settings.penalty_options = penalty
    return settings


def penalty_plugin_class(name: str, where=""):
    """The late-penalty plugin class named `module.Class`: an nbgrader LateSubmissionPlugin (or BasePlugin
    with a `late_submission_penalty` method)."""
    from nbgrader.plugins import BasePlugin

    module, _, cls = name.rpartition(".")
    try:
        plugin = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError, ValueError) as exc:
        raise CourseConfigError(f"{where}: [late_penalty] plugin {name!r} cannot be imported ({exc})") from None
    if not (isinstance(plugin, type) and issubclass(plugin, BasePlugin) and hasattr(plugin, "late_submission_penalty")):
        raise CourseConfigError(f"{where}: [late_penalty] plugin {name!r} is not an nbgrader late-submission plugin")
    return plugin


def nbgrader_config(workdir: Path, cell_timeout: int = CELL_TIMEOUT_S, settings: CourseSettings | None = None, db_url: str | None = None) -> Config:
    workdir = Path(workdir).resolve()
    c = Config()
    c.CourseDirectory.root = str(workdir)
    c.CourseDirectory.course_id = COURSE_ID
    # The gradebook: SQLite in the working directory, or any SQLAlchemy URL (autograder.reporting.gradebook, --db).
    c.CourseDirectory.db_url = db_url or f"sqlite:///{workdir / 'gradebook.db'}"
    c.CourseDirectory.notebook_id = "*"
    c.Execute.timeout = cell_timeout
    c.Execute.interrupt_on_timeout = True
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    # The submitted notebook's check cells are replaced by the instructor's (hidden checks restored).
    c.Autograde.exclude_overwriting = {}
    # `nbgrader export` writes the same grades.csv as the grader (quoted, sorted: ids may hold commas).
    # Set on the base class, so that `nbgrader export --to FILE` (the same trait) still overrides it.
    c.ExportPlugin.to = str(workdir / "grades.csv")
    c.ExportApp.plugin_class = "autograder.reporting.reports.CsvExport"
    # The late penalty: nbgrader's own mechanism (`nbgrader autograde` in the working directory uses it too).
    settings = settings or CourseSettings()
    c.AssignLatePenalties.plugin_class = settings.penalty_plugin
    for name, value in settings.penalty_options.items():
        c[settings.penalty_plugin.rsplit(".", 1)[-1]][name] = value
    return c


def write_config_file(workdir: Path, config: Config) -> Path:
    """Write <workdir>/nbgrader_config.py with the same settings, so nbgrader's own commands
    (`nbgrader autograde`, `nbgrader formgrader`, ...) work in the working directory too."""
    lines = ["# Written by `python -m autograder` from autograder/config.py; edits are overwritten.",
             "import sys",
             f"if {str(registry.ROOT)!r} not in sys.path:  # the course's plugins (export, late penalty)",
             f"    sys.path.insert(0, {str(registry.ROOT)!r})",
             "c = get_config()"]
    for section, traits in config.items():
        for name, value in traits.items():
            lines.append(f"c.{section}.{name} = {value!r}")
    path = Path(workdir) / "nbgrader_config.py"
    atomic_write(path, "\n".join(lines) + "\n")  # a failed write (disk full) leaves the old file whole
    return path


def ensure_venv_on_path():
    """nbgrader shells out to `alembic`, and kernels start as `python`: both must be this environment's."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


def alembic_head_in_process():
    """nbgrader stamps a new gradebook with its migrations' head revision, read by running `alembic heads` in a
    subprocess (about 3 s: a fresh Python importing nbgrader). The same revision, read here from the same
    alembic.ini and migration scripts, takes a tenth of a second; nbgrader_api makes nbgrader use it."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader import api

    with api._temp_alembic_ini("sqlite:////tmp/gradebook.db") as alembic_ini:
        return ScriptDirectory.from_config(Config(alembic_ini)).get_current_head()


class SchemaCheckedOnce:
    """What nbgrader's cell-metadata validator uses of jsonschema: `validate`, as jsonschema.validate (the same
    validator class, the same error raised), except that the schema itself is checked against its metaschema once
    per schema, not once per cell. nbgrader checks its own fixed schema again for every cell of every notebook it
    releases or grades: 1.2 s of the 5.4 s nbgrader takes to release the nine chapters."""

    _validators: dict = {}

    @classmethod
    def validate(cls, instance, schema):
        import jsonschema

        key = json.dumps(schema, sort_keys=True)
        if key not in cls._validators:
            validator_class = jsonschema.validators.validator_for(schema)
            validator_class.check_schema(schema)
            cls._validators[key] = validator_class(schema)
        error = jsonschema.exceptions.best_match(cls._validators[key].iter_errors(instance))
        if error is not None:
            raise error


def nbgrader_api(workdir: Path, cell_timeout: int = CELL_TIMEOUT_S, settings: CourseSettings | None = None, db_url: str | None = None):
    ensure_venv_on_path()
    import nbgrader.api
    import nbgrader.nbgraderformat.common
    from nbgrader.apps import NbGraderAPI

    nbgrader.api.get_alembic_version = alembic_head_in_process
    nbgrader.nbgraderformat.common.jsonschema = SchemaCheckedOnce
    from nbgrader.coursedir import CourseDirectory

    config = nbgrader_config(workdir, cell_timeout, settings, db_url)
    Path(workdir).mkdir(parents=True, exist_ok=True)
    write_config_file(workdir, config)
    return NbGraderAPI(CourseDirectory(config=config), config=config)
