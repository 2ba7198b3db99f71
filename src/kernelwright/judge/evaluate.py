"""evaluate(problem, candidate, policy) -> Verdict: the judge's flow.

Build in children (compilers, or a build child for torch extensions); reference outputs in the
reference child; the candidate in a fresh GPU-pinned child; comparisons in the reference child,
which never runs candidate code. Generated code never runs in this process. Device work holds the
device's lock (judge.gpulock): shared for loading, references and correctness, exclusive for timing;
builds hold none.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelwright.judge import extension, forkpool, quota, refpool, sandbox, spares
from kernelwright.judge.build import cache_dir
from kernelwright.judge.candidate import CandidateFiles, CandidateSyntaxError, discover, prebuild
from kernelwright.judge.gpulock import device_lock, enabled as gpu_lock_enabled
from kernelwright.judge.guards import precision
from kernelwright.judge.policy import DISTRIBUTIONS, Policy
from kernelwright.judge.precheck import Early, precheck
from kernelwright.judge.snapshot import snapshot
from kernelwright.core.records import Case, BuildPath, Resources, Status, Verdict, truncate
from kernelwright.judge.verdicts import Stop, VerdictBuilder
from kernelwright.judge.workers import Child, ChildConfig, ChildError, physical_gpu
from kernelwright.problems import sizes
from kernelwright.problems.loader import Problem, ProblemError, load_problem

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def resolve_device(device: str) -> str:
    """auto -> cuda when a GPU is visible, else cpu; validate the name."""
    if device not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device must be auto, cuda or cpu, got {device!r}")
    if device != "auto":
        return device
    return "cuda" if _gpu_present() else "cpu"


SHM_MIN_FREE = 8 * 2**30  # use /dev/shm for outputs only when it has this much room (Docker gives 64 MiB)


def _workdir() -> Path:
    """A private folder for one evaluation: in memory when /dev/shm is roomy, else on disk."""
    shm = Path("/dev/shm")
    try:
        roomy = shm.is_dir() and shutil.disk_usage(shm).free >= SHM_MIN_FREE
    except OSError:
        roomy = False
    return Path(tempfile.mkdtemp(prefix="kw-eval-", dir=shm if roomy else None))


class Cancelled(BaseException):
    """evaluate() was cancelled through its `cancel` event (a BaseException: never a verdict)."""


def evaluate(problem: Problem | str | Path, candidate: str | Path, policy: Policy | None = None, *, device: str = "auto", progress: Progress | None = None,
             baseline_store: str | Path | None = None, cancel: threading.Event | None = None, shown_as: str | None = None) -> Verdict:
    """Judge one candidate against one problem. With `policy.baselines == "cached"`, the eager and
    torch.compile times come from the store at `baseline_store` (default: the user's store) where
    `kernelwright baseline` recorded them for this machine; where it has none they are measured.

    Raises ProblemError for a malformed problem and ValueError for a malformed candidate path or a
    GPU index outside the visible devices; every
    other outcome, a failure of the judge itself included, is a verdict. Setting `cancel` kills
    the evaluation's children and makes it raise Cancelled instead. The verdict's messages name the
    candidate's files under `shown_as` (default: the candidate's folder as given).
    """
    policy = policy or Policy()
    problem = problem if isinstance(problem, Problem) else load_problem(problem)
    t_start = time.perf_counter()

    def say(msg: str) -> None:
        # every phase start, with the seconds since evaluate() began, in the log (INFO) too
        log.info("%.2f s: %s", time.perf_counter() - t_start, msg)
        if progress is not None:
            progress(msg)

    dev = resolve_device(device)
    vb = VerdictBuilder(problem, policy, dev)
    vb.size = sizes.resolve(problem.source, policy.size, dev, str(problem.path))  # ProblemError: a malformed CPU_SIZE, or cpu asked of a file without one
    if dev == "cuda" and not _gpu_present():
        return vb.finish(Status.INFRA_ERROR, "device cuda was asked for but no GPU is visible")
    if dev == "cuda":
        physical_gpu(policy.gpu_index)  # ValueError for an index outside CUDA_VISIBLE_DEVICES
    gpu_lock_enabled()  # ValueError for a KERNELWRIGHT_GPU_LOCK other than on or off
    refused = sandbox.refusal(policy.sandbox)
    if refused:
        return vb.finish(Status.INFRA_ERROR, refused)
    spares.check_settings()  # ValueError for malformed KERNELWRIGHT_SPARE_* settings
    quota.limits()  # ValueError for a malformed KERNELWRIGHT_SANDBOX_DISK, _FILES, _MEMORY or _MEMORY_FLOOR
    workdir = _workdir()
    try:
        main = snapshot(candidate, workdir / "candidate")  # a malformed candidate raises ValueError
        judged = main.parent if main.name == "model_new.py" else main
        flow = _Flow(problem, judged, policy, dev, vb, workdir, say)
        flow.baseline_store = baseline_store
        early = flow.read_statically()  # before any child process starts: what the source alone settles
        if early is not None:
            say(f"verdict {early.status.value} (from reading the source; nothing ran)")
            if policy.sanitize:
                early = dataclasses.replace(early, sanitizer={"ran": False, "reason": "the verdict came from reading the source: "
                                                              "no candidate to run", "tools": []})
            return _as_given(early, flow.copies, candidate, shown_as)
        forkpool.warm_up()  # its torch import overlaps the build
        with _cancellable(flow, cancel):
            verdict = flow.run()
        say(f"verdict {verdict.status.value}")
        if policy.sanitize:
            verdict = _sanitize(flow, verdict, say)
        return _as_given(verdict, flow.copies, candidate, shown_as)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _as_given(verdict: Verdict, copies: list[Path], candidate: str | Path, shown_as: str | None) -> Verdict:
    """The verdict with its messages naming the candidate's files as the caller named them
    (`shown_as`: the candidate's folder; default the folder of `candidate` as given), not the
    private copies the judge made of them (judge.snapshot, a spare child's inputs)."""
    given = Path(candidate)
    root = str(shown_as) if shown_as is not None else str(given if given.is_dir() else given.parent)
    prefix = "" if root in ("", ".") else root.rstrip("/") + "/"

    def named(text: str) -> str:
        for copy in copies:
            for path in dict.fromkeys((str(copy), str(copy.resolve()))):
                text = text.replace(path + "/", prefix).replace(path, root or ".")
        return text

    guards = tuple(dataclasses.replace(g, detail=named(g.detail)) for g in verdict.guards)
    return dataclasses.replace(verdict, log=named(verdict.log), guards=guards)


@contextlib.contextmanager
def _cancellable(flow: "_Flow", cancel: threading.Event | None) -> Iterator[None]:
    """While the block runs, a set `cancel` kills the flow's children (its waits end at once);
    afterwards it turns whatever the flow concluded into Cancelled."""
    if cancel is None:
        yield
        return
    done, lock = threading.Event(), threading.Lock()
    flow.cancel = cancel

    def watch() -> None:  # kills children as long as the flow runs: those it starts later too
        while not done.is_set():
            if cancel.wait(0.1):
                with lock:  # never after the flow ended: its reference child may be back in the warm pool
                    if done.is_set():
                        return
                    flow.kill_children()
                done.wait(0.1)

    threading.Thread(target=watch, name="kw-cancel", daemon=True).start()
    try:
        yield
    finally:
        with lock:  # not joined: the watcher ends within 0.1 s by itself (a join cost every served verdict up to that)
            done.set()
    if cancel.is_set():
        raise Cancelled()


SANITIZED = (Status.CORRECT, Status.INCORRECT, Status.RUNTIME_ERROR, Status.REJECTED)  # the candidate built and imported


def _sanitize(flow: "_Flow", verdict: Verdict, say: Progress) -> Verdict:
    """Attach compute-sanitizer's findings (judge.sanitize); the status stays what the judge said."""
    from kernelwright.judge import sanitize

    if flow.device != "cuda":
        result: dict[str, Any] = {"ran": False, "reason": "CPU backend: compute-sanitizer checks CUDA kernels", "tools": []}
    elif verdict.status not in SANITIZED:
        result = {"ran": False, "reason": f"status {verdict.status.value}: no candidate to run", "tools": []}
    else:
        say("running the candidate under compute-sanitizer (memcheck, racecheck, initcheck)")
        files = getattr(flow, "files", None)
        ext = files is not None and files.build_path == BuildPath.TORCH_EXTENSION
        env = {"KERNELWRIGHT_CACHE": str(cache_dir()), **(extension.env(flow.vb.candidate["hash"]) if ext else {})}
        try:
            with device_lock(flow.device, flow.policy.gpu_index, "shared", what="running compute-sanitizer", progress=say):
                result = sanitize.run(flow.problem.path, flow.candidate_path, gpu_index=physical_gpu(flow.policy.gpu_index), env=env,
                                      timeout_s=flow.policy.sanitize_timeout_s, sandbox_mode=flow.policy.sandbox, size=flow.vb.size)
        except Exception as exc:  # noqa: BLE001 - the sanitizer is advisory: its failure must not lose the verdict
            result = {"ran": False, "reason": f"the sanitizer run failed: {type(exc).__name__}: {exc}"[:300], "tools": []}
        say(sanitize.describe(result))
    return dataclasses.replace(verdict, sanitizer=result)


NVIDIA_PROC = "/proc/driver/nvidia/gpus"  # the driver's GPU list (kernel-wide)
NVIDIA_CTL = "/dev/nvidiactl"  # device nodes: present only where GPUs are passed in
OTHER_GPU_NODES = ("/dev/dxg", "/dev/kfd", "/dev/nvhost-ctrl", "/dev/nvmap")  # WSL's GPU (no /proc entries of the driver there), ROCm's, Jetson's: torch decides


def gpu_seen_by_driver() -> bool | None:
    """Whether an NVIDIA GPU is visible as far as CUDA_VISIBLE_DEVICES and the driver's /proc
    entries and device nodes tell, without torch: False when CUDA_VISIBLE_DEVICES hides every GPU,
    True when the driver lists a GPU and its device nodes are here, None when they do not answer.
    False too where nothing of a GPU driver is here at all (no /proc entries, no device nodes):
    torch could not reach a GPU either, and asking it costs seconds."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    if not any(os.path.exists(p) for p in (NVIDIA_PROC, NVIDIA_CTL, *OTHER_GPU_NODES)):
        return False
    try:
        driver_sees_gpus = any(Path(NVIDIA_PROC).iterdir())
        nodes = Path(NVIDIA_CTL).exists() and any(Path(NVIDIA_CTL).parent.glob("nvidia[0-9]*"))
        if driver_sees_gpus and nodes:  # a container without GPUs lacks the device nodes
            return True
    except OSError:
        pass
    return None


def _gpu_present() -> bool:
    """Whether an NVIDIA GPU is visible, without importing torch here when the driver's /proc
    entries answer (importing torch costs the judge's process seconds it does not otherwise need)."""
    seen = gpu_seen_by_driver()
    if seen is not None:
        return seen
    import torch

    return torch.cuda.is_available()


class _Flow:
    """One evaluation, step by step."""

    def __init__(self, problem: Problem, candidate: str | Path, policy: Policy, device: str, vb: VerdictBuilder, workdir: Path, say: Progress) -> None:
        self.problem, self.candidate_path, self.policy, self.device = problem, candidate, policy, device
        self.vb, self.workdir, self.say = vb, workdir, say
        self.children: list[Child] = []
        self.spares_taken: list[spares.Spare] = []  # spare children this evaluation took: their folders and reservations go with them
        self.candidate_child = "new"  # or "spare": forked ahead, its CUDA context made (judge.spares)
        seeds = policy.seeds or tuple(secrets.randbelow(2**31 - 1) + 1 for _ in range(policy.n_seeds))
        self.seeds = list(seeds) if policy.enabled("seeds") else list(seeds[:1])
        self.meta: dict[str, Any] = {}  # the reference child's setup reply
        self.cand_meta: dict[str, Any] = {}  # the candidate child's setup reply
        self.baseline_store: str | Path | None = None  # where cached baselines are looked up (None: the default store)
        self.cache_note = ""  # why cached baselines were measured after all (step interleave)
        self.estimate: Any = None  # the verdict's GPU memory estimate (judge.memory), where admission applies
        self.oracle_note = ""  # why step precision has no oracle, when it has none (_oracle_spec)
        self.precision: list[dict[str, Any]] | None = None  # step precision's figures from the oracle's case comparison
        self.warm_ref: refpool.Warm | None = None  # the reference child, kept warm across evaluations
        self.cancel: threading.Event | None = None  # set: the evaluation is being cancelled (evaluate raises Cancelled)
        self.cand_env: dict[str, str] = {}  # the candidate child's extra environment (a torch extension's build folder)
        self.retimed: list[float] = []  # per timing window not priced: how far step device_sync's charge moved its price (a share)
        self.files: CandidateFiles | None = None  # what discovery found (read_statically)
        self.copies: list[Path] = [Path(candidate) if Path(candidate).is_dir() else Path(candidate).parent]  # the candidate's private copies

    def read_statically(self) -> Verdict | None:
        """Discovery, then judge.precheck: the verdict the candidate's source settles (a syntax
        error, no ModelNew, a signature the judge's calls cannot fit), else None. Reads only."""
        try:
            self._discover()
        except Stop as stop:
            return self.vb.finish(stop.status, str(stop))
        except ProblemError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failure of the judge itself is a verdict too, as in run()
            log.exception("judge failure")
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-8:])
            return self.vb.finish(Status.INFRA_ERROR, f"the judge failed: {type(exc).__name__}: {exc}\n{tb}")
        early = self._precheck(built=False)
        return None if early is None else self.vb.finish(early.status, early.reason)

    def _precheck(self, built: bool) -> Early | None:
        """judge.precheck on the discovered candidate; None when it cannot tell (or fails: it only saves time)."""
        assert self.files is not None
        try:
            return precheck(self.problem.source, self.files.model_new, built=built)
        except Exception as exc:  # noqa: BLE001 - its failure leaves the question to the children
            log.warning("the static read failed: %s: %s", type(exc).__name__, exc)
            return None

    def run(self) -> Verdict:
        clean = False  # a verdict reached: the reference child may serve the next evaluation
        try:
            self._run()
            clean = True
            return self.vb.finish(Status.CORRECT)
        except Stop as stop:
            clean = True
            return self.vb.finish(stop.status, str(stop))
        except ProblemError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failure of the judge itself is a verdict too
            log.exception("judge failure")
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-8:])
            return self.vb.finish(Status.INFRA_ERROR, f"the judge failed: {type(exc).__name__}: {exc}\n{tb}")
        finally:
            self._release_children() if clean else self._close_children()

    def _close_children(self) -> None:
        warm, self.warm_ref = self.warm_ref, None
        children = self.children + ([warm.child] if warm else [])
        for child in children:
            child.request_exit()  # all at once: a GPU child takes a moment to tear down
        for child in children:
            child.close()  # a second close does nothing
        if warm is not None:
            warm.close()
        for spare in self.spares_taken:
            spare.release()  # its child closed above (under this flow's device lock, if any)

    def _release_children(self) -> None:
        """At a verdict: the reference child goes back to the warm pool when it is alive, idle and
        reset (its outputs and memory dropped); every other child closes."""
        warm, self.warm_ref = self.warm_ref, None
        ok = False
        if warm is not None:
            try:  # a child whose setup did not complete (no meta) is never pooled
                ok = bool(warm.meta) and not self._cancelled() and warm.child.drain(self.policy.run_timeout_s) and \
                    warm.child.call("reset", {}, timeout_s=self.policy.run_timeout_s) is not None and not warm.child.pending()
            except ChildError:
                ok = False
        self._close_children()  # the candidate's process goes before the pool touches the shared memory ledger
        if warm is not None:
            refpool.POOL.give_back(warm, self._ledger()) if ok else warm.close()

    def _lock_check(self, files: tuple[Path, Path]) -> None:
        """While this verdict waits for the device lock: a process of one of its own live candidate
        children (its process group or session) holding the lock's files open would make the
        verdict wait for itself, and every verdict on the device behind it; candidate code can
        open the shared lock folder until the children are sandboxed. That is the candidate's
        doing: rejected. Both files are checked whichever one the wait is at (a candidate holding
        the lock can leave another verdict at the gate ahead of this one)."""
        from kernelwright.judge.gpulock import opened_by

        mine = {c._proc.pid for c in self.children if c.config.role == "candidate" and c.alive()}
        if not mine:
            return

        def within(pid: int) -> bool:
            try:
                return os.getpgid(pid) in mine or os.getsid(pid) in mine
            except OSError:
                return False

        for pid, path in opened_by(files, within).items():
            self._close_children()  # the reference child too: no lock is held, so none of it goes back to the pool
            raise Stop(Status.REJECTED, f"the candidate's process (pid {pid}) holds the judge's device lock file "
                                        f"{path.name} open: the evaluation would wait for it forever")

    def _ledger(self) -> tuple[str, int] | None:
        """The device's memory ledger (judge.memory): its key and the device's size; None where
        admission is off (the CPU backend without KERNELWRIGHT_DEVICE_BYTES, or no size known)."""
        from kernelwright.judge import memory
        from kernelwright.judge.gpulock import device_key

        total = memory.device_bytes(self.meta or {})
        if total is None or (self.device != "cuda" and not os.environ.get(memory.FAKE_ENV)):
            return None
        return device_key(self.device, self.policy.gpu_index), total

    def _cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def kill_children(self) -> None:
        """Kill every child's process group now (from another thread: descriptors stay with the
        flow's thread, whose waits then end)."""
        warm = self.warm_ref
        for child in self.children + ([warm.child] if warm else []):
            child.kill()

    @contextlib.contextmanager
    def _device(self, mode: str, what: str) -> Iterator[None]:
        """Hold the device lock (judge.gpulock: shared for untimed work, exclusive for timing); when
        the section ends in a verdict or fails, the children are released or closed before the
        lock goes, so none of their device work (references still computing, say) outlives it."""
        with device_lock(self.device, self.policy.gpu_index, mode, what=what, progress=self.say, check=self._lock_check):
            try:
                yield
            except Stop:
                self._release_children()
                raise
            except BaseException:
                self._close_children()
                raise

    def _child(self, role: str, extra_env: dict[str, str] | None = None) -> Child:
        if self._cancelled():
            raise Stop(Status.INFRA_ERROR, "cancelled")
        if role == "candidate":  # confined from its setup on (judge.sandbox); its own extension folder is writable
            read = (str(self.problem.path), str(self.files.model_new.parent))
            config, spec = extension.candidate_config(self.policy.sandbox, self.device, self.policy.gpu_index, self.workdir, read, extra_env)
            self.vb.sandbox = sandbox.record(spec)
        else:
            env = {"KERNELWRIGHT_CACHE": str(cache_dir()), **(extra_env or {})}
            config = ChildConfig(role=role, device=self.device, gpu_index=self.policy.gpu_index, workdir=self.workdir, env=env)
        spare = spares.POOL.take(config) if role == "candidate" and not extra_env else None
        if spare is not None:  # forked before this evaluation, its device context made, nothing else (judge.spares)
            child = spare.child
            self.spares_taken.append(spare)
            self.candidate_child = "spare"
        else:
            child = Child(config)
        self.children.append(child)
        if role == "candidate" and not extra_env:
            spares.POOL.refill(config)  # for the next evaluation, in the background
        return child

    def _run(self) -> None:
        files = self.files or self._discover()
        ext = files.build_path == BuildPath.TORCH_EXTENSION
        # Raw kernels build first (compilers only: no candidate code runs), while the fork server
        # imports torch; children forked from it start in milliseconds, each waiting for its first
        # command. No candidate code runs before the reference child has loaded the problem.
        if not ext and not self._build(files):
            raise Stop(Status.COMPILE_ERROR, self.vb.log)
        early = self._precheck(built=True) if files.build_path == BuildPath.RAW else None  # its loads now find the cache
        if early is not None:
            raise Stop(early.status, early.reason)
        self.say("starting the children")
        self.cand_env = extension.env(files.hash) if ext else {}
        builder = self._child("candidate", self.cand_env) if ext else None
        # a torch extension's run child starts once its build is done: a child spawned afresh enters
        # the sandbox at its start, and must find the build's folder as the build left it
        t_cand = time.perf_counter()
        cand = None if ext else self._child("candidate", self.cand_env)
        cand_s = time.perf_counter() - t_cand  # its start (a fork or a spawn), or a spare's taking
        ref, how = self._reference()  # before the build child runs candidate code
        if builder is not None:
            if not self._build_extension(builder):
                raise Stop(Status.COMPILE_ERROR, self.vb.log)
            t_cand = time.perf_counter()
            cand = self._child("candidate", self.cand_env)
            cand_s = time.perf_counter() - t_cand
        assert cand is not None
        how = f"{how}; the candidate child {'taken' if self.candidate_child == 'spare' else 'started'} in {cand_s:.2f} s"
        warm = self.warm_ref
        self.vb.workers = {"children": "forked" if isinstance(cand._proc, forkpool.Forked) else "spawned",
                           "reference": "warm" if warm and warm.uses else "new", "reference_evaluations": (warm.uses + 1) if warm else 1,
                           "candidate": self.candidate_child, "retimed": 0}
        cases = self.cases()
        self.ref = ref
        with self._admission():
            # The reference child computes every case's reference while the candidate is imported.
            self.say(f"problem loaded ({how}); computing references while the candidate is imported")
            with self._device("shared", "computing references and checking correctness"):
                ref.send("references", {"cases": [c.to_dict() for c in cases], "oracle": self._oracle_spec(cases)})
                self._candidate_setup(cand)
                self._correctness(ref, cand, cases)
                if not self.policy.time_candidate:
                    self._release_children()  # their teardown is device work too: done before the lock goes
            if self.policy.time_candidate:
                from kernelwright.judge.phases import timing_phase

                with self._device("exclusive", "timing"):
                    timing_phase(self, ref, cand)
                    self._release_children()  # before the next evaluation may time
            else:
                self.vb.timing_skipped("the policy asks for correctness only")

    @contextlib.contextmanager
    def _admission(self) -> Iterator[None]:
        """The verdict's GPU memory (judge.memory): estimated from the reference child's setup, a
        problem too large for the device refused, the estimate reserved on the device's ledger for
        the rest of the verdict (waiting while other verdicts hold too much). Off on the CPU
        backend unless KERNELWRIGHT_DEVICE_BYTES names a size."""
        from kernelwright.judge import memory

        ledger = self._ledger()
        if ledger is None:
            yield
            return
        key, total = ledger
        pol = self.policy
        ref_pool = pol.time_candidate and (pol.baselines == "measured" or (pol.baselines == "cached" and self._no_cached_baselines()))
        self.estimate = est = memory.estimate(self.meta, timed=pol.time_candidate, ref_pool=ref_pool, fresh=pol.enabled("fresh_inputs"),
                                              oracle=precision.device_oracle_bytes(pol, self.meta), total=total)
        free = (self.meta.get("memory") or {}).get("device_free_bytes")
        self.vb.memory = {**est.to_dict(), "device_bytes": total, "device_free_bytes_at_setup": free, "problem": memory.footprint(self.meta)}
        refused = memory.too_large(est, total, free)
        if refused:
            raise ProblemError(f"{self.problem.path}: {refused}")
        with contextlib.ExitStack() as stack:
            try:  # only the wait is caught here: a timeout inside the verdict (a ChannelTimeout is one) is not admission's
                t0 = time.monotonic()
                try:
                    stack.enter_context(memory.admitted(key, est.total, total, timeout_s=0))
                except TimeoutError:  # idle warm reference children give their contexts up before anyone waits
                    with refpool.POOL.waiting_for_memory() as closed:
                        if closed:
                            self.say(f"closed {closed} idle warm reference child(ren) to make room on the GPU")
                        stack.enter_context(memory.admitted(key, est.total, total, say=self.say, cancelled=self._cancelled))
                waited = time.monotonic() - t0
            except TimeoutError as exc:
                raise Stop(Status.INFRA_ERROR, f"waiting for GPU memory: {exc}") from None
            except InterruptedError:
                raise Stop(Status.INFRA_ERROR, "cancelled") from None
            self.vb.memory["admitted_after_s"] = round(waited, 3)
            yield

    def _oracle_spec(self, cases: list[Case]) -> dict[str, Any] | None:
        """Step precision's request to the reference child (judge.guards.precision.oracle_spec)."""
        spec, self.oracle_note = precision.oracle_spec(self.policy, cases, self.meta or {}, self.estimate, self.device == "cuda")
        return spec

    def _no_cached_baselines(self) -> bool:
        from kernelwright.judge.phases import _cached_baselines

        return _cached_baselines(self) is None

    def _oom(self, exc: ChildError, doing: str) -> Stop:
        """Whose a candidate child's out-of-memory is, decided from the trusted side: the candidate
        child is killed first, then the reference child reports the device's free memory. When that
        covers the candidate's part of the estimate, the memory was there for it and it took more:
        its runtime_error. When even without it the device lacks that much, other processes hold the
        rest: infra_error. Anything the candidate's process said about its memory is not used."""
        from kernelwright.judge import memory

        est = getattr(self, "estimate", None)
        for child in self.children:
            if child.config.role == "candidate":
                child.kill()
        tail = f"\n--- child log ---\n{exc.log_tail}" if exc.log_tail.strip() else ""
        ref = getattr(self, "ref", None)
        mem: dict[str, Any] = {}
        if ref is not None and est is not None:
            try:
                if ref.outstanding and not ref.drain(timeout_s=self.policy.build_timeout_s):  # a pipelined reply ('references') first
                    raise ChildError("died", "the reference child did not finish its outstanding command")
                mem = ref.call("memory", {}, timeout_s=60) or {}
            except ChildError:
                mem = {}
        free = mem.get("free_bytes")
        if not isinstance(free, int) or est is None:
            return Stop(Status.RUNTIME_ERROR, truncate(f"{doing}: the candidate ran out of GPU memory: {exc}{tail}"))
        if self.vb.memory is not None:
            self.vb.memory["free_bytes_after_candidate_oom"] = free
        if free >= est.candidate:
            return Stop(Status.RUNTIME_ERROR, truncate(
                f"{doing}: the candidate ran out of GPU memory; with its process gone {memory.gib(free)} are free, more than its part of "
                f"the verdict's estimate ({memory.gib(est.candidate)}): it asked for more than the device had for it. {exc}{tail}"))
        return Stop(Status.INFRA_ERROR, truncate(
            f"{doing}: out of GPU memory, not the candidate's doing: with its process gone only {memory.gib(free)} are free, less than "
            f"its part of the verdict's estimate ({memory.gib(est.candidate)}); other processes hold the rest. {exc}{tail}"))

    # -- discovery and build ------------------------------------------------------------------

    def _discover(self) -> CandidateFiles:
        try:
            files = discover(self.candidate_path)
        except CandidateSyntaxError as exc:
            self.vb.candidate = {"hash": None, "build_path": BuildPath.NONE.value}
            shown = f"\n    {exc.text.rstrip()}" if exc.text and exc.text.strip() else ""
            raise Stop(Status.COMPILE_ERROR, f"syntax error in the candidate: {exc}{shown}") from None
        self.vb.candidate = {"hash": files.hash, "build_path": files.build_path.value}
        self.files = files
        self.vb.static_findings = _static_findings(files)
        return files

    def _build(self, files: CandidateFiles) -> bool:
        if files.build_path == BuildPath.RAW:
            return self._build_raw(files)
        self.vb.build_s = 0.0
        return True

    def _build_raw(self, files: CandidateFiles) -> bool:
        self.say(f"building {len(files.sources)} raw kernel source(s)")
        t0 = time.perf_counter()
        results = prebuild(files, timeout_s=self.policy.build_timeout_s, sandbox_mode=self.policy.sandbox)
        self.vb.build_s = time.perf_counter() - t0
        self.vb.resources = _worst_resources([r.resources for r in results if r.resources])
        failed = [r for r in results if not r.ok]
        if failed:
            self.vb.log = truncate("\n".join(("build timed out\n" if r.timed_out else "") + r.log for r in failed))
            return False
        new = [r for r in results if not r.cached and r.lib_path is not None]
        if new:  # the build cache grew: where (cache hits write nothing)
            from kernelwright import written

            self.say(written.cached("raw builds", new[0].lib_path.parent.parent, len(new)))
        return True

    def _build_extension(self, child: Child) -> bool:
        """Import the candidate in a build child so load_inline compiles (judge.extension); the run child reuses it."""
        ext_dir = extension.env(self.vb.candidate["hash"])["TORCH_EXTENSIONS_DIR"]
        self.say(f"building the torch extension (load_inline) in a build child, into torch's cache {ext_dir}")
        built = extension.build(child, self._candidate_args(child), timeout_s=self.policy.build_timeout_s, candidate_hash=self.vb.candidate["hash"],
                                hold=lambda: self._device("shared", "building the torch extension"))  # the build child constructs ModelNew on the device
        self.vb.build_s = built.seconds
        if not built.compiled:
            self.vb.log = built.log
            return False
        if built.failure is not None:
            raise self.child_stop(built.failure, "building") from None
        return True

    # -- children -----------------------------------------------------------------------------

    def _reference_args(self) -> dict[str, Any]:
        args = {
            "problem_path": str(self.problem.path), "size": self.vb.size, "device": self.device, "precision": self.policy.precision,
            "init_seed": self.seeds[0], "atol": self.policy.atol, "rtol": self.policy.rtol,
            "strict": self.policy.enabled("output_checks"),
        }
        if self.device == "cuda" and self.policy.time_candidate and self.policy.enabled("harness_overhead"):
            from kernelwright.judge.measure import policy_switches

            args["null_switches"] = policy_switches(self.policy, self.policy.timing.lead_us)
        return args

    def _reference(self) -> tuple[Child, str]:
        """The reference child and how it came: a warm one of this problem and policy when one is
        idle (reset under this evaluation's init seed), else a new one set up now."""
        args = self._reference_args()
        k = refpool.key(self.problem.hash, str(self.problem.path), self.device, self.policy.gpu_index, args)
        if self._cancelled():
            raise Stop(Status.INFRA_ERROR, "cancelled")
        warm = refpool.POOL.take(k) if refpool.capacity() else None
        if warm is not None and warm.child.pending():  # a reply nobody asked for: the child is not trusted
            warm.close()
            warm = None
        if warm is not None:
            self.warm_ref = warm
            t0 = time.perf_counter()
            failed: ChildError | None = None
            with self._device("shared", "resetting the warm reference child"):
                try:  # caught inside: a section that fails closes every child of the flow, the candidate's too
                    warm.child.call("reset", {"init_seed": self.seeds[0]}, timeout_s=self.policy.build_timeout_s)
                except ChildError as exc:
                    failed = exc
            if failed is not None and self._cancelled():
                raise Stop(Status.INFRA_ERROR, "cancelled")
            if failed is not None:  # it died idle (or was tainted): nothing of this verdict ran on it, so a new one replaces it
                log.warning("warm reference child failed its reset (%s); setting up a new one", failed)
                self.say(f"the warm reference child failed its reset ({failed}); setting up a new one")
                self.warm_ref = None
                warm.close()
                warm = None
        if warm is not None:
            warm.uses += 1
            self.meta = dict(warm.meta)
            self.vb.set_problem_meta(self.meta)
            return warm.child, f"warm reference child, evaluation {warm.uses + 1} it serves, reset in {time.perf_counter() - t0:.2f} s"
        t0 = time.perf_counter()
        workdir = refpool.new_workdir()
        child = Child(ChildConfig(role="reference", device=self.device, gpu_index=self.policy.gpu_index, workdir=workdir,
                                  env={"KERNELWRIGHT_CACHE": str(cache_dir())}))
        forked_s = time.perf_counter() - t0  # its start, a fork or a spawn
        self.warm_ref = refpool.Warm(key=k, child=child, meta={}, workdir=workdir)
        self._reference_setup(child, args)
        self.warm_ref.meta = dict(self.meta)
        return child, f"reference child: started in {forked_s:.2f} s, {_seconds(self.meta)}"

    def _reference_setup(self, ref: Child, args: dict[str, Any]) -> None:
        try:
            # exclusive when the setup times the empty call (null_switches), shared otherwise
            with self._device("exclusive" if "null_switches" in args else "shared", "loading the problem"):
                self.meta = ref.call("setup", args, timeout_s=self.policy.build_timeout_s)
        except ChildError as exc:
            if exc.kind == "problem":
                raise ProblemError(str(exc)) from None
            raise Stop(Status.INFRA_ERROR, f"the reference child failed: {exc}\n{exc.log_tail}") from None
        if self.meta.get("source_hash") != self.problem.hash:
            raise Stop(Status.INFRA_ERROR, f"the problem file changed on disk since it was loaded: {self.problem.path}")
        self.vb.set_problem_meta(self.meta)

    def _candidate_args(self, child: Child) -> dict[str, Any]:
        problem, cand = self._spare_paths(child)
        return {
            "problem_path": problem, "size": self.vb.size, "candidate_path": cand,
            "device": self.device, "precision": self.policy.precision, "init_seed": self.seeds[0],
            "check_identities": self.policy.enabled("function_identities"), "check_inputs": self.policy.enabled("inputs_unchanged"),
        }

    def _spare_paths(self, child: Child) -> tuple[str, str]:
        """The problem file and the candidate's model_new.py as `child` reads them: a spare entered
        the sandbox before this evaluation was known, so both are copied into its folder's in/,
        the one place outside the build cache it may read (judge.child_candidate.warm)."""
        spare = next((s for s in self.spares_taken if s.child is child), None)
        if spare is None:
            return str(self.problem.path), str(self.files.model_new)
        inputs = spare.workdir / sandbox.SPARE_INPUTS
        self.copies.append(inputs / "candidate")
        shutil.copyfile(self.problem.path, inputs / "problem.py")
        shutil.copytree(self.files.model_new.parent, inputs / "candidate", symlinks=True, dirs_exist_ok=True)
        return str(inputs / "problem.py"), str(inputs / "candidate" / self.files.model_new.name)

    def _candidate_setup(self, cand: Child) -> None:
        self.say("importing the candidate")
        try:
            self.cand_meta = cand.call("setup", self._candidate_args(cand), timeout_s=self.policy.build_timeout_s) or {}
            if self.candidate_child == "spare":  # its start-up was the time it waited: not this verdict's
                seconds = self.cand_meta.get("child_seconds")
                setup_s = seconds.get("command", float("nan")) if isinstance(seconds, dict) else float("nan")
                self.say(f"candidate imported (spare candidate child, its device context made ahead: {setup_s:.2f} s setup)")
            else:
                self.say(f"candidate imported (candidate child: {_seconds(self.cand_meta)})")
        except ChildError as exc:
            raise self.child_stop(exc, "importing the candidate") from None
        unconfined = sandbox.unconfined(cand.env.get(sandbox.SPEC_ENV, ""), cand._proc.pid)
        if unconfined:
            raise Stop(Status.INFRA_ERROR, f"the candidate child is not confined as its sandbox says: {unconfined}")
        if self.cand_meta.get("identities_moved"):
            from kernelwright.judge.measure import moved_names

            moved = moved_names(self.cand_meta["identities_moved"])
            self.vb.guard("function_identities", True, f"after the import: {moved}")
            raise Stop(Status.REJECTED, f"the candidate replaced {moved} when imported")

    def fresh_candidate(self, old: Child) -> Child:
        """Another candidate child for a timing window timed again (phases.timing_phase): the old
        one closed first, so its device memory is back before the new one's is made; the new one
        (a spare, or forked) imports the candidate as the first did. The caller audits one forward
        in it before timing."""
        old.request_exit()
        old.close()
        if old in self.children:
            self.children.remove(old)  # reaped: nothing may signal its pid again
        for spare in [s for s in self.spares_taken if s.child is old]:
            spare.release()  # its folder and its memory reservation go with it
            self.spares_taken.remove(spare)
        self.candidate_child = "new"
        cand = self._child("candidate", self.cand_env)
        self.vb.workers["candidate"] = self.candidate_child  # the child whose window is priced
        self._candidate_setup(cand)
        return cand

    def child_stop(self, exc: ChildError, doing: str) -> Stop:
        """Map a child failure to a verdict status (a reference child's failure is the judge's)."""
        if exc.role == "reference":
            return Stop(Status.INFRA_ERROR, truncate(f"{doing}: the reference child failed: {exc}\n{exc.log_tail}"))
        if exc.kind == "oom" and self.device == "cuda":
            return self._oom(exc, doing)
        status = {
            "timeout": Status.TIMEOUT, "compile": Status.COMPILE_ERROR, "forged": Status.REJECTED,
            "infra": Status.INFRA_ERROR,
        }.get(exc.kind, Status.RUNTIME_ERROR)
        tail = f"\n--- child log ---\n{exc.log_tail}" if exc.log_tail.strip() else ""
        return Stop(status, truncate(f"{doing}: {exc}{tail}"))

    # -- correctness --------------------------------------------------------------------------

    def lead_us(self) -> tuple[float, str]:
        """The lead spin for this evaluation and a note: on only when the policy asks for it and
        both children loaded it, so every contender is timed the same way."""
        want = self.policy.timing.lead_us
        if self.device != "cuda" or want <= 0:
            return 0.0, ""
        for who, meta in (("reference", self.meta), ("candidate", self.cand_meta)):
            if not meta.get("lead_ok"):
                return 0.0, f"; lead spin off: the {who} child could not load it ({meta.get('lead', 'no reply')})"
        return want, f", the start event queued behind a {want:g} us spin on {self.meta.get('lead')}, so host launch latency is not timed"

    def cases(self) -> list[Case]:
        return correctness_cases(self.seeds, self.policy, self.meta.get("n_extra", 0))

    def _correctness(self, ref: Child, cand: Child, cases: list[Case]) -> None:
        from kernelwright.judge.phases import correctness_phase

        correctness_phase(self, ref, cand, cases)


def correctness_cases(seeds: list[int], policy: Policy, n_extra: int) -> list[Case]:
    """get_inputs() under every seed; the near duplicate; each distribution once, under the seeds in
    turn; the extra shapes."""
    cases = [Case("native", s) for s in seeds]
    if policy.enabled("near_duplicate"):
        # its own secret seed (derived from the fixed seeds only when the policy fixes them, to reproduce)
        near = (seeds[-1] * 48271 + 11) % (2**31 - 1) + 1 if policy.seeds else secrets.randbelow(2**31 - 2) + 1
        cases.append(Case("near", near))
    if policy.enabled("distributions"):
        dists = [d for d in policy.distributions if d in DISTRIBUTIONS]
        cases += [Case(d, seeds[i % len(seeds)]) for i, d in enumerate(dists)]
    if policy.enabled("extra_shapes"):
        cases += [Case("extra", seeds[0], k) for k in range(n_extra)]
    return cases


def _static_findings(files: CandidateFiles) -> list[dict[str, Any]]:
    """The static layer's advisory findings (reading only; a failure of the layer is a finding too)."""
    from kernelwright.judge.static import scan_candidate

    try:
        return scan_candidate(files.model_new, [(s.name, s.text) for s in files.sources])
    except Exception as exc:  # noqa: BLE001 - advisory: never stops a verdict
        log.warning("static layer failed: %s", exc)
        return [{"rule": "static_layer_failed", "file": files.model_new.name, "line": 0, "detail": f"{type(exc).__name__}: {exc}"[:200]}]


FORK_NOTE_S = 0.05  # a forked child slower than this from its fork to its own code says where the time went


def _seconds(reply: dict[str, Any]) -> str:
    """A child's start-up and setup as its setup reply gives them; for a forked child slower than
    FORK_NOTE_S to reach its own code, the seconds from its fork to each step before it
    (judge.forkserver.FORK_STEP_NAMES, only those names: the line stays short whatever a reply holds)."""
    from kernelwright.judge.forkserver import FORK_STEP_NAMES
    from kernelwright.judge.replies import seconds_value

    t = reply.get("child_seconds")
    t = t if isinstance(t, dict) else {}

    def num(key: str) -> float:
        value = t.get(key)
        return float(value) if seconds_value(value) else float("nan")

    text = f"{num('before_command'):.2f} s start-up, {num('command'):.2f} s setup"
    if num("fork_started") >= FORK_NOTE_S:
        steps = ", ".join(f"{k} {num('fork_' + k):.2f}" for k in FORK_STEP_NAMES if not math.isnan(num("fork_" + k)))
        text += f"; seconds from its fork: {steps}"
    return text


def _worst_resources(items: list[Resources]) -> Resources | None:
    if not items:
        return None
    def worst(name: str) -> int | None:
        values = [getattr(r, name) for r in items if getattr(r, name) is not None]
        return max(values) if values else None
    return Resources(registers=worst("registers"), shared_bytes=worst("shared_bytes"), spills=worst("spills"))
