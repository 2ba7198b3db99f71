"""Parse the prototypes of extern "C" functions from C/C++/CUDA source text.

A small tokenizer drops comments, preprocessor lines and the contents of string literals; a
declaration scanner then reads `extern "C" T f(...)` and every declaration of `extern "C" { ... }`
blocks. Types are classified into what ctypes can pass: pointers, integers, floats and CUDA streams.
"""

from __future__ import annotations

import ctypes
import enum
import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
    (?P<pp>^[ \t]*\#(?:\\\r?\n|[^\n])*)
   |(?P<comment>//(?:\\\r?\n|[^\n])*|/\*.*?\*/)
   |(?P<str>(?:u8|u|U|L)?R"(?P<delim>[^(\s"\\]{0,16})\(.*?\)(?P=delim)"
           |(?:u8|u|U|L)?"(?:\\.|[^"\\\n])*"
           |(?:u8|u|U|L)?'(?:\\.|[^'\\\n])*')
   |(?P<ws>[ \t\r\f\v]*\n|[ \t\r\f\v]+)
   |(?P<ident>[A-Za-z_]\w*)
   |(?P<num>\.?\d(?:[eEpP][+-]|[\w.'])*)
   |(?P<punct>::|\.\.\.|\[\[|\]\]|.)
    """,
    re.S | re.M | re.X,
)

QUALIFIERS = frozenset(
    {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "enum", "register", "union"}
)
SPECIFIERS = frozenset(
    {"static", "inline", "extern", "__inline__", "__forceinline__", "__noinline__", "constexpr",
     "__host__", "__device__", "__global__", "__inline", "__cdecl", "noexcept", "__declspec"}
)
ATTRIBUTE_CALLS = frozenset({"__attribute__", "__declspec", "__launch_bounds__", "alignas", "__align__"})
BUILTIN_WORDS = frozenset({"void", "bool", "char", "short", "int", "long", "signed", "unsigned", "float", "double"})

_FIXED_INTS = {
    "int8_t": ctypes.c_int8, "uint8_t": ctypes.c_uint8, "int16_t": ctypes.c_int16, "uint16_t": ctypes.c_uint16,
    "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64, "size_t": ctypes.c_size_t, "ssize_t": ctypes.c_ssize_t,
    "ptrdiff_t": ctypes.c_ssize_t, "intptr_t": ctypes.c_ssize_t, "uintptr_t": ctypes.c_size_t,
    "bool": ctypes.c_bool, "_Bool": ctypes.c_bool, "cudaError_t": ctypes.c_int, "cudaError": ctypes.c_int,
}
_FLOATS = {"float": ctypes.c_float, "double": ctypes.c_double}


class Kind(str, enum.Enum):
    """How a C type crosses the ctypes boundary."""

    POINTER = "pointer"  # any pointer or array: a tensor's data_ptr() or an int address
    INT = "int"  # an integer type: a Python int
    FLOAT = "float"  # float or double: a Python float
    STREAM = "stream"  # cudaStream_t (or void* named stream): omittable when trailing
    VOID = "void"  # return type only
    UNSUPPORTED = "unsupported"  # by-value structs, half, references, varargs ...


@dataclass(frozen=True)
class Param:
    """One parameter of an extern "C" function."""

    name: str  # the parameter's name, or argN when unnamed
    type: str  # the C type as written, normalised spacing
    kind: Kind  # how it crosses the ctypes boundary
    ctype: type | None  # the ctypes type, None when unsupported


@dataclass(frozen=True)
class Prototype:
    """One extern "C" function as declared in the source."""

    name: str  # the C symbol
    ret_type: str  # the return type as written
    ret_kind: Kind  # how the return value crosses the boundary
    ret_ctype: type | None  # ctypes restype (None for void or unsupported)
    params: tuple[Param, ...]  # parameters in order
    checks_error: bool  # return type is int or cudaError_t: non-zero means failure
    host_callable: bool  # False for __global__ / __device__-only functions

    @property
    def omittable_stream(self) -> bool:
        """True when the last parameter is a stream that callers may leave out."""
        return bool(self.params) and self.params[-1].kind == Kind.STREAM

    @property
    def unsupported(self) -> list[str]:
        """Why this function cannot be called through ctypes (empty when it can)."""
        bad = [f"parameter {p.name} of type {p.type}" for p in self.params if p.kind == Kind.UNSUPPORTED]
        if self.ret_kind == Kind.UNSUPPORTED:
            bad.append(f"return type {self.ret_type}")
        return bad

    def __str__(self) -> str:
        args = ", ".join(f"{p.type} {p.name}" for p in self.params)
        return f"{self.ret_type} {self.name}({args})"


def tokenize(text: str) -> list[str]:
    """C tokens without comments, preprocessor lines and whitespace; string literals stay whole."""
    return [
        m.group()
        for m in _TOKEN.finditer(text)
        if m.lastgroup not in ("pp", "comment", "ws")
    ]


def parse_prototypes(text: str) -> dict[str, Prototype]:
    """Every extern "C" function declared or defined in the text, by name."""
    toks = tokenize(text)
    found: dict[str, Prototype] = {}
    i = 0
    while i < len(toks):
        if toks[i] == "extern" and i + 1 < len(toks) and toks[i + 1] == '"C"':
            i = _parse_block(toks, i + 3, found) if _at(toks, i + 2) == "{" else _parse_decl(toks, i + 2, found)
        else:
            i += 1
    return found


def _at(toks: list[str], i: int) -> str:
    """The token at i, or '' past the end."""
    return toks[i] if i < len(toks) else ""


def _match(toks: list[str], i: int) -> int:
    """Index just past the bracket that closes the one at i."""
    pairs = {"(": ")", "{": "}", "[": "]", "[[": "]]"}
    opener, closer, depth = toks[i], pairs[toks[i]], 0
    for j in range(i, len(toks)):
        if toks[j] == opener:
            depth += 1
        elif toks[j] == closer:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(toks)


def _parse_block(toks: list[str], i: int, found: dict[str, Prototype]) -> int:
    """Declarations of an extern "C" { ... } block starting at i; returns the index past its '}'."""
    while i < len(toks) and toks[i] != "}":
        if toks[i] == "extern" and _at(toks, i + 1) == '"C"':
            i += 2
            if _at(toks, i) == "{":
                i = _parse_block(toks, i + 1, found)
                continue
        i = _parse_decl(toks, i, found)
    return i + 1


def _parse_decl(toks: list[str], i: int, found: dict[str, Prototype]) -> int:
    """One declaration starting at i; records it when it declares a function. Returns the next index."""
    head: list[str] = []
    while i < len(toks):
        tok = toks[i]
        if tok == ";":
            i += 1
            break
        if tok == "}":  # end of the enclosing block: leave it to the caller
            break
        if tok in ("(", "[", "[["):
            end = _match(toks, i)
            head.extend(toks[i:end])
            i = end
            continue
        if tok == "{":
            i = _match(toks, i)
            if _is_function(head) or (head and head[0] == "namespace"):
                break
            continue  # struct / enum body: the declaration goes on to its ';'
        head.append(tok)
        i += 1
    proto = _function_from(head)
    if proto is not None:
        found[proto.name] = proto
    return i


def _strip_attributes(head: list[str]) -> list[str]:
    """Drop __attribute__((...)), __declspec(...), __launch_bounds__(...), alignas(...) and [[...]]."""
    out: list[str] = []
    i = 0
    while i < len(head):
        if head[i] in ATTRIBUTE_CALLS and _at(head, i + 1) == "(":
            i = _match(head, i + 1)
        elif head[i] == "[[":
            i = _match(head, i)
        else:
            out.append(head[i])
            i += 1
    return out


def _is_function(head: list[str]) -> bool:
    """Whether a declaration head declares a function (a name followed by a parameter list)."""
    head = _strip_attributes(head)
    return "(" in head and "typedef" not in head and head.index("(") > 0


def _function_from(head: list[str]) -> Prototype | None:
    """A prototype from a declaration head, or None when it is not a plain function declaration."""
    if "typedef" in head or "template" in head:
        return None
    head = _strip_attributes(head)
    if "(" not in head:
        return None
    open_at = head.index("(")
    name = head[open_at - 1] if open_at > 0 else ""
    if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in BUILTIN_WORDS | QUALIFIERS | SPECIFIERS:
        return None
    before = head[: open_at - 1]
    params = tuple(_param(p, n) for n, p in enumerate(_split_params(head[open_at + 1 : _match(head, open_at) - 1])))
    host = "__global__" not in before and ("__device__" not in before or "__host__" in before)
    ret_toks = [t for t in before if t not in SPECIFIERS and not t.startswith('"')]
    ret_type = _join(ret_toks) or "int"
    kind, ctype = _classify(ret_toks, is_return=True)
    checks = _base_words(ret_toks) in (["int"], ["cudaError_t"], ["cudaError"]) and kind == Kind.INT
    return Prototype(name, ret_type, kind, ctype, _mark_stream(params), checks, host)


def _split_params(toks: list[str]) -> list[list[str]]:
    """Parameter token lists, split on top-level commas; () and (void) give none."""
    if toks in ([], ["void"]):
        return []
    parts: list[list[str]] = [[]]
    depth = 0
    for tok in toks:
        depth += tok in ("(", "[", "<", "[[")
        depth -= tok in (")", "]", ">", "]]")
        if tok == "," and depth == 0:
            parts.append([])
        else:
            parts[-1].append(tok)
    return parts


def _param(toks: list[str], index: int) -> Param:
    """One parameter from its tokens."""
    if "=" in toks:  # default argument
        toks = toks[: toks.index("=")]
    if "..." in toks or "(" in toks:
        kind = Kind.UNSUPPORTED if "..." in toks else Kind.POINTER
        return Param(f"arg{index}", _join(toks), kind, ctypes.c_void_p if kind == Kind.POINTER else None)
    type_toks, name = _split_name(toks)
    kind, ctype = _classify(type_toks, is_return=False)
    return Param(name or f"arg{index}", _join(type_toks), kind, ctype)


def _split_name(toks: list[str]) -> tuple[list[str], str | None]:
    """(type tokens, parameter name or None); an array suffix makes the type a pointer."""
    if "[" in toks:  # int x[] / float x[4] decay to pointers
        type_toks, name = _split_name(toks[: toks.index("[")])
        return type_toks + ["*"], name
    last = toks[-1] if toks else ""
    words_before = [t for t in toks[:-1] if t not in QUALIFIERS]
    is_ident = re.fullmatch(r"[A-Za-z_]\w*", last) is not None
    if is_ident and words_before and last not in BUILTIN_WORDS | QUALIFIERS:
        return toks[:-1], last
    return toks, None


def _base_words(toks: list[str]) -> list[str]:
    """Type words without qualifiers, std:: prefixes and leading ALL_CAPS macros."""
    words = [t for t in toks if t not in QUALIFIERS and t not in SPECIFIERS and t != "::"]
    words = [w for k, w in enumerate(words) if not (w == "std" and k + 1 < len(words))]
    while len(words) > 1 and re.fullmatch(r"[A-Z_][A-Z0-9_]*", words[0]) and words[0] not in _FIXED_INTS:
        words = words[1:]
    return words


def _classify(toks: list[str], *, is_return: bool) -> tuple[Kind, type | None]:
    """(kind, ctypes type) of a type given by its tokens."""
    if "&" in toks or "&&" in toks:
        return Kind.UNSUPPORTED, None
    if "*" in toks:
        return Kind.POINTER, ctypes.c_void_p
    words = _base_words(toks)
    if words == ["cudaStream_t"]:
        return Kind.STREAM, ctypes.c_void_p
    if words == ["void"] and is_return:
        return Kind.VOID, None
    if len(words) == 1 and words[0] in _FLOATS:
        return Kind.FLOAT, _FLOATS[words[0]]
    ctype = _int_ctype(words)
    return (Kind.INT, ctype) if ctype is not None else (Kind.UNSUPPORTED, None)


def _int_ctype(words: list[str]) -> type | None:
    """The ctypes integer for a list of type words, or None."""
    if len(words) == 1 and words[0] in _FIXED_INTS:
        return _FIXED_INTS[words[0]]
    if not words or not set(words) <= {"signed", "unsigned", "int", "long", "short", "char"}:
        return None
    unsigned = "unsigned" in words
    if "char" in words:
        return ctypes.c_uint8 if unsigned else ctypes.c_int8
    if "short" in words:
        return ctypes.c_uint16 if unsigned else ctypes.c_int16
    longs = words.count("long")
    if longs >= 2:
        return ctypes.c_ulonglong if unsigned else ctypes.c_longlong
    if longs == 1:
        return ctypes.c_ulong if unsigned else ctypes.c_long
    return ctypes.c_uint if unsigned else ctypes.c_int


def _mark_stream(params: tuple[Param, ...]) -> tuple[Param, ...]:
    """A trailing `void* stream` counts as a stream parameter."""
    if not params:
        return params
    last = params[-1]
    words = _base_words(tokenize(last.type))
    if last.kind == Kind.POINTER and last.name == "stream" and words == ["void", "*"]:
        return params[:-1] + (Param(last.name, last.type, Kind.STREAM, ctypes.c_void_p),)
    return params


def _join(toks: list[str]) -> str:
    """Type tokens as readable text: 'const float* __restrict__'."""
    out = ""
    for tok in toks:
        if tok in ("*", "&", "&&", "::") or out.endswith("::") or not out:
            out += tok
        else:
            out += " " + tok
    return out
