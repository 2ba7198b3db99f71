"""The raw build path: compile extern "C" kernel sources with nvcc or g++ into a cached shared library.

A build is keyed by the sha256 of everything that decides the binary (source text, headers, language,
resolved arch, flags, compiler version and, for g++ -march=native, the CPU). The name never enters
the key. The compiler runs in a folder of its own through the caller's runner: judge.build's
confines it (judge.sandbox); runtime.load's runs it as it is, in a process that is already confined
(a candidate child) or that runs its own code anyway. The library is then copied into a temporary
folder inside the cache, with its sha256 in its meta.json, and renamed into `<cache>/builds/<key>/`
whole, so a build folder is either absent or complete. Only the judge writes the cache: a read
checks the library against that digest, and an entry that fails the check (or predates it) counts
as absent. A process inside the sandbox cannot write the cache; a build it asks for goes to a
folder of its own (`private_root`). A file lock keeps concurrent builders of one key (threads or
processes) from compiling twice. Lock files are 0600, which keeps out a candidate under a uid of
its own only where Landlock is off: under Landlock the sandbox keeps CAP_DAC_READ_SEARCH and lets
it read the cache, lock files included, and hold one. So a builder waits no longer than the build's
own timeout and half a minute. Failed builds are not cached. The compilers themselves (where,
which version, for what target, how one is run) are runtime.toolchain's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelwright.core.records import Resources, truncate
from kernelwright.runtime.toolchain import (ARCH_RE, GXX_FLAGS, NVCC_FLAGS, Runner, compiler_version, cpu_identity,
                                            find_compiler, parse_resources, resolve_arch, run_group)

log = logging.getLogger(__name__)

LANGS = ("cuda", "cpp")
CONFINED_ENV = "KERNELWRIGHT_CONFINED"  # "1" in a process that entered the judge's sandbox (its builds stay its own)
KEY_VERSION = 1  # bump when the commands below change in a way the key does not see
LIB_NAME = "lib.so"
META_NAME = "meta.json"
KEY_WAIT_MARGIN_S = 30.0  # past the build's own timeout, the longest a builder waits for another builder of its key
KEY_WAIT_NOTICE_S = 5.0
KEY_POLL_S = 0.05
SOURCE_SUFFIXES = {".cu": "cuda", ".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".c": "cpp"}
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".inc", ".inl")
_CUDA_INCLUDE_RE = re.compile(
    r"#\s*include\s*[<\"](?:cuda|cub/|thrust/|cooperative_groups|mma\.h|cublas|cudnn|curand|cufft|cute/|cutlass/)"
)


@dataclass(frozen=True, kw_only=True)
class BuildSpec:
    """What to build."""

    source: str  # the source text
    lang: str  # "cuda" (nvcc) or "cpp" (g++)
    name: str = "kernel"  # for messages and file names; never part of the key
    arch: str | None = None  # e.g. "90" or "90a"; None detects (env, nvidia-smi, else "90")
    extra_flags: tuple[str, ...] = ()  # appended to the compiler command
    headers: tuple[tuple[str, str], ...] = ()  # (relative name, text) written beside the source

    def __post_init__(self) -> None:
        if self.lang not in LANGS:
            raise ValueError(f"lang must be one of {LANGS}, got {self.lang!r}")
        if self.arch is not None and not ARCH_RE.match(self.arch):
            raise ValueError(f"arch must look like '90', '90a' or '9.0', got {self.arch!r}")
        object.__setattr__(self, "extra_flags", tuple(self.extra_flags))
        object.__setattr__(self, "headers", tuple((str(n), str(t)) for n, t in self.headers))
        for rel, _ in self.headers:
            if Path(rel).is_absolute() or ".." in Path(rel).parts:
                raise ValueError(f"header names must be relative and inside the build folder, got {rel!r}")


@dataclass(frozen=True)
class BuildResult:
    """The outcome of one build call."""

    ok: bool  # True when lib_path holds a loadable library
    lib_path: Path | None  # the shared library, None when the build failed
    cached: bool  # True when the library came from the cache without compiling
    seconds: float  # wall time of this call
    log: str  # compiler output, truncated; error lines first when there are errors
    resources: Resources | None  # nvcc -Xptxas -v summary (worst kernel); None for cpp
    key: str  # the cache key
    timed_out: bool = False  # True when the compiler was killed at the time limit


# ---- keys ---------------------------------------------------------------------------------------


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The cache root: $KERNELWRIGHT_CACHE (of `env`, else this process's environment), else ~/.cache/kernelwright."""
    root = (os.environ if env is None else env).get("KERNELWRIGHT_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "kernelwright"


def lang_of(source: str) -> str:
    """"cuda" when the text defines kernels or includes CUDA headers, else "cpp"."""
    if "__global__" in source or "__device__" in source or _CUDA_INCLUDE_RE.search(source):
        return "cuda"
    return "cpp"


def cache_key(spec: BuildSpec, compiler_id: str) -> str:
    """sha256 over everything that decides the binary; the spec's name is not part of it."""
    target = resolve_arch(spec.arch) if spec.lang == "cuda" else cpu_identity()
    material = {
        "v": KEY_VERSION,
        "source": spec.source,
        "headers": sorted(spec.headers),
        "lang": spec.lang,
        "target": target,
        "base_flags": NVCC_FLAGS if spec.lang == "cuda" else GXX_FLAGS,
        "flags": spec.extra_flags,
        "compiler": compiler_id,
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()


def key_for(spec: BuildSpec) -> str:
    """The cache key this machine's compiler gives a spec."""
    return cache_key(spec, compiler_version(find_compiler(spec.lang)))


# ---- specs shared by runtime.load and the judge's prebuild (so their keys agree) -----------------


def spec_from_text(
    text: str, *, lang: str | None = None, name: str | None = None, flags: Sequence[str] = ()
) -> BuildSpec:
    """The spec runtime.load builds for source text."""
    return BuildSpec(source=text, lang=lang or lang_of(text), name=name or "inline", extra_flags=tuple(flags))


def spec_from_file(
    path: str | os.PathLike[str], *, lang: str | None = None, name: str | None = None, flags: Sequence[str] = ()
) -> BuildSpec:
    """The spec runtime.load builds for a source file; headers beside it travel with it."""
    path = Path(path)
    text = path.read_text()
    lang = lang or SOURCE_SUFFIXES.get(path.suffix.lower()) or lang_of(text)
    headers = tuple(
        (h.name, h.read_text(errors="replace"))
        for h in sorted(path.parent.iterdir())
        if h.is_file() and h.suffix.lower() in HEADER_SUFFIXES
    )
    return BuildSpec(source=text, lang=lang, name=name or path.stem, extra_flags=tuple(flags), headers=headers)


# ---- building -----------------------------------------------------------------------------------


def confined() -> bool:
    """Whether this process entered the judge's sandbox (its builds then go to private_root)."""
    return os.environ.get(CONFINED_ENV) == "1"


def private_root() -> Path | None:
    """Where a process inside the sandbox keeps the builds it makes itself (its own temporary
    folder); None outside the sandbox, where builds go to the shared cache."""
    if not confined():
        return None
    return Path(os.environ.get("TMPDIR") or tempfile.gettempdir()) / "builds"


def build(spec: BuildSpec, *, timeout_s: float = 300.0, run: Runner | None = None) -> BuildResult:
    """Build a spec, or return the cached library. Never raises for compiler failures. The
    compiler runs through `run` (default: run_group, unconfined; judge.build passes a confined one)."""
    start = time.perf_counter()
    compiler = find_compiler(spec.lang)
    key = cache_key(spec, compiler_version(compiler))
    if compiler is None:
        tool = "nvcc" if spec.lang == "cuda" else "g++"
        msg = f"cannot build {spec.name}: {spec.lang} compiler {tool} not found on PATH"
        return _failed(key, start, msg)
    shared = cache_dir() / "builds" / key
    hit = _cached_result(shared, key, start)
    if hit is not None:
        if not confined():  # the mark of use a prune goes by (judge.cache_prune); the sandbox reads the cache only
            with contextlib.suppress(OSError):
                os.utime(shared / META_NAME)
        return hit
    own = private_root()
    final = shared if own is None else own / key
    with _key_lock(final.parent, key, timeout_s + KEY_WAIT_MARGIN_S):
        hit = _cached_result(final, key, start)
        if hit is not None:
            return hit
        return _compile_and_publish(spec, compiler, key, final, start, timeout_s, run or run_group)


def compile_command(spec: BuildSpec, compiler: str, source_name: str) -> list[str]:
    """The compiler command line, run inside the build folder."""
    if spec.lang == "cuda":
        arch = resolve_arch(spec.arch)
        gencode = f"-gencode=arch=compute_{arch},code=sm_{arch}"
        return [compiler, *NVCC_FLAGS, gencode, *spec.extra_flags, source_name, "-o", LIB_NAME]
    return [compiler, *GXX_FLAGS, *spec.extra_flags, source_name, "-o", LIB_NAME]


def _failed(key: str, start: float, log_text: str, *, timed_out: bool = False) -> BuildResult:
    """A failed build result."""
    return BuildResult(False, None, False, time.perf_counter() - start, truncate(log_text), None, key, timed_out)


def file_digest(path: Path) -> str:
    """sha256 of a regular file's bytes, never through a symbolic link ('' when unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO must not block the judge
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return ""
        return hashlib.file_digest(f, "sha256").hexdigest()


def _cached_result(final: Path, key: str, start: float) -> BuildResult | None:
    """The cached build for a key, or None when there is none or its library fails its digest."""
    lib = final / LIB_NAME
    if not lib.is_file():
        return None
    try:
        meta = json.loads((final / META_NAME).read_text())
    except (OSError, ValueError):
        meta = {}
    want = meta.get("sha256")
    if not isinstance(want, str) or file_digest(lib) != want:
        log.warning("build cache entry %s fails its digest (or has none): built again", final.name[:16])
        return None
    res = meta.get("resources")
    resources = Resources(**res) if isinstance(res, dict) else None
    seconds = time.perf_counter() - start
    return BuildResult(True, lib, True, seconds, meta.get("log", ""), resources, key, False)


@contextlib.contextmanager
def _key_lock(builds: Path, key: str, wait_s: float) -> Iterator[None]:
    """An exclusive lock on one key, across threads and processes, waited for at most `wait_s`.
    The file is 0600 (one made more open before is narrowed), which keeps out a candidate with a
    uid of its own and no Landlock. Under Landlock a candidate reads the cache, lock files included
    (judge.sandbox keeps CAP_DAC_READ_SEARCH for it), and can flock one as long as it lives: past
    the wait the build goes on without the lock (at worst it compiles twice; `_publish` keeps the
    first sound folder)."""
    locks = builds / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_mode & 0o077:
            with contextlib.suppress(OSError):  # another user's file: the lock still works, the wait stays bounded
                os.fchmod(fd, 0o600)
        held = flock_within(fd, fcntl.LOCK_EX, wait_s, poll_s=KEY_POLL_S, notice_after_s=KEY_WAIT_NOTICE_S,
                            notice=lambda: log.info("waiting for another build of %s (at most %.0f s)", key[:16], wait_s))
        if not held:
            log.warning("the build lock of %s was held for %.0f s: building without it", key[:16], wait_s)
        try:
            yield
        finally:
            if held:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def flock_within(fd: int, how: int, wait_s: float, *, poll_s: float = 0.01, notice_after_s: float | None = None,
                 notice: Callable[[], None] | None = None) -> bool:
    """flock `how` on `fd`, tried without blocking until `wait_s` has passed (`notice` called once
    after `notice_after_s` of waiting); False when it never came. A candidate can read the cache,
    lock files included, and would hold a blocking waiter for as long as it liked."""
    start = time.monotonic()
    said = notice is None or notice_after_s is None
    while True:
        try:
            fcntl.flock(fd, how | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            waited = time.monotonic() - start
            if waited >= wait_s:
                return False
            if not said and waited >= notice_after_s:
                said = True
                notice()
            time.sleep(poll_s)
        except OSError:
            return False


def _compile_and_publish(
    spec: BuildSpec, compiler: str, key: str, final: Path, start: float, timeout_s: float, run: Runner
) -> BuildResult:
    """Compile confined in a folder of the compiler's own; copy the library into a temporary
    folder beside `final`, with its digest, and rename that into place."""
    work = Path(tempfile.mkdtemp(prefix=f"kw-build-{key[:12]}-"))
    tmp = Path(tempfile.mkdtemp(prefix=f"tmp-{key[:12]}-", dir=final.parent))
    try:
        source_name = _write_sources(spec, work)
        cmd = compile_command(spec, compiler, source_name)
        log.debug("building %s: %s", spec.name, " ".join(cmd))
        code, output, timed_out = run(cmd, work, timeout_s)
        if timed_out:
            msg = f"build of {spec.name} timed out after {timeout_s:g} s; compiler process group killed\n"
            return _failed(key, start, msg + output, timed_out=True)
        digest = _copy_regular(work / LIB_NAME, tmp / LIB_NAME) if code == 0 else ""
        if not digest:
            return _failed(key, start, _error_log(output, cmd, code))
        resources = parse_resources(output) if spec.lang == "cuda" else None
        text = truncate(output)
        _write_meta(tmp, spec, cmd, text, resources, time.perf_counter() - start, digest)
        _publish(tmp, final)
        return BuildResult(True, final / LIB_NAME, False, time.perf_counter() - start, text, resources, key, False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _copy_regular(src: Path, dst: Path) -> str:
    """Copy the compiler's output (a regular file, never through a link it left) and return its
    sha256; '' when there is no such file."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO left there must not block the judge
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f, open(dst, "xb") as out:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            return ""
        shutil.copyfileobj(f, out)
    os.chmod(dst, 0o755)
    return file_digest(dst)


def _write_sources(spec: BuildSpec, folder: Path) -> str:
    """Write the source and its headers into the build folder; returns the source's file name."""
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name)[:64].strip(".") or "kernel"
    source_name = f"{stem}{'.cu' if spec.lang == 'cuda' else '.cpp'}"
    for rel, text in spec.headers:
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (folder / source_name).write_text(spec.source)
    return source_name


def _error_log(output: str, cmd: list[str], code: int | None) -> str:
    """Compiler output for a failed build, with lines mentioning errors first."""
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    head = "\n".join(errors[:40])
    tail = f"$ {' '.join(cmd)}\n(exit code {code})\n{output}"
    return truncate(f"{head}\n\n--- full compiler output ---\n{tail}" if errors else tail)


def _write_meta(
    folder: Path, spec: BuildSpec, cmd: list[str], text: str, resources: Resources | None, seconds: float, digest: str
) -> None:
    """Save what a cached result needs beside the library, its digest among it."""
    res = None if resources is None else dataclasses.asdict(resources)
    meta = {"name": spec.name, "command": cmd, "log": text, "resources": res, "build_seconds": seconds, "sha256": digest}
    (folder / META_NAME).write_text(json.dumps(meta, indent=1))


def _publish(tmp: Path, final: Path) -> None:
    """Rename a finished build folder into place; a complete one already there wins."""
    try:
        os.rename(tmp, final)
        return
    except OSError:
        if _cached_result(final, final.name, 0.0) is not None:
            return  # another builder's, and sound
    trash = final.with_name(f"{final.name}.stale-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(final, trash)  # incomplete folder left by hand: move it aside and retry once
    except FileNotFoundError:
        pass  # another builder moved it aside meanwhile (one that waited for the key lock no longer)
    else:
        if _cached_result(trash, final.name, 0.0) is not None:  # another builder's sound one, published since the look
            with contextlib.suppress(OSError):
                os.rename(trash, final)
                return
        shutil.rmtree(trash, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if _cached_result(final, final.name, 0.0) is None:
            raise  # and not another builder's sound one that took the place first


