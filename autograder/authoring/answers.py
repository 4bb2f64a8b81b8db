"""The types of a chapter's test data, `autograder/source/<chapter>/answers.py`: typical wrong answers and valid
alternatives, each as edits of the reference source in solutions/ (nothing typed twice).

The data is read by the tests (the chapter contract, learner trials), the demo and scripts: never by a grading
host, which loads only the chapter's checks.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class WrongAnswer:
    """A typical mistake, as an edit of the reference source of one solution cell (for the end-to-end and
    learner-trial tests, and the demo). Nothing is typed twice: the submission is the reference plus this edit."""

    function: str  # grade id of the solution cell it edits
    old: str  # text of the reference source that is replaced
    new: str
    diagnosis: str  # a fragment the hidden check's message must contain
    fails: frozenset = frozenset()  # hidden-test grade ids that must lose points (default: <function>_hidden)
    category: str = "values"  # values | shape | dtype | device | large | generator | gradient | weights | typed
    visible: bool = True  # the visible check catches it too
    also: tuple = ()  # further edits of other cells, Edit(...) each: e.g. a correct caller written in another call pattern

    @property
    def failing_cells(self) -> frozenset:
        return frozenset(self.fails) or frozenset({f"{self.function}_hidden"})

    @property
    def edits(self) -> tuple:
        return (Edit(self.function, self.old, self.new),) + tuple(self.also)


@dataclass(frozen=True)
class Edit:
    """One edit of the reference source of a solution cell (by grade id): `old` replaced by `new` once;
    old="" replaces the whole cell with `new` (a function written in another style from scratch)."""

    function: str
    old: str
    new: str


@dataclass(frozen=True)
class ValidAnswer:
    """A correct answer written unlike the reference (loops, einsum, torch.func, another call pattern of a
    callee): edits of the reference sources that must keep full marks, visibly and hidden, on every seed."""

    edits: tuple  # Edit(...) each
    why: str = ""  # what makes it different from the reference
