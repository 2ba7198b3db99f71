"""The judge as the agent and its tools use it: compile, verify, full and final judgements of a
candidate folder, cached by content hash, every verdict kept in the store.

Generated code never runs in this process: verdicts come from judge.evaluate, raw builds from the
compilers (judge.candidate.prebuild), and a torch extension is built by importing the candidate in
a build child (judge.extension), as the judge itself does.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelwright.agent.objective import Objective
from kernelwright.judge.candidate import CandidateFiles, CandidateSyntaxError, discover, prebuild
from kernelwright.judge.gpulock import device_lock
from kernelwright.judge.policy import Policy
from kernelwright.core.records import BuildPath, Status, Verdict, truncate
from kernelwright.judge.snapshot import files_hash, main_name, read_candidate, snapshot
from kernelwright.problems import sizes
from kernelwright.problems.loader import Problem
from kernelwright.store import default_store_path

log = logging.getLogger(__name__)

MODES = ("verify", "full", "final")


def _gpu_here() -> bool:
    """Whether this machine has a GPU (the driver's answer; torch's where the driver gives none)."""
    from kernelwright.judge.evaluate import gpu_seen_by_driver, resolve_device

    seen = gpu_seen_by_driver()
    return seen if seen is not None else resolve_device("auto") == "cuda"


@dataclass(frozen=True)
class Judged:
    """One judgement of a candidate."""

    mode: str  # "verify" (correctness only), "full" (the objective's policy) or "final" (fresh seeds, measured baselines)
    verdict: Verdict  # the judge's verdict
    verdict_id: str | None  # the store's id for the verdict (None when not stored)
    candidate_hash: str  # the judged files' content hash (judge.snapshot.files_hash)
    files: dict[str, str]  # the judged files, {relative name: text}


@dataclass(frozen=True)
class BuildReport:
    """A compile-only result: no correctness, no timing."""

    ok: bool  # True when every kernel source built (or there was nothing to build)
    log: str  # compiler output (errors first), or why nothing was built
    seconds: float  # wall time of the build
    resources: list[dict[str, Any]] = field(default_factory=list)  # per source: name, registers, shared_bytes, spills, cached
    build_path: str = BuildPath.NONE.value  # raw, torch_extension or none


class Judge:
    """Judges candidate folders for one problem under one objective.

    - `verify`: correctness only (no timing, no baselines), cached per candidate hash (an
      `infra_error`, the judge's own failure, is not cached).
    - `full`: the objective's policy, cached per candidate hash. Baselines: when the objective
      says "measured" or "cached" and `cache_baselines` is set (the default), eager and
      torch.compile are measured once per Judge (`ensure_baselines`, judge.baseline.run), kept in
      the store, and every full verdict takes them from there (policy baselines="cached"), so the
      tools do not re-time the reference for every candidate. With `cache_baselines=False` the
      objective's own setting stands ("measured": timed beside every candidate). "skip" stays skip.
      With `record=False` nothing can be cached, so the objective's setting stands too.
    - `final`: a fresh evaluation, never cached: fresh secret seeds, baselines measured in the same
      run, compute-sanitizer on the GPU.

    `store` is the SQLite store's path (None: the default store, as everywhere in kernelwright);
    every verdict is kept there with its problem and files, as `kernelwright eval` keeps them.
    `record=False` keeps nothing (verdict_id stays None). Only one evaluation runs at a time per
    Judge (one device); builds (`prebuild`) run in parallel.

    `pool` (a client.pool.Pool: `--ray`, `--pool`): verdicts come from its workers, as many at once
    as it has, and the device is the pool's. Its workers see none of this process's store, so
    baselines are measured beside every candidate on the worker's own device ("cached" becomes
    "measured"; "skip" stays skip), and `prebuild` leaves the builds to the workers. The tools
    that profile (the reference's breakdown, ncu) and `compile` still run on this machine, on the
    pool's device when this machine has one (`here`); where it has none, they say so instead.
    """

    def __init__(self, problem: Problem, objective: Objective, *, device: str, store: Path | None,
                 progress: Callable[[str], None] | None = None, cache_baselines: bool = True, record: bool = True,
                 pool: Any = None) -> None:
        from kernelwright.judge.evaluate import resolve_device

        self.problem, self.objective = problem, objective
        self.pool = pool
        self.device = pool.device if pool is not None else resolve_device(device)  # a Ray cluster's GPUs, not this driver's
        self.here = pool is None or pool.device == "cpu" or _gpu_here()  # this machine has the device (compile, profile tools)
        self.store: Path | None = (Path(store).expanduser() if store is not None else default_store_path()) if record else None
        self.progress = progress
        self.cache_baselines = cache_baselines
        self._cache: dict[tuple[str, str], Judged] = {}
        self._lock = threading.Lock()  # the cache and the baseline record
        self.device_lock = threading.Lock()  # one evaluation (or other device work: profiles) at a time
        self._baselines: dict[str, Any] | None = None
        self._baselines_done = False

    # -- policies -----------------------------------------------------------------------------

    def baseline_mode(self) -> str:
        """The baselines setting full() judges with (see the class docstring)."""
        wanted = self.objective.baselines
        if self.pool is not None:  # no store in the workers: measured beside the candidate on the worker's device
            return "skip" if wanted == "skip" else "measured"
        if wanted == "skip" or not self.cache_baselines or self.store is None:
            return wanted
        return "cached"

    def policy(self, mode: str) -> Policy:
        """The judge's policy for a mode."""
        if mode == "verify":
            return self.objective.policy(time_candidate=False, baselines="skip", compile_baseline=False)
        if mode == "full":
            return self.objective.policy(baselines=self.baseline_mode())
        if mode == "final":
            return self.objective.policy(seeds=None, baselines="measured", sanitize=self.device == "cuda" and self.objective.sanitize_final,
                                         sanitize_timeout_s=self.objective.sanitize_timeout_s)
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")

    # -- judging ------------------------------------------------------------------------------

    def verify(self, cand_dir: Path) -> Judged:
        """Correctness only; cached by candidate hash."""
        return self._cached(cand_dir, "verify")

    def full(self, cand_dir: Path) -> Judged:
        """The objective's policy (baselines from the store cache when set up); cached by hash."""
        if self.baseline_mode() == "cached":
            self.ensure_baselines()
        return self._cached(cand_dir, "full")

    def final(self, cand_dir: Path) -> Judged:
        """A fresh judgement on fresh secret seeds, baselines measured beside the candidate."""
        return self._judge(cand_dir, "final", files_hash(cand_dir), read_candidate(cand_dir))

    def cached(self, candidate_hash: str, mode: str) -> Judged | None:
        """A judgement already made for this hash and mode, or None."""
        with self._lock:
            return self._cache.get((candidate_hash, mode))

    def _cached(self, cand_dir: Path, mode: str) -> Judged:
        files = read_candidate(cand_dir)  # ValueError for a folder without model_new.py
        digest = files_hash(cand_dir)
        hit = self.cached(digest, mode)
        if hit is not None:
            return hit
        judged = self._judge(cand_dir, mode, digest, files)
        if judged.verdict.status != Status.INFRA_ERROR:  # the judge's own failure: the next call tries again
            with self._lock:
                self._cache[(digest, mode)] = judged
        return judged

    def _judge(self, cand_dir: Path, mode: str, digest: str, files: dict[str, str]) -> Judged:
        from kernelwright.client import Judge as JudgeClient

        if self.pool is not None:  # the pool's workers judge one candidate each at a time: no lock here
            verdict = self.pool.evaluate(self.problem, Path(cand_dir), self.policy(mode))
            return Judged(mode, verdict, self._keep(verdict, files, main_name(cand_dir)), digest, files)
        with self.device_lock:  # in process, or through the service KERNELWRIGHT_SERVICE names
            verdict = JudgeClient(device=self.device).evaluate(self.problem, Path(cand_dir), self.policy(mode), progress=self.progress,
                                                              baseline_store=self.store)
        return Judged(mode, verdict, self._keep(verdict, files, main_name(cand_dir)), digest, files)

    def _keep(self, verdict: Verdict, files: dict[str, str], main: str) -> str | None:
        """Store problem, files and verdict (as `kernelwright eval` does); the verdict id or None.
        A store failure is logged, never a lost verdict."""
        if self.store is None or not verdict.candidate.get("hash"):
            return None
        from kernelwright.store import Store

        try:
            with Store.open(self.store) as db:
                db.put_problem(self.problem.hash, self.problem.name, str(self.problem.path), self.problem.source)
                db.put_candidate(verdict.candidate["hash"], verdict.candidate["build_path"], files, main)
                return db.put_verdict(verdict)
        except Exception as exc:  # noqa: BLE001
            log.warning("the verdict was not stored: %s: %s", type(exc).__name__, exc)
            return None

    # -- baselines ----------------------------------------------------------------------------

    def ensure_baselines(self) -> dict[str, Any] | None:
        """Measure (or find in the store) eager and torch.compile times for the problem, once per
        Judge; the record's dict, or None when baselines are skipped, nothing is recorded, or the
        measurement failed (full() then measures them beside the candidate)."""
        with self._lock:
            if self._baselines_done:
                return self._baselines
            self._baselines_done = True
        if self.objective.baselines == "skip" or self.store is None or self.pool is not None:
            return None
        from kernelwright.judge import baseline
        from kernelwright.store import Store

        self._say("measuring the baselines (eager, torch.compile) once for this run")
        try:
            with self.device_lock, Store.open(self.store) as db:
                rec = baseline.run([self.problem], device=self.device, policy=self.policy("full"), store=db)[0]
        except Exception as exc:  # noqa: BLE001 - without the cache, full() measures them itself
            log.warning("baselines could not be measured: %s: %s", type(exc).__name__, exc)
            return None
        record = rec.to_dict() if rec.eager_ms is not None else None
        with self._lock:
            self._baselines = record
        return record

    # -- building -----------------------------------------------------------------------------

    def compile(self, cand_dir: Path) -> BuildReport:
        """Build the candidate's kernels without judging it. Raw sources go to the compilers; a
        torch extension is built by importing the candidate in a build child."""
        t0 = time.perf_counter()
        if not self.here:
            return BuildReport(True, f"not built here: this machine has no {self.device} device, and the pool's workers build and judge "
                                     "candidates; verify builds it there and reports any compiler error", time.perf_counter() - t0)
        try:
            files = discover(cand_dir)
        except CandidateSyntaxError as exc:
            return BuildReport(False, f"syntax error in the candidate: {exc.message} (line {exc.line})", time.perf_counter() - t0)
        if files.build_path == BuildPath.RAW:
            return self._compile_raw(files, t0)
        if files.build_path == BuildPath.TORCH_EXTENSION:
            return self._compile_extension(files, t0, Path(cand_dir))
        if files.triton_kernels:  # Triton compiles at the first call, in the judge's child
            names = ", ".join(sorted(files.triton_kernels)[:8])
            return BuildReport(True, f"Triton kernels found ({names}): they compile at their first call, so verify() builds and checks them",
                               time.perf_counter() - t0)
        from kernelwright.judge.candidate import triton_kernels_of

        reserved = triton_kernels_of(files.root, reserved=True)
        if reserved:  # its own Triton kernels under torch.compile's prefix: refused on a GPU as the triton library's
            return BuildReport(False, f"Triton kernels named {', '.join(sorted(reserved)[:8])}: the triton_ prefix is torch.compile's, and the "
                                      "judge counts such kernels as a library's (refused on a GPU): rename them", time.perf_counter() - t0)
        return BuildReport(True, "no kernel sources found: nothing to build (no runtime.load source, no kernels/ file, no cpp_extension)",
                           time.perf_counter() - t0)

    def _compile_raw(self, files: CandidateFiles, t0: float) -> BuildReport:
        policy = self.objective.policy()
        results = prebuild(files, timeout_s=policy.build_timeout_s, sandbox_mode=policy.sandbox)  # the compilers confined as the judge's
        failed = [r for r in results if not r.ok]
        text = "\n".join(("build timed out\n" if r.timed_out else "") + r.log for r in (failed or results))
        rows = [{"name": s.name, "cached": r.cached, **(dataclasses.asdict(r.resources) if r.resources else {})} for s, r in zip(files.sources, results)]
        return BuildReport(not failed, truncate(text.strip()), time.perf_counter() - t0, rows, BuildPath.RAW.value)

    def _compile_extension(self, files: CandidateFiles, t0: float, cand_path: Path) -> BuildReport:
        """Import a private copy of the candidate in a build child (judge.extension, as the judge's
        own flow does), into the extension folder the judge will use (keyed by content hash), so
        verify() finds it built."""
        from kernelwright.judge import extension
        from kernelwright.judge.evaluate import work_folder

        policy = self.objective.policy()
        workdir = work_folder("kw-agent-build-")  # where verify's evaluation will build: /dev/shm when roomy
        try:
            main = snapshot(cand_path, workdir / "candidate")  # the same files the judge would take
            size = sizes.resolve(self.problem.source, policy.size, self.device, str(self.problem.path))
            args = {"problem_path": str(self.problem.path), "size": size, "candidate_path": str(main), "device": self.device,
                    "precision": policy.precision, "init_seed": 1, "check_identities": False}
            # confined as the judge's own build child is, by the policy's sandbox mode (strict included)
            child = extension.builder(policy.sandbox, self.device, policy.gpu_index, workdir, (str(self.problem.path), str(main.parent)), files.hash)
            built = extension.build(child, args, timeout_s=policy.build_timeout_s, candidate_hash=files.hash,
                                    hold=lambda: device_lock(self.device, policy.gpu_index, "shared", what="building the torch extension",
                                                             progress=self.progress))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        ext = BuildPath.TORCH_EXTENSION.value
        if not built.compiled:
            return BuildReport(False, built.log, time.perf_counter() - t0, [], ext)
        if built.failure is not None:  # the candidate failed after building (at import or in ModelNew's constructor): the judge's verdict says how
            return BuildReport(True, truncate(f"no compiler error, but the candidate failed when imported or constructed "
                                              f"({built.failure.kind}); the judgement will say how: {built.failure}"), time.perf_counter() - t0, [], ext)
        return BuildReport(True, "torch extension built and ModelNew constructed", time.perf_counter() - t0, [], ext)

    def prebuild(self, cand_dirs: list[Path]) -> None:
        """Build many candidates' raw kernels in parallel threads (objective.parallel_builds) so
        that later judging hits the build cache. Failures are left for the judge to report; torch
        extensions are left to the judge's own build child (it may need the device). With a pool,
        nothing: its workers build (a Ray worker on another node sees none of this machine's cache)."""
        def one(path: Path) -> None:
            try:
                files = discover(path)
                if files.build_path == BuildPath.RAW:
                    prebuild(files, timeout_s=self.objective.policy().build_timeout_s)
            except Exception as exc:  # noqa: BLE001 - the judge reports it properly later
                log.debug("prebuild of %s: %s", path, exc)

        if not cand_dirs or self.pool is not None:
            return
        workers = max(1, min(self.objective.parallel_builds, len(cand_dirs)))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kw-prebuild") as pool:
            list(pool.map(one, cand_dirs))

    def _say(self, msg: str) -> None:
        log.info("%s", msg)
        if self.progress is not None:
            self.progress(msg)
