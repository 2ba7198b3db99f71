"""A torch extension's build (load_inline, cpp_extension): one implementation for the judge's flow
(judge.evaluate) and the agent's compile tool (agent.judging).

The candidate is imported in a build child, a candidate child confined by the policy's sandbox mode
with its extension folder writable; load_inline compiles into that folder, keyed by the candidate's
content hash under the build cache, where the run child (and any later verdict) finds it built.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager

from kernelwright.core.records import truncate
from kernelwright.judge import host_folders, sandbox, workers
from kernelwright.judge.build import cache_dir
from kernelwright.judge.workers import Child, ChildConfig, ChildError


def folder_path(candidate_hash: str | None) -> Path:
    """Where torch's extension folder for a candidate lies (folder() makes it)."""
    return cache_dir() / "torch_extensions" / (candidate_hash or "none")[:16]


def folder(candidate_hash: str | None) -> Path:
    """torch's extension folder for a candidate (TORCH_EXTENSIONS_DIR), made if missing, and its
    use marked for a prune of the cache (judge.cache_prune)."""
    path = folder_path(candidate_hash)
    path.mkdir(parents=True, exist_ok=True)
    from kernelwright.judge.cache_prune import mark_extension

    mark_extension(path)
    return path


def env(candidate_hash: str | None) -> dict[str, str]:
    """The environment that points a child's load_inline at the candidate's extension folder."""
    return {"TORCH_EXTENSIONS_DIR": str(folder(candidate_hash))}


def triton_env(candidate_hash: str | None) -> dict[str, str]:
    """The environment that gives a candidate's Triton kernels a compile cache of their own, keyed by
    the candidate's content: its folder (as env(); the sandbox makes it writable) holds Triton's
    cache, compiled kernels and autotuning results both (TRITON_CACHE_AUTOTUNING), so a second
    verdict of the same files compiles and autotunes nothing. Only this candidate's children write
    there: no other candidate, and no torch.compile baseline, ever loads what it wrote."""
    base = folder(candidate_hash)
    return {"TORCH_EXTENSIONS_DIR": str(base), "TRITON_CACHE_DIR": str(base / "triton"), "TRITON_CACHE_AUTOTUNING": "1"}


def hold_triton_cache(candidate_hash: str | None) -> int | None:
    """The descriptor of a lock on the candidate's Triton cache, held until closed; None when another
    verdict of the same files holds it (or its lock file cannot be opened). Each confined child takes the folder's ownership for its uid
    (judge.sandbox.enter), so two live children of the same files would shut each other out of it
    mid-verdict: the second verdict does without the shared cache instead. The lock file lies beside
    the folder, where no candidate can write."""
    import fcntl

    from kernelwright.judge.cache_prune import hold

    base = folder(candidate_hash)
    return hold(base.parent / f"{base.name}.triton.lock", fcntl.LOCK_EX, 0.0, tries=2)  # no wait: held means in use


def candidate_config(sandbox_mode: str, device: str, gpu_index: int, workdir: Path, read: tuple[str, ...],
                     extra_env: dict[str, str] | None = None) -> tuple[ChildConfig, sandbox.Spec]:
    """A candidate child's config and its sandbox spec: confined from its setup on by the policy's
    mode, the build cache readable, its extension folder (TORCH_EXTENSIONS_DIR in `extra_env`, if
    any) writable; spawned afresh, it may read only `read` (its problem, its candidate's folder).
    Raises host_folders.HostFault, by the judge's own look, where its box in `workdir` would be
    below a folder closed to its uid."""
    child_env = {"KERNELWRIGHT_CACHE": str(cache_dir()), **(extra_env or {})}
    spec = sandbox.for_candidate(sandbox_mode, str(cache_dir()), child_env.get("TORCH_EXTENSIONS_DIR"), device)
    host_folders.refuse_closed(spec.layers, workdir, "the candidate child's folder")  # its box goes in `workdir` (sandbox.enter)
    child_env[sandbox.SPEC_ENV] = spec.to_env()
    config = ChildConfig(role="candidate", device=device, gpu_index=gpu_index, workdir=workdir, env=child_env, sandbox_read=read)
    return config, spec


def builder(sandbox_mode: str, device: str, gpu_index: int, workdir: Path, read: tuple[str, ...], candidate_hash: str | None) -> Child:
    """A build child for the candidate: a new candidate child (never a spare) pointed at its
    extension folder, confined as every candidate child is (candidate_config)."""
    config, _ = candidate_config(sandbox_mode, device, gpu_index, workdir, read, env(candidate_hash))
    return workers.Child(config)


@dataclass(frozen=True)
class Built:
    """What a build child's import of the candidate came to."""

    compiled: bool  # no compiler error and no build timeout (the import may still have failed after building: `failure`)
    seconds: float  # wall time of the build, the wait for `hold` included
    log: str  # the compiler's message and the end of the child's log, when not compiled
    failure: ChildError | None  # the child's failure, None when ModelNew was constructed


def build(child: Child, args: dict[str, Any], *, timeout_s: float, candidate_hash: str | None,
          hold: Callable[[], ContextManager[Any]]) -> Built:
    """Import the candidate in the build child `child` (its setup command, under `hold()`: the
    device lock, since the child constructs ModelNew on the device), then close the child. A build
    that timed out, or a child that died, leaves torch's lock file in the extension folder, which
    would block the next build: the folder goes. A compiler error or a timeout is not compiled (a
    build that times out is a compile error, as the verdict counts it)."""
    t0 = time.perf_counter()
    try:
        with hold():
            child.call("setup", args, timeout_s=timeout_s)
    except ChildError as exc:
        if exc.kind in ("timeout", "died"):
            shutil.rmtree(folder(candidate_hash), ignore_errors=True)
        compiled = exc.kind not in ("compile", "timeout")
        return Built(compiled, time.perf_counter() - t0, "" if compiled else truncate(f"{exc}\n{exc.log_tail}"), exc)
    finally:
        child.close()
    return Built(True, time.perf_counter() - t0, "", None)
