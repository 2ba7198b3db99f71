"""The static layer: advisory findings from reading, never running, a candidate.

Python files are read with `ast`, names resolved through the file's imports and assignments, so
`import torch.cuda as tc; tc.synchronize` and `from time import perf_counter as pc` are seen for
what they are. Kernel sources (raw files, and C/C++/CUDA text in Python strings) are parsed with
tree-sitter's CUDA grammar. Findings never decide a verdict: they go to `static_findings` for the
engineer and the agent, and the runtime guards do the refusing.

A finding is {"rule", "file", "line", "detail"}; `RULES` describes every rule.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kernelwright import pysource

RULES: dict[str, str] = {
    "frame_access": "reads interpreter frames (sys._getframe, inspect.currentframe/stack, f_back, f_locals, tb_frame)",
    "gc_access": "walks the garbage collector's objects (gc)",
    "sys_modules": "reads or changes sys.modules",
    "builtins": "touches builtins / __builtins__",
    "dynamic_code": "runs code built at run time (exec, eval, compile, __import__, importlib)",
    "dynamic_attribute": "getattr / setattr / delattr with a name that is not a string literal",
    "monkeypatch": "assigns to an attribute of an imported module (torch, time, the judge, ...)",
    "alias": "binds a timing, checking or introspection function to another name",
    "files": "opens, writes or reads files (open, pathlib, os, shutil, torch.save/load, numpy save/load)",
    "sockets": "network access (socket, http, urllib, requests)",
    "subprocess": "starts processes (subprocess, os.system/popen/fork/exec*/spawn*, multiprocessing, pty)",
    "threads": "starts threads (threading, _thread, concurrent.futures)",
    "ctypes": "loads native code with ctypes / cffi outside kernelwright.runtime",
    "side_stream": "creates or switches CUDA streams from Python",
    "graph_capture": "captures or replays CUDA graphs from Python (work replayed from a graph is invisible to the op audit)",
    "inherits_reference": "ModelNew subclasses the reference Model",
    "exception_fallback": "a broad except or contextlib.suppress (a silent fallback to another path)",
    "reduced_precision": "TF32 / fp16 / bf16 switches, casts or autocast",
    "cuda_torch_api": "kernel source calls into torch / ATen / c10",
    "cuda_vendor_library": "kernel source uses cuBLAS / cuDNN (or cuFFT, cuSPARSE, cuSOLVER)",
    "cuda_host_thread": "kernel source starts host threads (std::thread, std::async, pthread)",
    "cuda_stream": "kernel source creates its own CUDA streams",
    "cuda_process": "kernel source starts processes or opens files (system, popen, fork, fopen, fstream)",
    "cuda_parser_unavailable": "kernel sources were not analysed: tree-sitter's CUDA grammar is not installed",
    "static_layer_failed": "the static layer itself failed on this candidate (the verdict is unaffected)",
}

# Fully qualified names (after alias resolution) and the rule they trigger when used.
_NAME_RULES: dict[str, str] = {
    "sys._getframe": "frame_access", "inspect.currentframe": "frame_access", "inspect.stack": "frame_access",
    "inspect.getouterframes": "frame_access", "inspect.trace": "frame_access", "traceback.extract_stack": "frame_access",
    "sys.modules": "sys_modules",
    "builtins": "builtins", "__builtins__": "builtins",
    "exec": "dynamic_code", "eval": "dynamic_code", "compile": "dynamic_code", "__import__": "dynamic_code",
    "importlib.import_module": "dynamic_code", "importlib.reload": "dynamic_code", "runpy": "dynamic_code",
    "open": "files", "io.open": "files", "os.open": "files", "os.remove": "files", "os.unlink": "files",
    "os.rename": "files", "os.replace": "files", "os.listdir": "files", "os.scandir": "files", "os.walk": "files",
    "shutil": "files", "tempfile": "files", "pickle": "files", "torch.save": "files", "torch.load": "files",
    "numpy.save": "files", "numpy.load": "files", "numpy.fromfile": "files", "numpy.memmap": "files",
    "torch.from_file": "files", "mmap": "files",
    "socket": "sockets", "http": "sockets", "urllib": "sockets", "requests": "sockets", "ftplib": "sockets",
    "subprocess": "subprocess", "os.system": "subprocess", "os.popen": "subprocess", "os.fork": "subprocess",
    "os.forkpty": "subprocess", "os.kill": "subprocess", "os.killpg": "subprocess", "multiprocessing": "subprocess",
    "pty": "subprocess", "torch.multiprocessing": "subprocess",
    "threading": "threads", "_thread": "threads", "concurrent.futures": "threads",
    "ctypes": "ctypes", "cffi": "ctypes",
    "torch.cuda.Stream": "side_stream", "torch.cuda.stream": "side_stream", "torch.cuda.set_stream": "side_stream",
    "torch.cuda.ExternalStream": "side_stream", "torch.Stream": "side_stream",
    "torch.cuda.graph": "graph_capture", "torch.cuda.CUDAGraph": "graph_capture", "torch.cuda.make_graphed_callables": "graph_capture",
    "torch.cuda.graphs": "graph_capture",
    "torch.backends.cuda.matmul.allow_tf32": "reduced_precision", "torch.backends.cudnn.allow_tf32": "reduced_precision",
    "torch.set_float32_matmul_precision": "reduced_precision",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": "reduced_precision",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": "reduced_precision",
    "torch.float16": "reduced_precision", "torch.half": "reduced_precision", "torch.bfloat16": "reduced_precision",
    "torch.autocast": "reduced_precision", "torch.cuda.amp": "reduced_precision", "torch.amp": "reduced_precision",
}
_PREFIX_RULES = {"os.exec": "subprocess", "os.spawn": "subprocess", "os.posix_spawn": "subprocess", "gc": "gc_access"}
_PATH_IO = ("write_text", "write_bytes", "unlink", "touch", "rename")  # pathlib writes (reading one's own kernel file is common)
_FRAME_ATTRS = ("f_back", "f_locals", "f_globals", "tb_frame", "gi_frame")
# Functions whose identity the judge relies on: binding them to another name is an alias finding.
_SENSITIVE = (
    "torch.allclose", "torch.testing.assert_close", "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time", "time.perf_counter", "time.time", "time.monotonic", "sys._getframe",
    "inspect.currentframe", "gc.get_objects", "gc.get_referrers", "builtins", "kernelwright.judge",
)
_PATCHABLE_ROOTS = ("torch", "time", "kernelwright", "sys", "os", "builtins", "numpy", "gc", "inspect", "random")
_BROAD = {"Exception", "BaseException"}


@dataclass(frozen=True)
class Finding:
    rule: str  # a key of RULES
    file: str  # path relative to the candidate's folder
    line: int  # 1-based
    detail: str  # what was seen

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "file": self.file, "line": self.line, "detail": self.detail}


# -- Python ---------------------------------------------------------------------------------------


class _PythonScan(ast.NodeVisitor):
    """One file: resolve names through imports and simple assignments, report what RULES name."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.names: dict[str, str] = {}  # local name -> fully qualified name
        self.findings: list[Finding] = []
        self._seen: set[tuple[str, int, str]] = set()

    def add(self, rule: str, node: ast.AST, detail: str) -> None:
        key = (rule, getattr(node, "lineno", 0), detail)
        if key not in self._seen:
            self._seen.add(key)
            self.findings.append(Finding(rule, self.file, getattr(node, "lineno", 0), detail[:200]))

    def qualify(self, node: ast.AST) -> str | None:
        """The fully qualified dotted name of a Name/Attribute chain, through the file's aliases."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.names.get(node.id, node.id))
        return ".".join(reversed(parts))

    def check_name(self, qual: str, node: ast.AST) -> None:
        for name, rule in _NAME_RULES.items():
            if qual == name or qual.startswith(name + "."):
                self.add(rule, node, qual)
                return
        for prefix, rule in _PREFIX_RULES.items():
            # "os.exec" covers os.execv, os.execve, ...; a bare module name covers its attributes
            if qual.startswith(prefix if "." in prefix else prefix + ".") or qual == prefix:
                self.add(rule, node, qual)
                return

    # imports bind names
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.names[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self.check_name(a.name, node)
            if a.asname and _is_sensitive(a.name):
                self.add("alias", node, f"import {a.name} as {a.asname}")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        for a in node.names:
            qual = f"{mod}.{a.name}" if mod else a.name
            self.names[a.asname or a.name] = qual
            self.check_name(qual, node)
            if _is_sensitive(qual) and (a.asname or mod):
                self.add("alias", node, f"from {mod} import {a.name}" + (f" as {a.asname}" if a.asname else ""))

    def visit_Assign(self, node: ast.Assign) -> None:
        value = self.qualify(node.value)
        for target in node.targets:
            self._assigned(target, value, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assigned(node.target, self.qualify(node.value), node)
        self.generic_visit(node)

    def _assigned(self, target: ast.AST, value: str | None, node: ast.AST) -> None:
        if isinstance(target, ast.Name) and value is not None:
            self.names[target.id] = value
            if _is_sensitive(value):
                self.add("alias", node, f"{target.id} = {value}")
        elif isinstance(target, ast.Attribute):
            qual = self.qualify(target)
            if qual and qual.split(".")[0] in _PATCHABLE_ROOTS and self._is_module_root(target):
                self.add("monkeypatch", node, f"{qual} = ...")

    def _is_module_root(self, node: ast.Attribute) -> bool:
        root: ast.AST = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id in self.names

    def visit_Call(self, node: ast.Call) -> None:
        func = self.qualify(node.func)
        if func in ("getattr", "setattr", "delattr", "hasattr"):
            name_arg = node.args[1] if len(node.args) > 1 else None
            if name_arg is not None and not (isinstance(name_arg, ast.Constant) and isinstance(name_arg.value, str)):
                self.add("dynamic_attribute", node, f"{func} with a computed name")
            elif func in ("setattr", "delattr") and node.args:
                target = self.qualify(node.args[0])
                if target and target.split(".")[0] in _PATCHABLE_ROOTS:
                    self.add("monkeypatch", node, f"{func}({target}, {ast.unparse(name_arg) if name_arg is not None else ''}, ...)")
        if isinstance(node.func, ast.Attribute) and node.func.attr in _PATH_IO:
            self.add("files", node, f".{node.func.attr}()")
        if func in ("contextlib.suppress",):
            self.add("exception_fallback", node, "contextlib.suppress")
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("half", "bfloat16") and not node.args:
            self.add("reduced_precision", node, f".{node.func.attr}()")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        qual = self.qualify(node)
        if qual:
            self.check_name(qual, node)
        if node.attr in _FRAME_ATTRS:
            self.add("frame_access", node, f".{node.attr}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            qual = self.names.get(node.id, node.id)
            if node.id in ("exec", "eval", "compile", "__import__", "open", "__builtins__") or node.id in self.names:
                self.check_name(qual, node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            for base in node.bases:
                qual = self.qualify(base) or ""
                if qual == "Model" or qual.endswith(".Model"):
                    self.add("inherits_reference", node, f"class ModelNew({ast.unparse(base)})")
        self.generic_visit(node)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        caught = [] if node.type is None else (node.type.elts if isinstance(node.type, ast.Tuple) else [node.type])
        names = {self.qualify(t) or "" for t in caught}
        if node.type is None or names & _BROAD:
            self.add("exception_fallback", node, "bare except" if node.type is None else f"except {ast.unparse(node.type)}")
        self.generic_visit(node)


def _is_sensitive(qual: str) -> bool:
    return any(qual == s or qual.startswith(s + ".") for s in _SENSITIVE)


def scan_python(text: str, file: str) -> list[Finding]:
    """Findings of one Python file (a syntax error yields none: discovery reports it)."""
    try:
        tree = pysource.parse(text, filename=file)
    except SyntaxError:
        return []
    scan = _PythonScan(file)
    scan.visit(tree)
    return scan.findings


def embedded_sources(text: str) -> list[tuple[int, str]]:
    """String constants of a Python file that hold C/C++/CUDA code: (line, text)."""
    try:
        tree = pysource.parse(text)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _looks_like_c(node.value):
            out.append((node.lineno, node.value))
    return out


_C_MARKERS = ("#include", "__global__", "__device__", "extern \"C\"", "torch::", "at::", "c10::", "cublas", "cudnn", "std::")


def _looks_like_c(s: str) -> bool:
    return "\n" in s and ("{" in s or "#include" in s) and any(m in s for m in _C_MARKERS)


# -- CUDA / C++ -----------------------------------------------------------------------------------

_CUDA_PREFIXES: tuple[tuple[str, str], ...] = (
    ("at::", "cuda_torch_api"), ("torch::", "cuda_torch_api"), ("c10::", "cuda_torch_api"),
    ("cublas", "cuda_vendor_library"), ("cudnn", "cuda_vendor_library"), ("cufft", "cuda_vendor_library"),
    ("cusparse", "cuda_vendor_library"), ("cusolver", "cuda_vendor_library"),
    ("std::thread", "cuda_host_thread"), ("std::jthread", "cuda_host_thread"), ("std::async", "cuda_host_thread"),
    ("pthread_create", "cuda_host_thread"),
    ("cudaStreamCreate", "cuda_stream"), ("cuStreamCreate", "cuda_stream"),
    ("system", "cuda_process"), ("popen", "cuda_process"), ("fork", "cuda_process"), ("execv", "cuda_process"),
    ("execl", "cuda_process"), ("fopen", "cuda_process"), ("std::ofstream", "cuda_process"), ("std::ifstream", "cuda_process"),
    ("std::fstream", "cuda_process"), ("dlopen", "cuda_process"),
)
_EXACT_ONLY = {"system", "popen", "fork", "fopen", "dlopen"}  # not prefixes: systemX is someone's name
_INCLUDES: tuple[tuple[str, str], ...] = (
    ("ATen/native", "cuda_torch_api"), ("ATen/ops", "cuda_torch_api"), ("ATen/cuda/CUDABlas", "cuda_torch_api"),
    ("ATen/cudnn", "cuda_torch_api"), ("ATen/Functions", "cuda_torch_api"),
    ("cublas", "cuda_vendor_library"), ("cudnn", "cuda_vendor_library"), ("cufft", "cuda_vendor_library"),
    ("cusparse", "cuda_vendor_library"), ("cusolver", "cuda_vendor_library"),
    ("thread", "cuda_host_thread"), ("pthread.h", "cuda_host_thread"), ("future", "cuda_host_thread"),
    ("fstream", "cuda_process"),
)


def _cuda_parser() -> Any | None:
    try:
        import tree_sitter_cuda
        from tree_sitter import Language, Parser
    except ImportError:
        return None
    return Parser(Language(tree_sitter_cuda.language()))


# The plumbing every torch extension needs (types, dtype constants, allocation, guards, the current
# stream) is not torch compute: a load_inline wrapper that only allocates and launches is clean.
_TORCH_PLUMBING = re.compile(
    r"^(at|torch|c10)::(cuda::|native::)?(Tensor\w*|k[A-Z]\w*|empty\w*|zeros\w*|ones\w*|full\w*|Device\w*|device|dtype|"
    r"ScalarType(::\w+)?|Half|BFloat16|IntArrayRef|ArrayRef|optional|nullopt|TensorOptions|Layout|MemoryFormat|\w*Guard|"
    r"getCurrentCUDAStream|CUDAStream|getCurrentDeviceProperties|Scalar|irange|acc_type|opmath_type|"
    r"elementSize|toString|typeMetaToScalarType|kernel_launch_check)$"
)


def _cuda_rule(name: str) -> str | None:
    name = name.split("<", 1)[0].strip()  # template arguments do not change what a name is
    if _TORCH_PLUMBING.match(name):
        return None
    for prefix, rule in _CUDA_PREFIXES:
        if name == prefix or (prefix not in _EXACT_ONLY and name.startswith(prefix)):
            return rule
    return None


def _nested_or_called(node: Any) -> bool:
    """A qualified name inside a longer one, or the function of a call (reported as the call)."""
    parent = node.parent
    if parent is None:
        return False
    if parent.type == "qualified_identifier":
        return True
    fn = parent.child_by_field_name("function") if parent.type == "call_expression" else None
    return fn is not None and (fn.start_byte, fn.end_byte) == (node.start_byte, node.end_byte)


def scan_cuda(text: str, file: str, line_offset: int = 0, parser: Any | None = None) -> list[Finding]:
    """Findings of one C/C++/CUDA source: includes, calls and qualified names, from its syntax tree."""
    parser = parser or _cuda_parser()
    if parser is None:
        return [Finding("cuda_parser_unavailable", file, line_offset + 1, "pip install tree-sitter tree-sitter-cuda")]
    tree = parser.parse(text.encode())
    found: list[Finding] = []
    seen: set[tuple[str, int, str]] = set()

    def add(rule: str, node: Any, detail: str) -> None:
        line = line_offset + node.start_point[0] + 1
        if (rule, line, detail) not in seen:
            seen.add((rule, line, detail))
            found.append(Finding(rule, file, line, detail[:200]))

    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "preproc_include":
            path = node.child_by_field_name("path")
            inc = (path.text.decode(errors="replace") if path is not None else "").strip("<>\"")
            for prefix, rule in _INCLUDES:
                if inc.startswith(prefix):
                    add(rule, node, f"#include <{inc}>")
                    break
        elif node.type == "call_expression":
            fn = node.child_by_field_name("function")
            name = fn.text.decode(errors="replace") if fn is not None and fn.type in ("identifier", "qualified_identifier") else ""
            rule = _cuda_rule(name) if name else None
            if rule:
                add(rule, node, f"{name}(...)")
        elif node.type == "qualified_identifier" and not _nested_or_called(node):
            name = node.text.decode(errors="replace")
            rule = _cuda_rule(name)
            if rule:
                add(rule, node, name)
        stack.extend(reversed(node.children))
    return found


# -- a whole candidate ----------------------------------------------------------------------------


C_SUFFIXES = (".cu", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp")


def scan_candidate(model_new: Path, kernel_sources: Iterable[tuple[str, str]] = ()) -> list[dict[str, Any]]:
    """Findings for a candidate: every Python and C/C++/CUDA file under its folder (the judge passes
    its snapshot copy, which holds the candidate's files; for a single-file candidate, the files
    beside it, which are judged with it), C/CUDA text in Python strings, and the kernel sources
    discovery found ((name, text) pairs) that are none of those."""
    root = model_new.parent
    py_files = [model_new] + [p for p in sorted(root.rglob("*.py")) if p != model_new]
    parser = _cuda_parser()
    findings: list[Finding] = []
    seen_sources: set[str] = set()
    for path in py_files:
        rel = str(path.relative_to(root))
        text = path.read_text(errors="replace")
        findings += scan_python(text, rel)
        for line, src in embedded_sources(text):
            seen_sources.add(src)
            findings += scan_cuda(src, rel, line - 1, parser)
    for path in sorted(p for p in root.rglob("*") if p.suffix in C_SUFFIXES and p.is_file()):
        src = path.read_text(errors="replace")
        seen_sources.add(src)
        findings += scan_cuda(src, str(path.relative_to(root)), 0, parser)
    for name, src in kernel_sources:
        if src not in seen_sources:
            findings += scan_cuda(src, name, 0, parser)
    if parser is None:  # one note is enough
        first = [f for f in findings if f.rule == "cuda_parser_unavailable"][:1]
        findings = [f for f in findings if f.rule != "cuda_parser_unavailable"] + first
    return [f.to_dict() for f in findings]
