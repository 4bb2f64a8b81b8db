"""Find forbidden shortcuts in a learner's solution cell by reading its code (it is never run here).

The grading process parses each solution cell (Python's `ast`, no execution) and reports:
- a forbidden built-in named in the code: `torch.softmax(...)`, `x.softmax(-1)`, `F.scaled_dot_product_attention`,
  `from torch.nn.functional import softmax`, or the name as a string (`getattr(F, "softmax")`);
- an import of the course's own packages (`solutions`, `autograder`);
- code that hides what it calls (eval, exec, compile, __import__, importlib, getattr with a computed name),
  since the grader cannot tell what such code reaches.
The sandboxed run adds a second, dynamic check (a torch function mode around each call, see runner.py)
that also catches built-ins reached through helpers and aliases. This static one cannot be switched off by
the learner's code, because it runs in the grading process.
"""

import ast

COURSE_PACKAGES = ("solutions", "autograder")
HIDING = {"eval", "exec", "compile", "__import__", "importlib", "globals", "vars", "__builtins__", "sys.modules"}


def scan(source: str, forbidden_names) -> list[str]:
    """Human-readable findings for one cell's source; [] when it is clean or does not parse."""
    forbidden_names = set(forbidden_names)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []  # the cell fails when it runs, which the grader reports on its own
    found = []

    def note(text):
        if text not in found:
            found.append(text)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in forbidden_names:
            note(f"uses the built-in `{node.attr}`")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in forbidden_names:
            note(f"names the built-in `{node.value}` in a string")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in COURSE_PACKAGES:
                    note(f"imports the course's own `{module}`")
                if module.split(".")[0] == "importlib":
                    note("uses importlib, which hides what it imports")
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name in forbidden_names:
                        note(f"imports the built-in `{alias.name}`")
        elif isinstance(node, ast.Name) and node.id in HIDING:
            note(f"uses `{node.id}`, which hides what the code calls")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant):
                note("uses getattr with a computed name, which hides what the code calls")
    return found
