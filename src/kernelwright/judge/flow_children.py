"""The judge's flow's children (judge.evaluate.Flow): the reference child (warm from the pool or
new), the candidate children (a spare, forked or spawned, confined by the policy's sandbox), a torch
extension's build child (judge.extension); what their failures come to; the device lock around
their work; and their release or close when the verdict is reached.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelwright.core.records import Status, truncate
from kernelwright.judge import extension, refpool, sandbox, sandbox_check, spares
from kernelwright.judge.build import cache_dir
from kernelwright.judge.candidate import CandidateFiles
from kernelwright.judge.gpulock import device_lock
from kernelwright.judge.policy import Policy
from kernelwright.judge.verdicts import Stop, VerdictBuilder
from kernelwright.judge.workers import Child, ChildConfig, ChildError
from kernelwright.problems.loader import Problem, ProblemError

log = logging.getLogger(__name__)


class Children:
    """The part of the judge's flow that starts, commands and ends its children; Flow holds the state."""

    problem: Problem
    candidate_path: str | Path
    policy: Policy
    device: str
    vb: VerdictBuilder
    workdir: Path
    say: Callable[[str], None]
    files: CandidateFiles | None
    children: list[Child]
    spares_taken: list[spares.Spare]
    candidate_child: str
    seeds: list[int]
    meta: dict[str, Any]
    cand_meta: dict[str, Any]
    cand_env: dict[str, str]
    jit_before: list[dict[str, Any]]
    warm_ref: refpool.Warm | None
    cancel: threading.Event | None
    copies: list[Path]
    estimate: Any

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
        with device_lock(self.device, self.policy.gpu_index, mode, what=what, progress=self.say, check=self._lock_check) as held:
            self.vb.device_wait_s[mode] = self.vb.device_wait_s.get(mode, 0.0) + held.waited_s  # the verdict's queueing, apart
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
            self.vb.sandbox = sandbox_check.record(spec)
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
        if role == "candidate":
            self.vb.jit_from = self._jit_report
        if role == "candidate" and not extra_env:
            spares.POOL.refill(config)  # for the next evaluation, in the background
        return child

    def _jit_report(self) -> dict[str, Any] | None:
        """The verdict's `jit`: Triton's just-in-time work summed over this verdict's candidate children
        (each one's last report, judge.jit_clock; those a re-timed window let go included), and where its
        cache lived; None when none reported."""
        reports = list(self.jit_before) + [c.jit for c in self.children if c.config.role == "candidate" and c.jit is not None]
        if not reports:
            return None
        total: dict[str, Any] = {}
        for rep in reports:
            for key, value in rep.items():
                total[key] = round(total.get(key, 0) + value, 3)
        return {**total, "children": len(reports), "cache": "candidate" if self.cand_env.get("TRITON_CACHE_DIR") else "process"}

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
            "triton_kernels": bool(getattr(self.files, "triton_kernels", ())),  # the child times Triton's compiles only then (judge.jit_clock)
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
        unconfined = sandbox_check.unconfined(cand.env.get(sandbox.SPEC_ENV, ""), cand._proc.pid)
        if unconfined:
            raise Stop(Status.INFRA_ERROR, f"the candidate child is not confined as its sandbox says: {unconfined}")
        if self.cand_meta.get("identities_moved"):
            from kernelwright.judge.measure import moved_names

            moved = moved_names(self.cand_meta["identities_moved"])
            self.vb.guard("function_identities", True, f"after the import: {moved}")
            raise Stop(Status.REJECTED, f"the candidate replaced {moved} when imported")

    def fresh_candidate(self, old: Child) -> Child:
        """Another candidate child for a timing window timed again (phases_timing.timing_phase): the old
        one closed first, so its device memory is back before the new one's is made; the new one
        (a spare, or forked) imports the candidate as the first did. The caller audits one forward
        in it before timing."""
        old.request_exit()
        old.close()
        if old.jit is not None:
            self.jit_before.append(old.jit)  # its compiles and autotuning count in the verdict's `jit` too
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
