"""The judge's side of the timing protocol: interleaved rounds across the children, re-checks of
timed outputs and the stopping rule. What the rounds produce, and step device_sync's charge on it,
is judge.samples's.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any, Callable

from kernelwright.judge import memory, stats
from kernelwright.judge.channel import close_fds
from kernelwright.judge.lead import lead_for
from kernelwright.judge.policy import Policy
from kernelwright.core.records import ASK_SEED
from kernelwright.judge.samples import HELD_MAX_MS, HELD_MIN_MS, Samples, TimingOutcome
from kernelwright.judge.workers import Child, ChildError

POOL_SIZE = memory.POOL_SLOTS  # input sets in the timing pool, unless run_timing is given fewer (memory.pool_slots)
REHEARSAL_CALLS = 3  # calls through the timing protocol at the end of each contender's warm-up, not counted
NULL_CALLS = 3  # empty calls timed per child per round (step harness_overhead)
# A timing window whose price step device_sync's charge moved by more than RETIME_CHARGE_SHARE of
# its median is not priced: it is timed again in a fresh candidate child, at most RETIMES times, and
# the last window is priced whatever it reads (never the cheaper one). Honest calls are charged when
# their process wakes late after the synchronize, one process at a time (the reference child beside
# it in the same rounds mostly did not), so a fresh process is a fresh draw. Replayed over the 560
# honest windows of seven concurrent runs on the H200 (benchmarks/retime_replay.py), 5 % of windows
# are timed again and the pairs of one candidate's verdicts more than 2 % apart fall from 11 to
# under 1. The trigger is the charge itself (benchmarks/results/warm_h200.md). Candidate code sees its own times and can make its own calls
# late, so it could ask for a second window only when the first went badly: the second is priced
# no lower than the first's median stream time (phases_timing._floor_from_first_window), which leaves
# that choice worth at most the first window's charge.
RETIME_CHARGE_SHARE = 0.01
RETIMES = 1


def recheck_round(round_no: int) -> bool:
    """Re-check timed outputs in rounds 0, 3, 15, 63, ... (and after the last round): early enough
    to catch a candidate that turns wrong after a few calls, sparse enough that a long timing phase
    does not spend its time moving outputs (a 512 MB output takes about a second)."""
    k = round_no + 1
    return k & (k - 1) == 0 and (k.bit_length() - 1) % 2 == 0


class FlagsMoved(Exception):
    """The candidate moved a numerics flag during timing."""


class IdentitiesMoved(Exception):
    """The candidate replaced a watched function during timing."""


class BetweenCalls(Exception):
    """The candidate child found a hook of the candidate's set, or a Python thread alive, when a
    timed call's seed was about to be asked for (step between_calls, judge.window.quiet_window)."""


def _times(reply: dict[str, Any], n: int, role: str, what: str, synced_expected: bool = False) -> tuple[list[float], list[float]]:
    """(stream times, device-wide times) of a 'time' reply for n calls; FlagsMoved /
    IdentitiesMoved when the child saw numerics flags move or watched functions replaced, a
    'forged' ChildError when the lists do not fit the calls: a count other than n (device-wide
    times: n when synced_expected, else none), a value that is not a finite number >= 0, or a
    device-wide end before the stream's own (that event is queued later on the same stream). A
    reply without its device-wide times would otherwise switch step device_sync's charge off."""
    if reply.get("identities_moved"):
        raise IdentitiesMoved(f"during timing: {moved_names(reply['identities_moved'])}")
    if reply.get("flags_changed"):
        raise FlagsMoved(f"during timing: {reply['flags_changed']}")
    times, synced = reply.get("times_ms"), reply.get("synced_ms") or []
    if not isinstance(times, list) or not isinstance(synced, list):
        raise ChildError("forged", f"the {what} batch returned times that are not lists", role=role)
    if len(times) != n or len(synced) != (n if synced_expected else 0):
        raise ChildError("forged", f"the {what} batch returned {len(times)} times and {len(synced)} device-wide times for {n} calls", role=role)
    if not all(_number(x) for x in (*times, *synced)):
        raise ChildError("forged", f"the {what} batch returned a time that is not a finite number >= 0", role=role)
    if any(not d >= t for t, d in zip(times, synced)):
        raise ChildError("forged", f"the {what} batch returned a device-wide end before the stream's end", role=role)
    return times, synced


def moved_names(value: Any) -> str:
    """A candidate child's list of replaced names as text, whatever the reply holds there (it is
    the candidate's process: a forged value must not crash the judge)."""
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v)[:200] for v in value[:50])
    return repr(value)[:200]


def _number(x: Any) -> bool:
    """A finite JSON number >= 0 (an int too large for a float is not one)."""
    if type(x) not in (int, float):
        return False
    try:
        return math.isfinite(x) and x >= 0
    except OverflowError:
        return False


HOST_PARTS = frozenset({"inputs", "flush", "call", "output", "flush_first", "flush_max", "drain"})  # judge.timing.time_calls's host dict


def _host(reply: dict[str, Any]) -> dict[str, float]:
    """The child's own clock per part of a 'time' reply, or {} when it is missing or malformed.
    For the log only: nothing the judge decides reads it (a candidate child can write anything)."""
    host = reply.get("host_ms")
    if not isinstance(host, dict) or not set(host) <= HOST_PARTS:
        return {}
    ok = all(type(v) is float and math.isfinite(v) and v >= 0 for v in host.values())
    return dict(host) if ok else {}



def policy_switches(policy: Policy, lead_us: float) -> dict[str, Any]:
    """The timing switches of a 'time' command (judge.timing.switches_from) under the policy."""
    return {"flush": policy.enabled("l2_flush"), "events": policy.enabled("cuda_events"), "sync": policy.enabled("device_sync"),
            "lead_us": lead_us}


class _Rounds:
    """State of one timing phase."""

    def __init__(self, policy: Policy, ref: Child, cand: Child | None, workdir: Path, contenders: list[str], lead_us: float = 0.0,
                 poison_bytes: list[int] | None = None, cuda: bool = False, held: tuple[bool, bool] = (False, False),
                 pool_size: int = POOL_SIZE) -> None:
        if pool_size < 1:
            raise ValueError(f"the timing pool needs at least one input set, got {pool_size}")
        self.policy, self.ref, self.cand, self.workdir = policy, ref, cand, workdir
        self.pool_size = pool_size
        self.poison_bytes = poison_bytes  # output sizes to poison before a re-checked call; None: poison off
        self.contenders = contenders
        self.rng = random.SystemRandom()  # the slots and seeds from the system's source: nothing in the child can learn the next from the last
        self.pool_seeds = [self.rng.randrange(1, 2**31) for _ in range(pool_size)]
        self.samples = {c: Samples() for c in contenders}
        self.rechecked = 0
        self.recheck_guard = ""  # the guard a failed re-check is the finding of (TimingOutcome.recheck_guard)
        self.null_ms: dict[str, list[float]] = {}
        self.null_synced_ms: dict[str, list[float]] = {}
        self.null_wall: dict[str, Samples] = {}
        self.held: dict[str, tuple[list[float], list[float]]] = {}
        self.held_ok = held  # (the reference child loaded the spin kernel, the candidate child did)
        self.per_call_ms: dict[str, float] = {}  # warm-up estimates, to size batches
        self.fresh = policy.enabled("fresh_inputs")
        self.switches = policy_switches(policy, lead_us)
        self.cuda = cuda  # outputs are handed over by CUDA IPC: the candidate child is paused while the reference takes one
        self.synced = cuda and policy.enabled("cuda_events") and policy.enabled("device_sync")  # replies must hold device-wide times

    def calls(self, n: int) -> list[list[Any]]:
        """[slot, input seed] per call; seed None when fresh inputs are off (the pool as built)."""
        out = []
        for _ in range(n):
            slot = self.rng.randrange(self.pool_size)
            out.append([slot, self.rng.randrange(1, 2**31) if self.fresh else None])
        return out

    def input_seed(self, call: list[Any]) -> int:
        slot, seed = call
        return seed if seed is not None else self.pool_seeds[slot]

    def batch_size(self, contender: str) -> int:
        """The configured batch, shrunk so that one batch stays well inside the command timeout."""
        per_call = self.per_call_ms.get(contender) or 0.0
        fit = int(self.policy.run_timeout_s * 1e3 / (3 * per_call)) if per_call > 0 else self.policy.timing.batch
        return max(1, min(self.policy.timing.batch, fit))

    def timed(self, child: Child, args: dict[str, Any],
              taken: Callable[[dict[str, Any]], None] | None = None) -> tuple[dict[str, Any], float]:
        """(reply, judge-side wall ms) of one 'time' command. In the candidate's child a 'check'
        command follows, after the wall clock stopped: the judge's watch on replaced functions and
        the dispatcher costs 1-2 ms on the 2-core box, which the eager batches never pay. `taken`
        gets the reply first: the reference child takes a staged output there, before the
        candidate child is sent anything more (judge.handover)."""
        # each call's seed goes to the child only when that call's turn comes (inputs.asking_getter)
        calls = args["calls"]
        answers = [seed for _slot, seed in calls if seed is not None]
        args = {**args, "calls": [[slot, None if seed is None else ASK_SEED] for slot, seed in calls]}
        found: list[str] = []
        t0 = time.perf_counter()
        reply = child.call("time", args, timeout_s=self.policy.run_timeout_s, answers=answers, found=found)
        wall = (time.perf_counter() - t0) * 1e3
        if found:
            self.between(child, found)
        role = "candidate" if child is self.cand else "reference"
        if not isinstance(reply, dict):
            raise ChildError("forged", f"the {role} child's 'time' reply is not a mapping", role=role)
        if taken is not None:
            taken(reply)
        if child is self.cand:
            checked = child.call("check", {}, timeout_s=self.policy.run_timeout_s)
            if not isinstance(checked, dict):
                raise ChildError("forged", "the candidate child's 'check' reply is not a mapping", role=role)
            if checked.get("identities_moved"):
                raise IdentitiesMoved(f"during timing: {moved_names(checked['identities_moved'])}")
        return reply, wall

    def between(self, child: Child, found: list[str]) -> None:
        """What a child's asks said it found before a seed (judge.window.quiet_window): in the
        candidate's child a hook, or a thread or child process where the policy allows no torch
        compute, is BetweenCalls (step between_calls); in the reference child a hook is the
        judge's own fault (its threads and processes are torch.compile's)."""
        hooks = sorted({f for f in found if not f.startswith(("thread: ", "process: "))})
        if child is not self.cand:
            if hooks:
                raise ChildError("infra", f"the reference child found between timed calls: {moved_names(hooks)}", role="reference")
            return
        if not self.policy.enabled("between_calls"):
            return  # what was found was switched off all the same; threads and processes stay
        alive = [] if self.policy.allow_torch_compute else sorted({f for f in found if f.startswith(("thread: ", "process: "))})
        if hooks or alive:
            raise BetweenCalls("; ".join(x for x in (moved_names(hooks), moved_names(alive)) if x))

    def batch(self, contender: str, n: int) -> None:
        child = self.cand if contender == "candidate" else self.ref
        args = {"contender": contender, "calls": self.calls(n), "switches": self.switches, "save": {}}
        reply, wall = self.timed(child, args)
        times, synced = _times(reply, n, "candidate" if child is self.cand else "reference", contender, self.synced)
        self.samples[contender].add_batch(wall, times, n, synced, _host(reply))

    def null_batch(self, n: int) -> None:
        """n empty calls timed in each child, with the same switches as the contenders' calls."""
        for role, child in (("reference", self.ref), ("candidate", self.cand)):
            if child is None:
                continue  # the baselines alone: no candidate child
            args = {"contender": "null", "calls": [[0, None]] * n, "switches": self.switches, "save": {}}
            reply, wall = self.timed(child, args)
            times, synced = _times(reply, n, role, "empty-call", self.synced)
            self.null_wall.setdefault(role, Samples()).add_batch(wall, times, n, synced, _host(reply))
            self.null_ms.setdefault(role, []).extend(times)
            self.null_synced_ms.setdefault(role, []).extend(synced)

    def held_batch(self, n: int) -> None:
        """n calls of the judge's spin kernel held as long as each contender's median so far, for
        each contender of at least HELD_MIN_MS: in the child that times it, and the candidate's
        length in the reference child too (the cap in tail_bases); at most HELD_MAX_MS. Only with
        device-wide times and the spin kernel (the lead's) loaded, whether or not the policy uses
        it before the start event: in the reference child for the baselines, in both for the candidate."""
        if not self.synced or not self.held_ok[0]:
            return
        for c in self.contenders:
            times = self.samples[c].times_ms
            if not times or statistics.median(times) < HELD_MIN_MS or (c == "candidate" and not self.held_ok[1]):
                continue  # the baselines' held calls do not wait on what the candidate child says
            hold_us = min(statistics.median(times), HELD_MAX_MS) * 1e3
            where = [("candidate", self.cand), ("reference", self.ref)] if c == "candidate" else [("reference", self.ref)]
            for role, child in where:
                args = {"contender": "held", "hold_us": hold_us, "calls": [[0, None]] * n, "switches": self.switches, "save": {}}
                stream, synced = _times(self.timed(child, args)[0], n, role, "held-call", True)
                got = self.held.setdefault(f"{role}:{c}", ([], []))
                got[0].extend(stream)
                got[1].extend(synced)

    def recheck_one(self) -> str:
        """Time one candidate call, stage its output and compare it with the reference. With poison
        on, free memory is filled with NaN after the call's inputs are written and before it runs
        (outside the timed region): an output the call never wrote cannot hold the answer, not
        even the fresh inputs' values left in a freed block (seen on the H200: ReLU of non-negative
        inputs)."""
        call = self.calls(1)
        args = {"contender": "candidate", "calls": call, "switches": self.switches, "save": {"0": True}, "poison": self.poison_bytes}
        got: dict[str, Any] = {}

        def take(reply: dict[str, Any]) -> None:
            fds = self.cand.received_fds()
            try:
                with self.cand.paused(self.cuda):
                    got["result"] = self.ref.call("recheck", {"input_seed": self.input_seed(call[0]), "handover": reply.get("handover")},
                                                  fds=fds, timeout_s=self.policy.run_timeout_s)
            finally:
                close_fds(fds)

        times, synced = _times(self.timed(self.cand, args, take)[0], 1, "candidate", "re-checked", self.synced)
        self.samples["candidate"].times_ms.extend(times)
        self.samples["candidate"].synced_ms.extend(synced)
        result = got["result"] if isinstance(got.get("result"), dict) else {}
        self.rechecked += 1
        if result.get("ok") is True:  # only a plain true passes: a missing or odd field is a failed re-check
            return ""
        guard = result.get("guard")
        self.recheck_guard = guard if guard in ("precision", "timed_recheck") else "timed_recheck"  # precision: within tolerance, further than fp32 gets
        return f"timed call {self.rechecked}: {str(result.get('message') or 'the reference child gave no verdict on the output')[:1000]}"


def run_timing(
    policy: Policy, ref: Child, cand: Child | None, workdir: Path, *, baselines: bool, lead_us: float = 0.0,
    say: Callable[[str], None] = lambda _m: None, poison_bytes: list[int] | None = None, null_calls: int = 0, cuda: bool = False,
    held: tuple[bool, bool] = (False, False), pool_size: int = POOL_SIZE,
) -> TimingOutcome:
    """Warm up every contender, then time interleaved rounds until the stopping rule says stop;
    with null_calls > 0, each round also times that many empty calls in each child. Without a
    candidate child (cand None: judge.baseline) only the baselines are timed, by the same rounds.
    `pool_size` input sets make the timing pool (memory.pool_slots for the problem's inputs)."""
    if cand is None and not baselines:
        raise ValueError("nothing to time: no candidate child and no baselines")
    contenders = ([] if cand is None else ["candidate"]) + (["eager"] + (["compile"] if policy.compile_baseline else []) if baselines else [])
    r = _Rounds(policy, ref, cand, workdir, contenders, lead_us, poison_bytes if policy.enabled("poison") else None, cuda, held, pool_size)
    cfg = policy.timing
    compile_s = None
    # the warm-up ends with calls through the timing protocol itself, on fresh inputs (timing.rehearse)
    rehearse = {"calls": r.calls(REHEARSAL_CALLS), "switches": r.switches} if policy.enabled("warmup") else None
    if baselines:
        setup = {"pool_seeds": r.pool_seeds, "compile": policy.compile_baseline, "compile_mode": policy.compile_mode,
                 "warmup_ms": _warmup(policy), "rehearse": rehearse}
        # the candidate child stopped meanwhile: none of its threads can slow the launch times measured here (lead.lead_for)
        with cand.paused(cuda, whole_uid=True) if cand is not None else contextlib.nullcontext(True) as quiet:
            ref_setup = ref.call("setup_timing", setup, timeout_s=policy.build_timeout_s)
        compile_s = ref_setup["compile_s"]
        r.per_call_ms.update(ref_setup.get("per_call_ms", {}))
        # every timed call's, and the candidate's rehearsal; the policy's alone where a process of the candidate's still ran
        r.switches["lead_us"] = lead_for(lead_us, ref_setup.get("launch_ms") if quiet else None)
    if cand is not None:
        say(f"warming up the candidate (baselines ready{'' if compile_s is None else f', torch.compile took {compile_s:.1f} s'})")
        cand_setup = cand.call("setup_timing", {"pool_seeds": r.pool_seeds, "warmup_ms": _warmup(policy), "rehearse": rehearse},
                               timeout_s=policy.run_timeout_s)
        if cand_setup.get("identities_moved"):
            raise IdentitiesMoved(f"during the warm-up: {moved_names(cand_setup['identities_moved'])}")
        per_call = cand_setup.get("per_call_ms", 0.0)
        r.per_call_ms["candidate"] = float(per_call) if _number(per_call) and per_call < 1e9 else 0.0  # sizes batches only
    else:
        say("timing the baselines" + ("" if compile_s is None else f" (torch.compile took {compile_s:.1f} s)"))
    t0, failure, reason, order = time.perf_counter(), "", "", list(contenders)
    recheck = policy.enabled("timed_recheck") and cand is not None
    for round_no in itertools.count():
        for contender in order:
            r.batch(contender, r.batch_size(contender))
        if null_calls:
            r.null_batch(null_calls)
            r.held_batch(null_calls)
        if recheck and recheck_round(round_no):
            failure = _recheck(r, cfg.recheck)
        if failure:
            reason = "a timed output failed its re-check"
            break
        if policy.enabled("interleave"):
            order = order[1:] + order[:1]  # rotate who goes first
        summaries = [stats.summarize(r.samples[c].times_ms) for c in contenders]
        stop, reason = stats.should_stop(
            summaries, min_runs=cfg.min_runs, max_runs=cfg.max_runs, target=cfg.target_rel_sem,
            elapsed_s=time.perf_counter() - t0, budget_s=cfg.budget_for(cuda), adaptive=policy.enabled("adaptive_stop"),
        )
        if stop:
            failure = _recheck(r, cfg.recheck) if recheck and not recheck_round(round_no) else ""
            reason = "a timed output failed its re-check" if failure else reason
            break
    return TimingOutcome(r.samples, reason, failure, r.rechecked, compile_s, r.null_ms, r.null_synced_ms, r.null_wall, r.held,
                         lead_us=r.switches["lead_us"], recheck_guard=r.recheck_guard)


def _recheck(r: _Rounds, n: int) -> str:
    """Re-check n timed candidate outputs; the first failure's message, or empty."""
    for _ in range(n):
        failure = r.recheck_one()
        if failure:
            return failure
    return ""


def _warmup(policy: Policy) -> float:
    return policy.timing.warmup_ms if policy.enabled("warmup") else 0.0
