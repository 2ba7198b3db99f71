"""Static discovery of a candidate (model_new.py plus kernel sources), without executing it.

Kernel sources come from `<root>/kernels/*.{cu,cpp,cc,c}` and from string constants passed to
`kernelwright.runtime.load(...)` in model_new.py, resolved through the AST. `prebuild` compiles them
into the build cache with exactly the specs `runtime.load` will use, so the candidate's own loads hit
the cache.
"""

from __future__ import annotations

import ast
import logging
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwright.judge import build as _build
from kernelwright.core.records import BuildPath
from kernelwright.judge.snapshot import files_hash
from kernelwright import pysource

log = logging.getLogger(__name__)

KERNELS_DIR = "kernels"
KERNEL_SUFFIXES = (".cu", ".cpp", ".cc", ".c")
CPP_EXTENSION = "torch.utils.cpp_extension"
_STR_METHODS = ("strip", "lstrip", "rstrip")
_MAX_DEPTH = 50


class CandidateSyntaxError(ValueError):
    """model_new.py does not parse; carries the message and line for a compile_error verdict."""

    def __init__(self, path: Path, message: str, line: int | None, text: str | None = None) -> None:
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path = path
        self.message = message
        self.line = line
        self.text = text  # the offending line, when Python gives it


@dataclass(frozen=True)
class KernelSource:
    """One raw kernel source of a candidate."""

    name: str  # file stem, variable name, or load(name=...) literal
    lang: str  # "cuda" or "cpp"
    text: str  # the source exactly as runtime.load will receive it
    origin: str  # "kernels_dir" or "inline_string"
    flags: tuple[str, ...] = ()  # literal load(flags=...) of an inline string
    headers: tuple[tuple[str, str], ...] = ()  # headers beside a kernels/ file, as runtime.load sends them


@dataclass(frozen=True)
class CandidateFiles:
    """What discovery found."""

    model_new: Path  # the candidate's Python file
    root: Path  # the folder holding model_new
    sources: tuple[KernelSource, ...]  # raw kernel sources found
    build_path: BuildPath  # raw, torch_extension or none
    hash: str  # sha256 over every file of the candidate (snapshot.files_hash), names included
    triton_kernels: frozenset[str] = frozenset()  # its own @triton.jit functions (judge.provenance), read before any child runs


def discover(path: str | Path) -> CandidateFiles:
    """Find a candidate's files and kernel sources by reading, never running, them."""
    model_new = _model_file(Path(path))
    root = model_new.parent
    text = model_new.read_text(errors="replace")
    try:
        tree = pysource.parse(text, filename=str(model_new))
    except SyntaxError as exc:
        raise CandidateSyntaxError(model_new, exc.msg or "invalid syntax", exc.lineno, exc.text) from None
    except (RecursionError, MemoryError):  # Python's own compiler fails on it too: the candidate's source, not the judge
        raise CandidateSyntaxError(model_new, "too deeply nested for Python's parser", None, None) from None
    sources = _dedupe(_kernel_files(root) + _inline_sources(tree))
    if _uses_cpp_extension(tree):
        build_path = BuildPath.TORCH_EXTENSION
    else:
        build_path = BuildPath.RAW if sources else BuildPath.NONE
    return CandidateFiles(model_new, root, tuple(sources), build_path, files_hash(path), frozenset(triton_kernels_of(root)))


def triton_kernels_of(root: Path, limit: int = 64, *, reserved: bool = False) -> set[str]:
    """The @triton.jit functions of the candidate's Python files (at most `limit` files, symlinks
    and caches left out), read as bytes so that a file's declared encoding is honoured."""
    from kernelwright.judge.provenance import triton_kernel_names

    texts = []
    for path in sorted(root.rglob("*.py"))[:limit]:
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            try:
                text = path.read_bytes()
            except OSError:
                continue
            if b"triton" in text:  # no parse for a file that cannot import it (most candidates: CUDA ones)
                texts.append(text)
    return triton_kernel_names(texts, reserved=reserved)


def prebuild(files: CandidateFiles, *, timeout_s: float = 300.0, sandbox_mode: str = "auto") -> list[_build.BuildResult]:
    """Build the raw sources into the cache (in parallel, each compiler confined by `sandbox_mode`)
    so that runtime.load at import hits it."""
    if files.build_path != BuildPath.RAW:
        return []
    return _build.build_many([spec_of(s) for s in files.sources], timeout_s=timeout_s, sandbox_mode=sandbox_mode)


def spec_of(source: KernelSource) -> _build.BuildSpec:
    """The build spec runtime.load produces for this source (same key)."""
    return _build.BuildSpec(
        source=source.text, lang=source.lang, name=source.name, extra_flags=source.flags, headers=source.headers
    )


def _model_file(path: Path) -> Path:
    """The candidate's Python file for a .py path or a folder holding model_new.py."""
    if path.is_dir():
        if (path / "model_new.py").is_file():
            return (path / "model_new.py").resolve()
        raise ValueError(f"candidate folder {path} has no model_new.py")
    if path.is_file() and path.suffix == ".py":
        return path.resolve()
    raise ValueError(f"candidate must be a .py file or a folder with model_new.py, got {path}")


def _kernel_files(root: Path) -> list[KernelSource]:
    """Every kernel source file under <root>/kernels/, as runtime.load(Path) would read it."""
    folder = root / KERNELS_DIR
    if not folder.is_dir():
        return []
    found = []
    for file in sorted(folder.rglob("*")):
        if file.is_file() and file.suffix.lower() in KERNEL_SUFFIXES:
            spec = _build.spec_from_file(file)
            found.append(KernelSource(spec.name, spec.lang, spec.source, "kernels_dir", (), spec.headers))
    return found


def _dedupe(sources: list[KernelSource]) -> list[KernelSource]:
    """Sources in order, dropping repeats that would build the same library."""
    seen: set[tuple[Any, ...]] = set()
    out = []
    for s in sources:
        ident = (s.text, s.lang, s.flags, s.headers)
        if ident not in seen:
            seen.add(ident)
            out.append(s)
    return out


# ---- the AST: runtime.load calls and the string constants they receive ---------------------------


def _inline_sources(tree: ast.Module) -> list[KernelSource]:
    """String constants passed to runtime.load(...) anywhere in the module."""
    modules, funcs = _load_aliases(tree)
    strings = _Strings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_load(node.func, modules, funcs):
            source = _inline_source(node, strings, len(found))
            if source is not None:
                found.append(source)
    return found


def _load_aliases(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(dotted names bound to the runtime module, names bound to runtime.load)."""
    modules: set[str] = set()
    funcs: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                if node.module == "kernelwright" and alias.name == "runtime":
                    modules.add(alias.asname or "runtime")
                elif node.module == "kernelwright.runtime" and alias.name == "load":
                    funcs.add(alias.asname or "load")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "kernelwright.runtime":
                    modules.add(alias.asname or "kernelwright.runtime")
                elif alias.name == "kernelwright":
                    modules.add(f"{alias.asname or 'kernelwright'}.runtime")
    return modules, funcs


def _is_load(func: ast.expr, modules: set[str], funcs: set[str]) -> bool:
    """Whether a call's target is runtime.load under one of its import names."""
    return pysource.names(func, modules, funcs, {"load"})


def _inline_source(call: ast.Call, strings: "_Strings", index: int) -> KernelSource | None:
    """The source a load(...) call receives, when it is a string constant."""
    kwargs = {k.arg: k.value for k in call.keywords if k.arg}
    arg = call.args[0] if call.args else kwargs.get("source")
    text = strings.resolve(arg) if arg is not None else None
    if text is None:
        if arg is not None:
            log.debug("runtime.load argument at line %s is not a string constant", call.lineno)
        return None
    lang = strings.resolve(kwargs["lang"]) if "lang" in kwargs else None
    flags = _literal_flags(kwargs.get("flags"), strings)
    name = strings.resolve(kwargs["name"]) if "name" in kwargs else None
    if name is None:
        name = arg.id if isinstance(arg, ast.Name) else f"inline_{index}"
    spec = _build.spec_from_text(text, lang=lang, name=name, flags=flags)
    return KernelSource(spec.name, spec.lang, spec.source, "inline_string", spec.extra_flags)


def _literal_flags(node: ast.expr | None, strings: "_Strings") -> tuple[str, ...]:
    """The flags of a load(flags=[...]) call when they are string constants, else ()."""
    if not isinstance(node, (ast.List, ast.Tuple)):
        return ()
    flags = [strings.resolve(e) for e in node.elts]
    return tuple(flags) if all(f is not None for f in flags) else ()  # type: ignore[arg-type]


def _uses_cpp_extension(tree: ast.Module) -> bool:
    """Whether the module imports or names torch.utils.cpp_extension."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(CPP_EXTENSION):
                return True
            if node.module == "torch.utils" and any(a.name == "cpp_extension" for a in node.names):
                return True
        elif isinstance(node, ast.Import) and any(a.name.startswith(CPP_EXTENSION) for a in node.names):
            return True
        elif isinstance(node, ast.Attribute) and (pysource.dotted(node) or "").endswith("cpp_extension"):
            return True
        elif isinstance(node, ast.Constant) and node.value == CPP_EXTENSION:
            return True
    return False


class _Strings:
    """Resolves expressions to string constants: literals, module-level names, +, strip, dedent."""

    def __init__(self, tree: ast.Module) -> None:
        self.module: dict[str, ast.expr] = {}
        for stmt in tree.body:
            self._bind_module(stmt)
        self.elsewhere: dict[str, list[ast.expr]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and node not in tree.body:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.elsewhere.setdefault(target.id, []).append(node.value)

    def _bind_module(self, stmt: ast.stmt) -> None:
        """Record module-level bindings of names, in order (a later one replaces an earlier one)."""
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    self.module[target.id] = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            self.module[stmt.target.id] = stmt.value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) and isinstance(stmt.op, ast.Add):
            prev = self.module.get(stmt.target.id)
            if prev is not None:
                self.module[stmt.target.id] = ast.BinOp(left=prev, op=ast.Add(), right=stmt.value)

    def resolve(self, node: ast.expr | None, depth: int = 0) -> str | None:
        """The string value of an expression, or None when it is not a constant."""
        if node is None or depth > _MAX_DEPTH:
            return None
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.resolve(node.left, depth + 1), self.resolve(node.right, depth + 1)
            return left + right if left is not None and right is not None else None
        if isinstance(node, ast.Name):
            return self._name(node.id, depth)
        if isinstance(node, ast.JoinedStr):
            parts = [self.resolve(v, depth + 1) if isinstance(v, ast.Constant) else None for v in node.values]
            return "".join(parts) if all(p is not None for p in parts) else None  # type: ignore[arg-type]
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        return None

    def _name(self, name: str, depth: int) -> str | None:
        """A name's string value: its module-level binding, else its only binding anywhere."""
        if name in self.module:
            return self.resolve(self.module[name], depth + 1)
        bound = self.elsewhere.get(name, [])
        return self.resolve(bound[0], depth + 1) if len(bound) == 1 else None

    def _call(self, node: ast.Call, depth: int) -> str | None:
        """'...'.strip() and friends, and textwrap.dedent('...')."""
        args = [self.resolve(a, depth + 1) for a in node.args]
        if node.keywords or any(a is None for a in args):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _STR_METHODS and len(args) <= 1:
            base = self.resolve(func.value, depth + 1)
            return getattr(base, func.attr)(*args) if base is not None else None
        if pysource.dotted(func) in ("textwrap.dedent", "dedent") and len(args) == 1:
            return textwrap.dedent(args[0])  # type: ignore[arg-type]
        return None
