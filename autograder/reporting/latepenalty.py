"""Due dates and late penalties, on nbgrader's own mechanism.

The due date of each chapter is the nbgrader assignment's `duedate`, a student's extension the
submission's `extension`, the submission time its `timestamp`; the penalty is computed by the
`AssignLatePenalties.plugin_class` (an nbgrader `LateSubmissionPlugin`) and stored, clamped by nbgrader's
own rule (never below 0, never above the score), in `SubmittedNotebook.late_submission_penalty`: exactly
what `nbgrader autograde` would do, so formgrader and `nbgrader export` show the same numbers.

The penalty is recomputed from the current score (manual grades included) whenever reports are built.
"""

import math

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Float


class PerDayPenalty(LateSubmissionPlugin):
    """A share of the score per started day late, after a grace period, up to a maximum.

    In course.toml: [late_penalty] percent_per_day = 10, grace_minutes = 15, max_percent = 50."""

    percent_per_day = Float(10.0, help="percent of the notebook's score taken per started day late").tag(config=True)
    grace_minutes = Float(0.0, help="minutes after the due date that are not counted as late").tag(config=True)
    max_percent = Float(100.0, help="the largest penalty, in percent of the score").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float):
        late = total_seconds_late - 60 * self.grace_minutes
        if late <= 0:
            return 0.0
        days = math.ceil(late / 86400)
        return score * min(self.max_percent, self.percent_per_day * days) / 100.0


def apply_due_dates(gradebook, settings, submissions=()):
    """Due dates and extensions from the course configuration into the gradebook, and the submission times
    of `submissions` (those found in this run).

    A chapter the configuration does not name keeps the due date it has (formgrader can set one). Extensions
    come from the configuration only: when there is a configuration file, every submission gets the
    extension it names (or none); without one, the gradebook is left as it is."""
    from nbgrader.api import MissingEntry, SubmittedAssignment

    for chapter, due in settings.due.items():
        try:
            assignment = gradebook.find_assignment(chapter)
        except MissingEntry:
            continue
        if assignment.duedate != due:
            assignment.duedate = due
    for sub in submissions:
        if sub.timestamp is None:
            continue
        try:
            submission = gradebook.find_submission(sub.chapter, sub.student)
        except MissingEntry:
            continue
        if submission.timestamp != sub.timestamp:
            submission.timestamp = sub.timestamp
    if settings.path is not None:
        for submission in gradebook.db.query(SubmittedAssignment).all():
            extension = settings.extension(submission.assignment.name, submission.student_id)
            if submission.extension != extension:
                submission.extension = extension
    gradebook.db.commit()


def assign_penalties(gradebook, config, chapters=None):
    """Recompute every submitted notebook's late penalty with the configured nbgrader plugin.
    Returns {(student, chapter): penalty} for the late ones."""
    from nbgrader.api import SubmittedAssignment
    from nbgrader.preprocessors import AssignLatePenalties

    preprocessor = AssignLatePenalties(config=config)
    preprocessor.init_plugin()
    penalties = {}
    for submission in gradebook.db.query(SubmittedAssignment).all():
        chapter = submission.assignment.name
        if chapter not in (chapters or [chapter]):
            continue
        late = submission.total_seconds_late if submission.assignment.duedate is not None else 0
        for notebook in submission.notebooks:
            penalty = None
            if late > 0:
                penalty = preprocessor.plugin_inst.late_submission_penalty(submission.student.id, notebook.score, late)
                if penalty is not None:
                    penalty = preprocessor._check_late_penalty(notebook, penalty)  # nbgrader's clamp: 0 <= penalty <= score
                    penalties[(submission.student.id, chapter)] = penalty
            if notebook.late_submission_penalty != penalty:
                notebook.late_submission_penalty = penalty
    gradebook.db.commit()
    return penalties
