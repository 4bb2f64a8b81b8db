"""The course's nbgrader tooling: notebook builder, check library and grading CLI (python -m autograder)."""
