"""The compilers of the raw build path: where nvcc and g++ are, their versions, the target (GPU arch
or CPU) a build is for, the flags every build gets, running one in a process group of its own, and
the register and shared-memory summary nvcc prints. runtime.build keys, caches and publishes what
they make."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from kernelwright.core.records import Resources

log = logging.getLogger(__name__)

# nvcc's -O applies to host code only (device code is always optimised by cicc/ptxas); the host side
# of a raw candidate is a thin launcher, so -O1 there saves build time and costs nothing at run time.
NVCC_FLAGS = ("-std=c++17", "-shared", "-Xcompiler", "-fPIC,-O1", "-lineinfo", "-Xptxas", "-v")
GXX_FLAGS = ("-O3", "-march=native", "-std=c++17", "-shared", "-fPIC", "-fopenmp")
DEFAULT_ARCH = "90"
OUTPUT_LIMIT = 4 << 20  # the bytes of a compiler's output that a build keeps (its first and last halves)
OUTPUT_CAP = 64 << 20  # output beyond this kills the compiler
ARCH_RE = re.compile(r"^(?:sm_|compute_)?(?:(\d{1,2})\.(\d)|(\d{2,3}))([a-z]?)$")


class Guard(Protocol):
    """What watches a started compiler for a runner (judge.build's sandbox watch)."""

    @property
    def over(self) -> str: ...  # why it was killed, '' while it was not

    def close(self) -> None: ...  # after the compiler's process group is gone


# (command, build folder, time limit in s) -> (exit code, combined output, timed out); run_group is one
Runner = Callable[[list[str], Path, float], "tuple[int | None, str, bool]"]


def normalise_arch(arch: str) -> str:
    """'9.0' / 'sm_90' / '90' -> '90'; '90a' / 'sm_90a' -> '90a'."""
    m = ARCH_RE.match(arch.strip())
    if not m:
        raise ValueError(f"arch must look like '90', '90a' or '9.0', got {arch!r}")
    major_minor = m.group(1) + m.group(2) if m.group(1) else m.group(3)
    return major_minor + m.group(4)


def resolve_arch(arch: str | None) -> str:
    """The arch to compile for: the given one, else $KERNELWRIGHT_CUDA_ARCH, else nvidia-smi, else 90."""
    if arch:
        return normalise_arch(arch)
    env = os.environ.get("KERNELWRIGHT_CUDA_ARCH")
    if env:
        return normalise_arch(env)
    return _detected_arch(os.environ.get("CUDA_VISIBLE_DEVICES", ""))


@functools.lru_cache(maxsize=8)
def _detected_arch(visible: str) -> str:
    """The compute capability of the first visible GPU as nvidia-smi reports it, else DEFAULT_ARCH."""
    cmd = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
    first = visible.split(",")[0].strip()
    if first.isdigit():
        cmd += ["-i", first]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
        return normalise_arch(out.strip().splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        log.debug("arch detection via nvidia-smi failed (%s); using %s", exc, DEFAULT_ARCH)
        return DEFAULT_ARCH


def warm_host_facts(device: str) -> None:
    """Compute now the memoised facts every build's cache key needs (the compiler's --version,
    the CPU's identity, and on "cuda" the GPU's arch from nvidia-smi), so a long-lived process
    (`serve`) does not run those subprocesses inside its first verdict. They are memoised as the
    build would memoise them, failures included: an nvidia-smi that fails gives DEFAULT_ARCH and a
    compiler that fails "version unknown" for the process's life, as they would at its first
    build. A build that starts while this runs computes them again (lru_cache holds no lock)."""
    with contextlib.suppress(Exception):
        compiler_version(find_compiler("cpp"))
        cpu_identity()
        if device == "cuda":
            compiler_version(find_compiler("cuda"))
            resolve_arch(None)


def find_compiler(lang: str) -> str | None:
    """The compiler executable for a language, or None when it is not installed."""
    if lang == "cpp":
        return shutil.which("g++")
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and os.access(Path(root) / "bin" / "nvcc", os.X_OK):
            return str(Path(root) / "bin" / "nvcc")
    return None


@functools.lru_cache(maxsize=16)
def compiler_version(compiler: str | None) -> str:
    """The compiler's --version text (memoised; the path is left out so installs agree), or 'missing'."""
    if compiler is None:
        return "missing"
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip() or f"{Path(compiler).name}: empty --version"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{compiler}: version unknown ({exc})"


@functools.lru_cache(maxsize=1)
def cpu_identity() -> str:
    """Machine type plus CPU model and flags (g++ -march=native depends on them)."""
    fields: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("model name", "flags", "Features", "CPU part") and name not in fields:
                fields[name] = value.strip()
    return json.dumps({"machine": platform.machine(), **fields}, sort_keys=True)



def run_group(
    cmd: list[str], cwd: Path, timeout_s: float, *, env: Mapping[str, str] | None = None,
    guard: Callable[[int], Guard | None] | None = None, stop: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> tuple[int | None, str, bool]:
    """Run a command in its own process group in `cwd`: (exit code, combined output, timed out).
    What it leaves running in its group is killed after it. `guard(pid)` watches it meanwhile: a
    limit the guard kills it for gives no exit code, and the reason in the output. `stop(proc)` runs
    first when it times out (a launcher that sweeps after its command is asked to, before its group
    is killed). The output goes to a file, not a pipe: the wait ends with the command, whatever it
    left holding the output open. Output past OUTPUT_CAP bytes kills the command (the file is the
    judge's, outside the sandbox's disk quota); the text keeps its first and last bytes."""
    with tempfile.TemporaryFile() as out:
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True, env=env)
        except OSError as exc:
            return None, f"could not start {cmd[0]}: {exc}", False
        watch = guard(proc.pid) if guard is not None else None
        timed_out, flooded = False, False
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    proc.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                    break
                except subprocess.TimeoutExpired:
                    if os.fstat(out.fileno()).st_size > OUTPUT_CAP:
                        flooded = True
                    elif time.monotonic() < deadline:
                        continue
                    timed_out = not flooded
                    if stop is not None:
                        stop(proc)
                    _kill_group(proc)
                    proc.wait()
                    break
        finally:
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
            _kill_group(proc)  # what stayed in its group after it exited
            if watch is not None:
                watch.close()
        text = _head_and_tail(out.fileno())
    if timed_out:
        return None, text, True
    if flooded:
        return None, f"{text}\nkernelwright: more than {OUTPUT_CAP >> 20} MiB of output; killed", False
    if watch is not None and watch.over:
        return None, f"{text}\nkernelwright: {watch.over}", False
    return proc.returncode, text, False


def _head_and_tail(fd: int) -> str:
    """The file's text, or its first and last OUTPUT_LIMIT / 2 bytes with a line saying how much was cut."""
    size = os.fstat(fd).st_size
    if size <= OUTPUT_LIMIT:
        return os.pread(fd, size, 0).decode(errors="replace")
    half = OUTPUT_LIMIT // 2
    head = os.pread(fd, half, 0).decode(errors="replace")
    tail = os.pread(fd, half, size - half).decode(errors="replace")
    return f"{head}\n[kernelwright: {size - 2 * half} bytes of output cut]\n{tail}"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child's whole process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)



_USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_resources(ptxas_output: str) -> Resources:
    """Worst registers and static shared memory over kernels, total spill bytes, from -Xptxas -v."""
    regs: list[int] = []
    smem: list[int] = []
    spills = 0
    seen_spill = False
    for line in ptxas_output.splitlines():
        used = _USED.search(line)
        if used:
            regs.append(int(used.group(1)))
            smem.append(int(used.group(2) or 0))
        spill = _SPILL.search(line)
        if spill:
            seen_spill = True
            spills += int(spill.group(1)) + int(spill.group(2))
    return Resources(
        registers=max(regs) if regs else None,
        shared_bytes=max(smem) if smem else None,
        spills=spills if seen_spill else None,
    )
