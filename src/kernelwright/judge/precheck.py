"""What the candidate's source alone settles, read before any child process starts.

The read is `ast` only: the candidate is parsed, never imported or run (the judge's contract). It
answers only where the children could not answer otherwise, with the status they would give and a
plainer reason: no `ModelNew` bound anywhere (compile_error, as the import finds none), and a
`ModelNew.__init__` or `forward` that cannot take the positional arguments the judge passes
(runtime_error, as the failing call is). Syntax errors are discovery's (judge.candidate). Anything
the source could decide only when it runs (star imports, exec, globals(), decorators, metaclasses,
base classes defined elsewhere) leaves the question to the children: a wrong answer here would be a
wrong verdict, a missing one only costs the seconds of the dynamic path.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path

from kernelwright import pysource
from kernelwright.judge.records import Status

NAME = "ModelNew"
# Names and attributes through which code can bind a module name without saying it: their presence
# in any of the candidate's Python files leaves "is there a ModelNew?" to the import.
DYNAMIC_NAMES = {"exec", "eval", "compile", "globals", "locals", "vars", "setattr", "__import__", "__builtins__", "importlib"}
DYNAMIC_ATTRS = {"__dict__", "import_module", "__setattr__", "f_globals", "f_locals", "_getframe", "currentframe", "f_back",
                 "exec_module"}
DYNAMIC_MODULES = {"importlib", "inspect", "builtins", "ctypes", "sys"}  # `from M import ...` of these, or `M.modules`
# Class-body names that take a call's arguments away from __init__ or forward.
CALL_HOOKS = {"__init__": ("__new__", "__signature__", "__init_subclass__", "__class_getitem__"),
              "forward": ("__call__", "__getattr__", "__getattribute__", "_call_impl", "__signature__")}
# How a base spells torch.nn.Module -> the imports (module, name or None, bound as) that make it so.
TORCH_MODULE = {"nn.Module": {("torch.nn", None, "nn"), ("torch", "nn", "nn")},
                "torch.nn.Module": {("torch", None, "torch"), ("torch.nn", None, "torch")},
                "Module": {("torch.nn", "Module", "Module")}}


@dataclass(frozen=True)
class Early:
    """A verdict the static read reached."""

    status: Status  # what the dynamic path would conclude
    reason: str  # plain words, naming the candidate's file and line


@dataclass(frozen=True)
class Arity:
    """How many positional arguments (self left out) a method can take."""

    low: int  # the fewest
    high: float  # the most (inf with *args)
    text: str  # its parameters as written, for the reason
    line: int  # where it is defined
    kwonly: tuple[str, ...] = ()  # keyword-only parameters without a default: a positional call never fills them

    def accepts_any(self, low: int, high: float) -> bool:
        """Whether some count in [low, high] is one it takes."""
        return not self.kwonly and max(low, self.low) <= min(high, self.high)


def precheck(problem_source: str, main: Path, root: Path) -> Early | None:
    """The verdict the source of the candidate (`main`, its other files under `root`) settles
    against the problem's source, or None when only running it can tell. `main` must parse."""
    tree = pysource.parse(main.read_text(errors="replace"), filename=str(main))
    try:
        ref = pysource.parse(problem_source)
    except SyntaxError:
        return None  # the problem's loader reports it
    if not _binds(tree, NAME) and not any(_dynamic(t) for t in _python_trees(root, main, tree)):
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        seen = f" (classes it defines: {', '.join(classes)})" if classes else ""
        return Early(Status.COMPILE_ERROR, f"{main}: the candidate defines no class {NAME}{seen}; "
                                           f"the judge constructs {NAME}(*get_init_inputs()) and calls it as Model is called")
    return _signatures(tree, ref, str(main))


def _signatures(tree: ast.Module, ref: ast.Module, file: str) -> Early | None:
    for method, feeder in (("__init__", "get_init_inputs"), ("forward", "get_inputs")):
        mine = _method_arity(tree, NAME, method)
        if mine is None:
            continue
        count = _returned_length(ref, feeder)
        theirs = _method_arity(ref, "Model", method)
        low, high = (count, count) if count is not None else (theirs.low, theirs.high) if theirs is not None else (0, math.inf)
        if mine.accepts_any(low, high):
            continue
        given = f"the {count} positional argument(s) of {feeder}()" if count is not None else f"what {feeder}() gives"
        model = f"; Model.{method} takes ({theirs.text})" if theirs is not None else ""
        extra = f" (keyword-only without a default: {', '.join(mine.kwonly)})" if mine.kwonly else ""
        call = f"{NAME}(*{feeder}())" if method == "__init__" else f"model(*{feeder}())"
        return Early(Status.RUNTIME_ERROR, f"{file}:{mine.line}: {NAME}.{method}({mine.text}) cannot take {given}{extra}: "
                                           f"the judge calls {call}{model}")
    return None


# ---- does the module bind the name? --------------------------------------------------------------


def _binds(tree: ast.Module, name: str) -> bool:
    """Whether the module binds `name` anywhere, in any way the source spells it out (a string
    holding the name counts: it may become code or a key; a docstring does not)."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Name, ast.Attribute)) and getattr(node, "id", getattr(node, "attr", None)) == name \
                and not isinstance(node.ctx, ast.Load):
            return True
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name.split(".")[0]) == name:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value and id(node) not in docs:
            return True
    return False


def _docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants of the module, its classes and functions."""
    out = set()
    for owner in ast.walk(tree):
        if isinstance(owner, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and owner.body:
            first = owner.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _dynamic(tree: ast.Module) -> bool:
    """Whether the module could bind names it never spells out (star imports, exec, globals(),
    sys.modules, frames, ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (any(a.name == "*" for a in node.names) or (node.module or "").split(".")[0] in DYNAMIC_MODULES):
            return True
        if isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
            return True
        if isinstance(node, ast.Attribute) and (node.attr in DYNAMIC_ATTRS or (node.attr == "modules" and ast.unparse(node.value) == "sys")):
            return True
        if isinstance(node, ast.alias) and node.name.split(".")[0] in DYNAMIC_MODULES - {"sys"}:
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__getattr__", "__dir__") and node in tree.body:
            return True
    return False


def _python_trees(root: Path, main: Path, tree: ast.Module) -> list[ast.Module]:
    """The main module's tree and every other Python file's of the candidate (any of them, imported,
    could reach into the main module); one that does not parse is left out: its import fails before
    it binds anything."""
    trees = [tree]
    for file in sorted(root.rglob("*.py")):
        if file.resolve() == main.resolve():
            continue
        try:
            trees.append(pysource.parse(file.read_text(errors="replace"), filename=str(file)))
        except (SyntaxError, ValueError):
            continue
    return trees


# ---- signatures ----------------------------------------------------------------------------------


def _module_def(tree: ast.Module, name: str, kind: type | tuple[type, ...]) -> ast.AST | None:
    """The one unconditional module-level definition of `name` (of `kind`), when nothing else in the
    module binds the name; else None."""
    found = [n for n in tree.body if isinstance(n, kind) and getattr(n, "name", None) == name]
    if len(found) != 1:
        return None
    others = sum(1 for n in ast.walk(tree) if (isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
                 or (isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load))
                 or (isinstance(n, ast.alias) and (n.asname or n.name.split(".")[0]) == name))
    return found[0] if others == 1 and not _dynamic(tree) else None


def _method_arity(tree: ast.Module, cls_name: str, method: str) -> Arity | None:
    """What `cls_name.method` takes, when the module settles it: the class defined once, plainly
    (no decorator, no metaclass), its method defined plainly in its body or inherited from
    torch.nn.Module (`__init__` only); None otherwise."""
    cls = _module_def(tree, cls_name, ast.ClassDef)
    if not isinstance(cls, ast.ClassDef) or cls.decorator_list or cls.keywords:
        return None
    body_names = _class_binders(cls)
    if any(hook in body_names for hook in CALL_HOOKS[method]):
        return None
    binders = body_names.get(method, [])
    if not binders:
        if method == "__init__" and len(cls.bases) == 1 and _is_torch_module(tree, cls.bases[0]):
            return Arity(0, 0, "self (torch.nn.Module's)", cls.lineno)
        return None
    last = binders[-1]
    if not isinstance(last, ast.FunctionDef) or last.decorator_list or not all(_is_plain_base(tree, b) for b in cls.bases):
        return None
    return _arity(last)


def _class_binders(cls: ast.ClassDef) -> dict[str, list[ast.stmt]]:
    """{name: statements of the class body binding it, in order}; a name bound inside a compound
    statement is recorded with that statement (never a plain def)."""
    out: dict[str, list[ast.stmt]] = {}
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.setdefault(stmt.name, []).append(stmt)
            continue
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                out.setdefault(node.id, []).append(stmt)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.setdefault(node.name, []).append(stmt)
    return out


def _is_plain_base(tree: ast.Module, base: ast.expr) -> bool:
    """torch.nn.Module, or a class of this module defined plainly on it alone (no call hooks)."""
    if _is_torch_module(tree, base):
        return True
    if not isinstance(base, ast.Name):
        return False
    cls = _module_def(tree, base.id, ast.ClassDef)
    if not isinstance(cls, ast.ClassDef) or cls.decorator_list or cls.keywords or len(cls.bases) != 1:
        return False
    names = _class_binders(cls)
    hooks = {h for hs in CALL_HOOKS.values() for h in hs} | {"__init__", "forward"}
    return not (hooks & names.keys()) and _is_torch_module(tree, cls.bases[0])


def _is_torch_module(tree: ast.Module, base: ast.expr) -> bool:
    """Whether `base` spells torch.nn.Module through one of the usual imports of the module."""
    ways = TORCH_MODULE.get(ast.unparse(base), set())
    for node in tree.body:
        if isinstance(node, ast.Import):
            got = {(a.name, None, a.asname or a.name.split(".")[0]) for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            got = {(node.module, a.name, a.asname or a.name) for a in node.names}
        else:
            continue
        if got & ways:
            return True
    return False


def _arity(fn: ast.FunctionDef) -> Arity:
    args = fn.args
    params = args.posonlyargs + args.args
    n_default = len(args.defaults)
    text = ast.unparse(args)
    text = text if len(text) <= 120 else text[:117] + "..."
    kwonly = tuple(a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None)
    high = math.inf if args.vararg else len(params)
    low = max(0, len(params) - n_default)
    if not params and not args.vararg:  # not even self: no call can reach it
        return Arity(1, 0, text, fn.lineno, kwonly)
    return Arity(max(0, low - 1), high - 1, text, fn.lineno, kwonly)


def _returned_length(tree: ast.Module, func: str) -> int | None:
    """How many items `func()` of the module returns, when its only return is its last statement
    and a list or tuple written out (no starred item)."""
    fn = _module_def(tree, func, ast.FunctionDef)
    if not isinstance(fn, ast.FunctionDef) or fn.decorator_list or fn.args.args or fn.args.vararg:
        return None
    returns = [n for n in ast.walk(fn) if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom))]
    last = fn.body[-1]
    if returns != [last] or not isinstance(last, ast.Return) or not isinstance(last.value, (ast.List, ast.Tuple)):
        return None
    if any(isinstance(e, ast.Starred) for e in last.value.elts):
        return None
    return len(last.value.elts)
