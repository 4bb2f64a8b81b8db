"""The package's rooms (autograder/__init__.py): every import points down the layers, there are no cycles, and the
modules at the bottom (results, and the reporting room that `nbgrader export` loads) import no torch.

Layers, bottom first: results/registry/config, checks, authoring, reporting, grading, the CLI. A module may import
from its own room or a room below; checks/runner.py and checks/visible.py run alone (in the sandbox, in a
learner's notebook) and import nothing of the course.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autograder"
LAYERS = {"results": 0, "registry": 0, "config": 0, "checks": 1, "authoring": 2, "reporting": 3, "grading": 4, "__main__": 5}
STANDALONE = ("autograder.checks.runner", "autograder.checks.visible")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def course_imports(path: Path) -> set[str]:
    """The autograder modules a file imports (anywhere in it, functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("autograder")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("autograder"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists()
                          or (PACKAGE.parent / candidate.replace(".", "/")).is_dir() else node.module)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): course_imports(p) for p in PACKAGE.rglob("*.py") if "source" not in p.relative_to(PACKAGE).parts}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def wrong_arrows(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for module, imported in edges.items():
        for target in imported:
            if target == "autograder":
                continue
            if module in STANDALONE:
                bad.append(f"{module} runs alone but imports {target}")
            elif room(module) in LAYERS and room(target) in LAYERS and LAYERS[room(target)] > LAYERS[room(module)]:
                bad.append(f"{module} ({room(module)}) imports {target} ({room(target)}), a room above it")
    return bad


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for target in sorted(edges.get(node, ())):
            if target == node or target not in edges:
                continue
            if state.get(target) == "open":
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return found


def test_imports_point_down_the_layers():
    assert wrong_arrows(graph()) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_the_checks_find_a_wrong_arrow_and_a_cycle():
    """The two rules on a made-up graph: they fail where they should (so the tests above can fail)."""
    edges = {"autograder.results": {"autograder.grading.notebook"}, "autograder.grading.notebook": {"autograder.results"}}
    assert wrong_arrows(edges) == ["autograder.results (results) imports autograder.grading.notebook (grading), a room above it"]
    assert cycles(edges) == [["autograder.grading.notebook", "autograder.results", "autograder.grading.notebook"]]
    assert wrong_arrows({"autograder.checks.runner": {"autograder.registry"}}) != []


@pytest.mark.parametrize("module", ["autograder.results", "autograder.registry", "autograder.reporting.reports", "autograder.reporting.feedback"])
def test_the_bottom_and_the_reports_import_no_torch(module):
    code = f"import sys, {module}; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout.strip() == "False", f"importing {module} imports torch"
