"""The judge's raw build: runtime.build's, with the compiler confined by judge.sandbox.

runtime.build and runtime.toolchain hold the build path itself (specs, keys, the cache, the
compilers); a candidate's runtime.load inside the sandbox needs no more confinement than its own
process has. The judge's builds (prebuild, the fork server's own kernels, benches) come through
here: the compiler runs confined by `sandbox_mode` in a process group of its own, watched under
judge.quota's limits, and what its uid leaves behind is swept after it. The names the judge's
modules use from the layer below come through this module too (`__all__`).
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
from collections.abc import Sequence
from pathlib import Path

from kernelwright.judge import quota, sandbox
from kernelwright.runtime import build as _runtime
from kernelwright.runtime.build import (LIB_NAME, BuildResult, BuildSpec, cache_dir, cache_key, confined, file_digest,
                                        key_for, lang_of, spec_from_file, spec_from_text)
from kernelwright.runtime.toolchain import (compiler_version, cpu_identity, find_compiler, normalise_arch, parse_resources,
                                            resolve_arch, run_group, warm_host_facts)

__all__ = ["LIB_NAME", "BuildResult", "BuildSpec", "build", "build_many", "cache_dir", "cache_key", "compiler_version",
           "cpu_identity", "file_digest", "find_compiler", "key_for", "lang_of", "normalise_arch", "parse_resources",
           "resolve_arch", "spec_from_file", "spec_from_text", "warm_host_facts"]


def build(spec: BuildSpec, *, timeout_s: float = 300.0, sandbox_mode: str = "auto") -> BuildResult:
    """Build a spec, or return the cached library (runtime.build.build). Never raises for compiler
    failures. The compiler runs confined by `sandbox_mode` (already so inside the sandbox)."""
    return _runtime.build(spec, timeout_s=timeout_s, run=functools.partial(_run_group, sandbox_mode=sandbox_mode))


def build_many(
    specs: Sequence[BuildSpec], *, timeout_s: float = 300.0, workers: int | None = None, sandbox_mode: str = "auto"
) -> list[BuildResult]:
    """Build several specs in parallel threads; results in input order."""
    if not specs:
        return []
    n = max(1, min(len(specs), workers or os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="kw-build") as pool:
        return list(pool.map(lambda s: build(s, timeout_s=timeout_s, sandbox_mode=sandbox_mode), specs))


def _run_group(cmd: list[str], cwd: Path, timeout_s: float, sandbox_mode: str = "auto") -> tuple[int | None, str, bool]:
    """Run a command confined (judge.sandbox, unless this process is already) in its own process
    group: (exit code, combined output, timed out). What it leaves running is killed after it."""
    if confined():  # inside a confined child, its own watch counts this too; its environment is already clean
        return run_group(cmd, cwd, timeout_s)
    spec = sandbox.spec_for(sandbox_mode, sockets=())  # a compiler needs no socket
    lim = sandbox.watched(spec)  # a bad setting fails here, before the compiler starts
    return run_group(sandbox.command(spec, cmd, cwd), cwd, timeout_s, env=sandbox.clean_env(os.environ),
                     guard=lambda pid: _Watched(sandbox.watch_for(spec, pid, [cwd], lim), pid),
                     stop=lambda proc: sandbox.stop_launcher(spec, proc))


class _Watched:
    """A confined compiler's judge.quota watch and, once it is gone, the sweep of its uid (a runtime.toolchain.Guard)."""

    def __init__(self, watch: quota.Watch | None, pid: int) -> None:
        self.watch = watch
        self.pid = pid

    @property
    def over(self) -> str:
        return self.watch.over if self.watch is not None else ""

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        sandbox.reap(self.pid)
