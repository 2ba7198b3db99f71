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
import os
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelwright.judge import cache_prune, extension, finish, forkpool, host_folders, quota, refpool, sandbox, spares
from kernelwright.judge.candidate import CandidateFiles, CandidateSyntaxError, discover, prebuild
from kernelwright.judge.flow_children import Children
from kernelwright.judge.gpulock import enabled as gpu_lock_enabled
from kernelwright.judge.guards import precision
from kernelwright.judge.phases import correctness_phase
from kernelwright.judge.phases_timing import cached_baselines, timing_phase
from kernelwright.judge.policy import DISTRIBUTIONS, Policy
from kernelwright.judge.precheck import Early, precheck
from kernelwright.judge.snapshot import snapshot
from kernelwright.core.records import Case, BuildPath, Resources, Status, Verdict, truncate
from kernelwright.judge.verdicts import Stop, VerdictBuilder
from kernelwright.judge.workers import Child, physical_gpu
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


def work_folder(prefix: str = "kw-eval-") -> Path:
    """A private folder for one evaluation (or the agent's build of its candidate, which must find
    what the evaluation will): in memory when /dev/shm is roomy, else on disk (TMPDIR)."""
    shm = Path("/dev/shm")
    try:
        roomy = shm.is_dir() and shutil.disk_usage(shm).free >= SHM_MIN_FREE
    except OSError:
        roomy = False
    return Path(tempfile.mkdtemp(prefix=prefix, dir=shm if roomy else None))


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
    workdir = work_folder()
    try:
        main = snapshot(candidate, workdir / "candidate")  # a malformed candidate raises ValueError
        judged = main.parent if main.name == "model_new.py" else main
        flow = Flow(problem, judged, policy, dev, vb, workdir, say)
        flow.baseline_store = baseline_store
        early = flow.read_statically()  # before any child process starts: what the source alone settles
        if early is not None:
            say(f"verdict {early.status.value} (from reading the source; nothing ran)")
            if policy.sanitize:
                early = dataclasses.replace(early, sanitizer={"ran": False, "reason": "the verdict came from reading the source: "
                                                              "no candidate to run", "tools": []})
            return finish.as_given(early, flow.copies, candidate, shown_as)
        forkpool.warm_up()  # its torch import overlaps the build
        with _cancellable(flow, cancel):
            verdict = flow.run()
        say(f"verdict {verdict.status.value}")
        if policy.sanitize:
            verdict = finish.with_sanitizer(flow, verdict, say)
        return finish.as_given(verdict, flow.copies, candidate, shown_as)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextlib.contextmanager
def _cancellable(flow: "Flow", cancel: threading.Event | None) -> Iterator[None]:
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


class Flow(Children):
    """One evaluation, step by step (its children: judge.flow_children)."""

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
        self.cand_env: dict[str, str] = {}  # the candidate child's extra environment (a torch extension's or Triton's folder)
        self.triton_lock: int | None = None  # the lock on the candidate's Triton cache, held for the verdict (extension.hold_triton_cache)
        self.in_use: list[int] = []  # shared locks on the cache entries this verdict uses, held to its end: a prune passes them by
        self.jit_before: list[dict[str, Any]] = []  # jit reports of candidate children let go (flow_children.fresh_candidate)
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
        except host_folders.HostFault as exc:  # the judge's own look at the host, before a compiler or a candidate child started (judge.host_folders)
            return self.vb.finish(Status.INFRA_ERROR, f"the host keeps the sandbox from working: {exc}")
        except Exception as exc:  # noqa: BLE001 - a failure of the judge itself is a verdict too
            log.exception("judge failure")
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-8:])
            return self.vb.finish(Status.INFRA_ERROR, f"the judge failed: {type(exc).__name__}: {exc}\n{tb}")
        finally:
            try:
                self._release_children() if clean else self._close_children()
            finally:  # the locks go whatever the children's closing raised: a service would hold them for good
                if self.triton_lock is not None:
                    os.close(self.triton_lock)
                    self.triton_lock = None
                for fd in self.in_use:
                    os.close(fd)
                self.in_use.clear()

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
        if ext or (files.triton_kernels and self.device == "cuda"):  # its extension folder (a Triton cache) in use to the verdict's end,
            self._hold(cache_prune.extension_lock(extension.folder_path(files.hash)))  # held before the folder is made and marked
        self.cand_env = extension.env(files.hash) if ext else {}
        if not ext and files.triton_kernels and self.device == "cuda":  # its Triton kernels compile in the child: a cache of its own
            self.triton_lock = extension.hold_triton_cache(files.hash)  # unless a verdict of the same files holds it now
            self.cand_env = extension.triton_env(files.hash) if self.triton_lock is not None else {}
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

        return cached_baselines(self) is None

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

    def _hold(self, lock: Path) -> None:
        fd = cache_prune.in_use(lock)
        if fd is not None:
            self.in_use.append(fd)

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
        for r in results:  # in use until the verdict ends: a prune passes them by
            if r.lib_path is not None:
                self._hold(cache_prune.build_lock(r.lib_path))
        if any(r.lib_path is not None and not r.lib_path.is_file() for r in results):  # pruned between the hit and the hold
            results = prebuild(files, timeout_s=self.policy.build_timeout_s, sandbox_mode=self.policy.sandbox)
            self.vb.build_s = time.perf_counter() - t0
            if not all(r.ok for r in results):
                self.vb.log = truncate("\n".join(r.log for r in results if not r.ok))
                return False
        new = [r for r in results if not r.cached and r.lib_path is not None]
        if new:  # the build cache grew: where (cache hits write nothing)
            from kernelwright import written

            self.say(written.cached("raw builds", new[0].lib_path.parent.parent, len(new)))
        return True

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


def _worst_resources(items: list[Resources]) -> Resources | None:
    if not items:
        return None
    def worst(name: str) -> int | None:
        values = [getattr(r, name) for r in items if getattr(r, name) is not None]
        return max(values) if values else None
    return Resources(registers=worst("registers"), shared_bytes=worst("shared_bytes"), spills=worst("spills"))
