"""What the candidate's source alone settles, read before any child process starts.

The read is `ast` only: the candidate is parsed, never imported or run (the judge's contract). It
answers only where the children could not answer otherwise, with the status they would give and a
plainer reason: no `ModelNew` (compile_error, as the import finds none), a `ModelNew.__init__` or
`forward` that cannot take the positional arguments the judge passes (runtime_error, as the failing
call is). Syntax errors are discovery's (judge.candidate). It answers only for an *inert* module:
one whose import cannot fail, hang, build or touch anything (a few known imports, constants,
plain classes and functions; `runtime.load` of constant sources once the judge has built them),
so the children could meet nothing before the mistake it names. Anything else (calls at import,
other imports, decorators, metaclasses, annotations it cannot vouch for) leaves the question to
the children: a wrong answer here would be a wrong verdict, a missing one only costs the seconds
of the dynamic path.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from pathlib import Path

from kernelwright import pysource
from kernelwright.core.records import Status

NAME = "ModelNew"
# Past these the read does not answer (its checks grow with the square of the top-level statements).
MAX_SOURCE_CHARS = 256 * 1024
MAX_STATEMENTS = 400
MAX_CLASSES_NAMED = 5  # in the reason "defines no class ModelNew (classes it defines: ...)"
# Imports that cannot fail in a judge child (which has torch and kernelwright), and bind only what they say.
SAFE_IMPORTS = {"torch", "torch.nn", "torch.nn.functional", "math", "kernelwright.runtime"}
SAFE_FROM = {("torch", "nn"), ("torch", "Tensor"), ("torch.nn", "functional"), ("torch.nn", "Module"), ("__future__", "annotations"),
             ("kernelwright", "runtime"), ("kernelwright.runtime", "load"), ("typing", "Optional"), ("typing", "Any")}
SAFE_ANNOTATIONS = {"int", "float", "bool", "str", "None", "list", "tuple", "dict", "torch.Tensor", "Tensor"}
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


def precheck(problem_source: str, main: Path, *, built: bool = False) -> Early | None:
    """The verdict the candidate's source (`main`, which must parse) settles against the problem's
    source, or None when only running it can tell. `built`: the judge has built the raw sources
    that discovery found, so `runtime.load` of constant sources cannot fail at import."""
    text = main.read_text(errors="replace")
    if len(text) > MAX_SOURCE_CHARS:
        return None  # a long module's question is the children's: the read stays cheap for any input
    tree = pysource.parse(text, filename=str(main))
    if len(tree.body) > MAX_STATEMENTS:
        return None
    try:
        ref = pysource.parse(problem_source)
    except SyntaxError:
        return None  # the problem's loader reports it
    if not _Inert(tree, built).module():
        return None
    if NAME not in _top_level_names(tree):
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        more = f", and {len(classes) - MAX_CLASSES_NAMED} more" if len(classes) > MAX_CLASSES_NAMED else ""
        seen = f" (classes it defines: {', '.join(classes[:MAX_CLASSES_NAMED])}{more})" if classes else ""
        return Early(Status.COMPILE_ERROR, f"{main}: the candidate defines no class {NAME}{seen}; "
                                           f"the judge constructs {NAME}(*get_init_inputs()) and calls it as Model is called")
    return _signatures(tree, ref, str(main))


def _signatures(tree: ast.Module, ref: ast.Module, file: str) -> Early | None:
    """__init__ first, as the judge constructs before it calls; forward only when construction
    can do nothing but bind attributes (else what __init__ does is the children's to see)."""
    init = _fits(tree, ref, file, "__init__", "get_init_inputs")
    if init is not True:
        return init
    forward = _fits(tree, ref, file, "forward", "get_inputs") if _plain_init(tree) else None
    return forward if isinstance(forward, Early) else None


def _fits(tree: ast.Module, ref: ast.Module, file: str, method: str, feeder: str) -> Early | bool | None:
    """True when ModelNew.method takes what the judge passes, an Early when it cannot, None when
    the source does not settle it."""
    mine = _method_arity(tree, NAME, method)
    if mine is None:
        return None
    count = _returned_length(ref, feeder)
    theirs = _method_arity(ref, "Model", method)
    low, high = (count, count) if count is not None else (theirs.low, theirs.high) if theirs is not None else (0, math.inf)
    if mine.accepts_any(low, high):
        return True
    given = f"the {count} positional argument(s) of {feeder}()" if count is not None else f"what {feeder}() gives"
    model = f"; Model.{method} takes ({theirs.text})" if theirs is not None else ""
    extra = f" (keyword-only without a default: {', '.join(mine.kwonly)})" if mine.kwonly else ""
    call = f"{NAME}(*{feeder}())" if method == "__init__" else f"model(*{feeder}())"
    return Early(Status.RUNTIME_ERROR, f"{file}:{mine.line}: {NAME}.{method}({mine.text}) cannot take {given}{extra}: "
                                       f"the judge calls {call}{model}")


# ---- is the module inert? ------------------------------------------------------------------------


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


class _Inert:
    """Whether importing a module can do nothing but bind its names: every statement at its top
    level (and in its classes' bodies) is one that cannot fail, loop, build or reach elsewhere."""

    def __init__(self, tree: ast.Module, built: bool) -> None:
        self.tree, self.built = tree, built
        self.lazy = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and any(a.name == "annotations" for a in n.names)
                        for n in tree.body)  # annotations are never evaluated
        self.constants = {t.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
                          for t in n.targets if isinstance(t, ast.Name)}
        self.loaders = self._loaders()

    def module(self) -> bool:
        return all(self._statement(n, top=True) for n in self.tree.body)

    def _statement(self, node: ast.stmt, top: bool) -> bool:
        if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            return True
        if isinstance(node, ast.Import):
            return top and all(a.name in SAFE_IMPORTS for a in node.names)
        if isinstance(node, ast.ImportFrom):
            return top and node.level == 0 and all((node.module, a.name) in SAFE_FROM for a in node.names)
        if isinstance(node, ast.Assign):
            simple = all(isinstance(t, ast.Name) for t in node.targets)
            return simple and (isinstance(node.value, ast.Constant) or (top and self._built_load(node.value)))
        if isinstance(node, ast.FunctionDef):
            return not node.decorator_list and not (top and node.name in ("__getattr__", "__dir__")) and self._signature(node)
        if isinstance(node, ast.ClassDef):
            return top and self._class(node)
        return False

    def _class(self, node: ast.ClassDef) -> bool:
        if node.decorator_list or node.keywords or len(node.bases) != 1:
            return False
        if any(_dunder(name) and name != "__init__" for name in _class_names(node)):
            return False  # __setattr__, __init_subclass__, __call__, ...: hooks that change what construction or a call does
        base = node.bases[0]
        local = isinstance(base, ast.Name) and any(isinstance(n, ast.ClassDef) and n.name == base.id and n.lineno < node.lineno
                                                   for n in self.tree.body)
        return (_is_torch_module(self.tree, base) or local) and all(self._statement(n, top=False) for n in node.body)

    def _signature(self, fn: ast.FunctionDef) -> bool:
        """Defaults are evaluated when the def runs, and annotations unless they are lazy."""
        args = fn.args
        defaults = [d for d in (*args.defaults, *args.kw_defaults) if d is not None]
        if not all(isinstance(d, ast.Constant) for d in defaults):
            return False
        if self.lazy:
            return True
        notes = [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a is not None]
        notes += [fn.returns] if fn.returns is not None else []
        return all(a is None or isinstance(a, ast.Constant) or ast.unparse(a) in SAFE_ANNOTATIONS for a in notes)

    def _loaders(self) -> set[str]:
        """Names that call kernelwright.runtime.load ('runtime.load', 'load')."""
        out = set()
        for n in self.tree.body:
            if isinstance(n, ast.ImportFrom) and n.module == "kernelwright":
                out |= {f"{a.asname or a.name}.load" for a in n.names if a.name == "runtime"}
            elif isinstance(n, ast.ImportFrom) and n.module == "kernelwright.runtime":
                out |= {a.asname or a.name for a in n.names if a.name == "load"}
            elif isinstance(n, ast.Import):
                out |= {f"{a.asname}.load" if a.asname else "kernelwright.runtime.load" for a in n.names if a.name == "kernelwright.runtime"}
        return out

    def _built_load(self, value: ast.expr) -> bool:
        """`runtime.load(SRC, lang=..., name=..., flags=[...])` with every argument a constant (or a
        module constant): discovery resolved it, the judge built it, the import finds it cached."""
        if not (self.built and isinstance(value, ast.Call) and ast.unparse(value.func) in self.loaders):
            return False
        parts = [*value.args, *(k.value for k in value.keywords)]
        if any(k.arg is None for k in value.keywords) or not parts:
            return False
        items = [e for p in parts for e in (p.elts if isinstance(p, (ast.List, ast.Tuple)) else [p])]
        return all(isinstance(e, ast.Constant) or (isinstance(e, ast.Name) and e.id in self.constants) for e in items)


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _class_names(node: ast.ClassDef) -> list[str]:
    """The names a class body binds (methods and assignments)."""
    names = []
    for n in node.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            for target in n.targets if isinstance(n, ast.Assign) else [n.target]:
                names += [t.id for t in ast.walk(target) if isinstance(t, ast.Name)]
    return names


def _plain_init(tree: ast.Module) -> bool:
    """Whether ModelNew's construction can only bind attributes: its __init__ (or torch.nn.Module's)
    calls super().__init__() and assigns constants or its own parameters to self."""
    cls = _module_def(tree, NAME, ast.ClassDef)
    if not isinstance(cls, ast.ClassDef):
        return False
    init = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    if not init:
        return _is_torch_module(tree, cls.bases[0]) if cls.bases else False
    params = {a.arg for a in (*init[-1].args.posonlyargs, *init[-1].args.args)}
    for stmt in init[-1].body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) or isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and ast.unparse(stmt.value) in ("super().__init__()", f"super({NAME}, self).__init__()"):
            continue
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Attribute) and ast.unparse(t.value) == "self" for t in stmt.targets) \
                and (isinstance(stmt.value, ast.Constant) or (isinstance(stmt.value, ast.Name) and stmt.value.id in params)):
            continue
        return False
    return True


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
    return found[0] if others == 1 else None


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
