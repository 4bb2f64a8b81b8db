"""Find forbidden shortcuts in a learner's solution cell by reading its code (it is never run here).

The grading process parses each solution cell (Python's `ast`, no execution) and reports (the names a chapter
refuses are its SHORTCUT_NAMES, composed from the groups of autograder/checks/builtins.py):
- a forbidden built-in named in the code: `torch.softmax(...)`, `x.softmax(-1)`, `F.scaled_dot_product_attention`,
  `from torch.nn.functional import softmax`, or the name as a string (`getattr(F, "softmax")`);
- an import of the course's own packages (`solutions`, `autograder`);
- code that hides what it calls (eval, exec, compile, __import__, importlib), and computed access to torch's or
  Python's namespaces: getattr with a computed name on a module (never on the learner's own objects:
  `getattr(self, f"norm{i}")` is ordinary PyTorch), operator.attrgetter / methodcaller, getattr passed as a value
  (functools.reduce(getattr, ...)), the builtins module, a module's __dict__[...], sys.modules. Such a note is a hint
  for the reader; what is really called is decided at run time (the sandbox's guard).
The sandboxed run adds a second, dynamic check (a torch function mode around each call, see runner.py)
that also catches built-ins reached through helpers and aliases. This static one cannot be switched off by
the learner's code, because it runs in the grading process.
"""

import ast

COURSE_PACKAGES = ("solutions", "autograder")
HIDING = {"eval", "exec", "compile", "__import__", "importlib", "globals", "__builtins__", "attrgetter", "methodcaller"}
# Modules a learner's cell may name whose attributes reach torch or Python itself (plus the cell's torch aliases).
NAMESPACES = {"builtins", "sys", "operator", "functools", "importlib", "types", "inspect", "torch", "F", "nn"}


def _root(node):
    """The name an expression starts from (`torch` for torch.nn.functional, `self` for self.norm1), or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _modules_named(tree) -> set[str]:
    """The names a cell binds to modules (its imports, torch's aliases) and the usual namespaces."""
    names = set(NAMESPACES) | _torch_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


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

    modules = _modules_named(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in forbidden_names:
            note(f"uses the built-in `{node.attr}`")
        elif isinstance(node, ast.Attribute) and node.attr in ("attrgetter", "methodcaller"):
            note(f"uses `{node.attr}`, which hides what the code calls")
        elif isinstance(node, ast.Attribute) and node.attr in ("modules", "__dict__", "getattr", "__getattribute__") and _root(node) in modules:
            note(f"reaches `{_root(node)}.{node.attr}`, which hides what the code calls")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                (a.name if isinstance(node, ast.Import) else node.module or "").split(".")[0] == "builtins" for a in node.names):
            note("imports builtins, which hides what the code calls")
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
            if len(node.args) >= 2 and not isinstance(node.args[1], ast.Constant) and (_root(node.args[0]) in modules or _root(node.args[0]) is None):
                note("uses getattr with a computed name on a module, which hides what the code calls")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars":
            if not node.args or _root(node.args[0]) in modules or _root(node.args[0]) is None:
                note("uses `vars` on a module, which hides what the code calls")
        elif isinstance(node, ast.Name) and node.id in ("getattr", "vars") and isinstance(node.ctx, ast.Load) and not _called(node, tree):
            note("passes getattr as a value (e.g. to functools.reduce), which hides what the code calls")
    return found


HIDES = "hides what"  # the notes on code that hides what it calls or imports (see hides)


def hides(note: str) -> bool:
    """Is this note about code that hides what it calls (computed access, eval, importlib), rather than a forbidden
    built-in or a course package named in the code? Such a note is a hint where the sandbox's guard decides the
    exercise's rule at run time (builtins.enforced_at_run_time)."""
    return HIDES in note


def _called(name_node, tree) -> bool:
    """Is this Name the function of a call (getattr(...)) rather than a value passed on?"""
    return any(isinstance(n, ast.Call) and n.func is name_node for n in ast.walk(tree))


# --- Private torch machinery ------------------------------------------------------------------------
# The grader observes learner calls with a torch function mode and a dispatch mode. torch's private API
# (torch._C, the mode stacks, DisableTorchFunction, ...) can switch that observation off, so learner code
# that reaches it earns no points for the exercise it serves. Public torch code never needs it.

TORCH_MODULES = ("torch",)
MODE_MACHINERY = {
    "DisableTorchFunction", "DisableTorchFunctionSubclass", "TorchFunctionMode", "TorchDispatchMode", "overrides",
    "_python_dispatch", "_disable_current_modes", "_pop_mode", "_push_mode", "_pop_mode_temporarily",
    "_get_current_dispatch_mode", "_len_torch_function_stack", "_pop_torch_function_stack", "_push_on_torch_function_stack",
    "_set_torch_function_mode", "_unset_dispatch_mode", "_set_dispatch_mode", "_DisableTorchDispatch", "_C",
    "_disabled_torch_function_impl", "_is_torch_function_mode_enabled", "_ExcludeDispatchKeyGuard",
}


def _torch_aliases(tree) -> set[str]:
    """Names that refer to torch or one of its submodules in this cell (plus the notebook's usual ones)."""
    aliases = {"torch", "F", "nn"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in TORCH_MODULES:
                    aliases.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TORCH_MODULES:
            aliases.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Assign) and isinstance(node.value, (ast.Name, ast.Attribute)):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return aliases


def _private(name: str) -> bool:
    return name in MODE_MACHINERY or (name.startswith("_") and not name.startswith("__"))


def private_machinery(source: str) -> list[str]:
    """Findings of torch private machinery in one cell's source; [] when there is none or it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    aliases = _torch_aliases(tree)
    found = []

    def note(text):
        if text not in found:
            found.append(text)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root, chain = node, []
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases and any(_private(a) for a in chain):
                note(f"reaches torch's private machinery (`{'.'.join([root.id] + chain[::-1])}`)")
            elif node.attr in MODE_MACHINERY - {"overrides", "_C"}:
                note(f"uses `{node.attr}`, torch's mode machinery")
        elif isinstance(node, ast.Name) and node.id in MODE_MACHINERY - {"overrides", "_C"}:
            note(f"uses `{node.id}`, torch's mode machinery")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                parts = module.split(".")
                if parts[0] in TORCH_MODULES and any(_private(p) for p in parts[1:]):
                    note(f"imports torch's private machinery (`{module}`)")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in TORCH_MODULES:
                for name in names:
                    if _private(name):
                        note(f"imports torch's private machinery (`{name}` from `{node.module}`)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            parts = node.value.split(".")
            if all(p.isidentifier() for p in parts) and any(p in MODE_MACHINERY for p in parts):
                note(f"names torch's private machinery in a string (`{node.value}`)")
    return found


def parse(source: str):
    """The cell's syntax tree, with IPython magics dropped as the runner drops them; None when it does not parse."""
    from autograder.checks.runner import _strip_magics

    try:
        return ast.parse(_strip_magics(source))
    except (SyntaxError, ValueError):
        return None


def bound_by(statement) -> set[str]:
    """The top-level names one top-level statement binds (a def, a class, an assignment, an import)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    names = set()
    if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    names.add(leaf.id)
    elif isinstance(statement, (ast.Import, ast.ImportFrom)):
        names.update((a.asname or a.name).split(".")[0] for a in statement.names)
    return names


def defined_names(source: str) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments); empty when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    return {name for node in tree.body for name in bound_by(node)}


def definitions(source: str) -> dict[str, str] | None:
    """{top-level name: the code that binds it (its statements as syntax, so comments and layout do not count; for an
    import, that name's own import)}; None when the cell does not parse."""
    tree = parse(source)
    if tree is None:
        return None
    found = {}
    for node in tree.body:
        for name in bound_by(node):
            found[name] = found.get(name, "") + _binding(node, name)
    return found


def _binding(statement, name: str) -> str:
    """What one statement binds `name` to, as text: for an import, that name's import alone (so another name
    added to the same import line changes nothing for this one); else the statement's syntax."""
    if isinstance(statement, ast.Import):
        return "".join(f"import {a.name} as {a.asname};" if a.asname else f"import {a.name.split('.')[0]};"
                       for a in statement.names if (a.asname or a.name).split(".")[0] == name)
    if isinstance(statement, ast.ImportFrom):
        return "".join(f"from {'.' * statement.level}{statement.module or ''} import {a.name};"
                       for a in statement.names if (a.asname or a.name) == name)
    return ast.dump(statement)


def changed_names(course: str, edited: str) -> set[str]:
    """The names an edit of a course cell defines, imports or defines otherwise than the course's version does:
    what code that relies on the edit may miss when the course's version runs in its place."""
    theirs, ours = definitions(edited), definitions(course) or {}
    if theirs is None:
        return set()
    return {name for name, code in theirs.items() if ours.get(name) != code}


def read_names(source: str) -> set[str]:
    """The names a cell reads that it does not bind anywhere itself (globals it relies on: imports, helpers
    and functions of other cells); empty when it does not parse."""
    tree = parse(source)
    if tree is None:
        return set()
    read, bound = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return read - bound


def reads_name(statement, name: str) -> bool:
    """Does this top-level statement read `name`, anywhere in it (a function's body too: calling that function
    later reads the binding `name` has then)? A def or class OF `name` reads only its decorators, defaults, bases
    and keywords (its body refers to the new definition: recursion, super()). The name in a string counts as a
    read too (`globals()["name"]`)."""
    parts = [statement]
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == name:
        parts = [*statement.decorator_list, *statement.args.defaults, *[d for d in statement.args.kw_defaults if d]]
    elif isinstance(statement, ast.ClassDef) and statement.name == name:
        parts = [*statement.decorator_list, *statement.bases, *[k.value for k in statement.keywords]]
    return any((isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load))
               or (isinstance(n, ast.Constant) and n.value == name) for part in parts for n in ast.walk(part))
