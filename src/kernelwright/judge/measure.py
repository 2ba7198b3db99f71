"""The judge's side of the timing protocol: interleaved rounds across the children, re-checks of
timed outputs, the wall-clock cross-check and the stopping rule.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelwright.judge import memory, stats
from kernelwright.judge.channel import close_fds
from kernelwright.judge.lead import lead_for
from kernelwright.judge.policy import Policy
from kernelwright.core.records import ASK_SEED
from kernelwright.judge.workers import Child, ChildError

POOL_SIZE = memory.POOL_SLOTS  # input sets in the timing pool, unless run_timing is given fewer (memory.pool_slots)
REHEARSAL_CALLS = 3  # calls through the timing protocol at the end of each contender's warm-up, not counted
NULL_CALLS = 3  # empty calls timed per child per round (step harness_overhead)
# Step device_sync: how late a call's device-wide end event may come, beyond the empty call's, before
# the call is charged with it: a tenth of the contender's time, within these bounds (TimingOutcome.charged).
TAIL_MARGIN_SHARE = 0.1
TAIL_MARGIN_MIN_MS = 0.005  # at 2 us, many calls of an honest 1.3 us ReLU kernel and its eager baseline were charged (benchmarks/results/judge_h200.md)
TAIL_MARGIN_MAX_MS = 0.010
# How far above the reference child's empty-call tail the candidate child's may count (tail_bases):
# per process the empty call's tail is 13-22 us on the H200 (benchmarks/results/judge_h200.md).
TAIL_BASE_SLACK_MS = 0.005
# The tail grows with the time the host waits in the synchronize (on the H200 a call holding the GPU
# 1-3 ms had a median tail of 29-84 us, against 13-22 us for the empty call, so honest 3 ms matmuls
# were charged on every call). A contender whose median is at least HELD_MIN_MS is therefore compared
# with calls of the judge's own spin kernel held that long (timing.time_held) instead of empty calls;
# below it the tails are flat. It is not the host asleep in the synchronize: polling the stream's
# end event first left 3 ms calls' tails as long (benchmarks/results/judge_h200.md).
HELD_MIN_MS = 0.1
HELD_MAX_MS = 10.0  # longer contenders are held this long (the tails had stopped growing by 3 ms)
HELD_BAND = 1.5  # held calls count for a contender only within this factor of its final median (or HELD_MAX_MS)
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


@dataclass
class Samples:
    """What one contender's rounds produced."""

    times_ms: list[float] = field(default_factory=list)  # per-call event (or host) times, to the timed stream's end event
    synced_ms: list[float] = field(default_factory=list)  # the same calls to the end event after the device-wide sync (empty: not timed so)
    wall_ms: float = 0.0  # judge-side wall clock over the counted batches
    wall_calls: int = 0  # calls inside wall_ms
    event_ms: float = 0.0  # sum of the device-wide event times (else the reported ones) of the calls inside wall_ms
    batches: list[tuple[float, float, int]] = field(default_factory=list)  # (wall ms, event ms, calls) per batch
    host_ms: dict[str, float] = field(default_factory=dict)  # the child's own clock per part, summed over the counted batches (log only)

    def wall_per_call(self) -> float | None:
        return self.wall_ms / self.wall_calls if self.wall_calls else None

    def event_per_call(self) -> float | None:
        return self.event_ms / self.wall_calls if self.wall_calls else None

    def add_batch(self, wall_ms: float, times_ms: list[float], calls: int | None = None, synced_ms: list[float] | None = None,
                  host_ms: dict[str, float] | None = None) -> None:
        """One batch: the wall clock counts the calls the judge asked for, not the length of the
        list the child sent back. host_ms: the child's clock per part (judge.timing.time_calls),
        kept for the log only."""
        n = len(times_ms) if calls is None else calls
        for k, v in (host_ms or {}).items():
            self.host_ms[k] = self.host_ms.get(k, 0.0) + v
        self.times_ms.extend(times_ms)
        self.synced_ms.extend(synced_ms or [])
        # the wall clock holds the synchronize, so it is compared with the device-wide times
        event = sum(synced_ms) if synced_ms else sum(times_ms)
        self.wall_ms += wall_ms
        self.wall_calls += n
        self.event_ms += event
        if n:
            self.batches.append((wall_ms, event, n))

    def batch_medians(self) -> tuple[float, float, float] | None:
        """Lower medians over batches of (wall per call, reported per call, wall minus reported
        per call): one slow batch (a page fault, a scheduler hiccup, a one-off stall) does not move
        them, a timer that under-reports every call does. The lower median, because with two
        batches (a short timing phase) the median is their mean, which one stall moves."""
        rows = [(w / n, e / n) for w, e, n in self.batches if n]
        if not rows:
            return None
        low = statistics.median_low
        return low(w for w, _ in rows), low(e for _, e in rows), low(w - e for w, e in rows)


@dataclass
class TimingOutcome:
    """Everything the verdict needs from the timing phase."""

    samples: dict[str, Samples]  # by contender: candidate, eager, compile
    stop_reason: str  # why the rounds stopped
    recheck_failure: str  # empty when every re-checked timed output matched
    rechecked: int  # timed outputs compared with the reference
    compile_s: float | None  # torch.compile warm-up time of the baseline (not a verdict field)
    null_ms: dict[str, list[float]] = field(default_factory=dict)  # empty-call times by child (reference, candidate)
    null_synced_ms: dict[str, list[float]] = field(default_factory=dict)  # the same calls to the device-wide end event
    null_wall: dict[str, Samples] = field(default_factory=dict)  # the empty calls' batches by child: judge-side wall clock (log only)
    # calls of the judge's spin kernel held as long as a contender's median, by "child:contender"
    # (candidate:candidate, reference:candidate, reference:eager, reference:compile): (stream times, device-wide times)
    held: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    # the candidate's time as priced (before the harness overhead's subtraction) plus the tail base
    # step device_sync used, set by the judge once the numbers are made (guards.wall_clock.wall_clock_check reads it)
    priced_ms: float | None = None
    priced_base_ms: float = 0.0  # what priced_ms added to the candidate's runtime: its harness overhead and tail base
    held_used: dict[str, float] = field(default_factory=dict)  # contenders whose tail base came from held calls, by length (ms)
    lead_us: float = 0.0  # the lead spin every contender's calls were timed behind (lead.lead_for)

    def overheads(self, cap: float | None = None) -> dict[str, float] | None:
        """What step harness_overhead subtracts from each contender's times: the median empty
        call of the child that timed it, never more than `cap` (the reference child's empty call
        timed before any candidate code ran). The candidate's is capped at the reference child's
        too: the empty calls in its own process run beside candidate code, which could slow them
        and so buy itself a larger subtraction; and candidate code in another process (a native
        thread loading the GPU) could slow the reference child's, which the cap bounds. None when
        no empty calls ran."""
        ref, cand = self.null_ms.get("reference"), self.null_ms.get("candidate")
        alone = bool(self.samples) and "candidate" not in self.samples  # the baselines timed alone (judge.baseline)
        if not ref or (not cand and not alone):
            return None
        o_ref = statistics.median(ref)
        if cap is not None:
            o_ref = min(o_ref, cap)
        if alone:
            return {"eager": o_ref, "compile": o_ref}
        return {"candidate": min(o_ref, statistics.median(cand)), "eager": o_ref, "compile": o_ref}

    def tail_bases(self, cap: float | None = None, held_cap: dict[str, float] | None = None) -> dict[str, float]:
        """The host's round trip through the synchronize with nothing left running: per child, the
        median over its empty calls of (device-wide end - stream end). The candidate child's is
        capped at the reference child's (and at `cap`, the reference child's before any candidate
        code ran) plus TAIL_BASE_SLACK_MS, for the reason overheads() caps: candidate code could
        slow its own empty calls (a thread that loads a side stream while it sees them run) to
        widen what passes uncharged; the slack is what that can buy at most. Without slack, the
        per-process spread of honest tails would charge honest candidates. Zero for a child whose empty calls
        were not timed so: then every call's device-wide end counts (the protocol as DESIGN.md
        states it)."""
        self.held_used = {}
        tails = {role: _tail(self.null_ms.get(role) or [], self.null_synced_ms.get(role) or []) or 0.0 for role in ("reference", "candidate")}
        bound = [tails["reference"] + TAIL_BASE_SLACK_MS] + ([cap + TAIL_BASE_SLACK_MS] if cap is not None else [])
        cand = min([tails["candidate"], *bound]) if tails["reference"] > 0 else 0.0
        out = {"candidate": cand, "eager": tails["reference"], "compile": tails["reference"]}
        if tails["reference"] <= 0:
            return out
        held = {k: self._held_tail(k) for k in self.held}
        for c in ("eager", "compile"):
            if held.get(f"reference:{c}") is not None:
                out[c] = held[f"reference:{c}"]
                self.held_used[c] = self.held_target(c) or 0.0
        own, ref = held.get("candidate:candidate"), held.get("reference:candidate")
        length = self.held_target("candidate")
        ceiling = _held_ceiling(held_cap or {}, length) if length is not None else None
        if own is not None and ref is not None and ceiling is not None:
            # the same caps as the empty calls': the reference child's calls held as long, and what
            # the reference child's held calls gave before any candidate code ran (candidate code in
            # another process could slow the reference child's wake-ups during the rounds)
            out["candidate"] = min(own, ref + TAIL_BASE_SLACK_MS, ceiling)
            self.held_used["candidate"] = length
        return out

    def held_target(self, contender: str) -> float | None:
        """The length held calls should have for a contender: its final median, at most
        HELD_MAX_MS; None under HELD_MIN_MS or without times."""
        s = self.samples.get(contender)
        if s is None or not s.times_ms:
            return None
        med = statistics.median(s.times_ms)
        return None if med < HELD_MIN_MS else min(med, HELD_MAX_MS)

    def _held_tail(self, key: str) -> float | None:
        """Median tail of the held calls under key whose length is within HELD_BAND of the
        contender's final target (a held call timed when the running median was elsewhere does
        not count); None when none is."""
        target = self.held_target(key.split(":", 1)[1])
        stream, synced = self.held[key]
        if target is None or len(stream) != len(synced):
            return None
        kept = [(t, d) for t, d in zip(stream, synced) if target / HELD_BAND <= t <= target * HELD_BAND]
        return statistics.median(d - t for t, d in kept) if kept else None

    def held_lengths(self) -> dict[str, float]:
        """{contender: milliseconds} of the held calls the last tail_bases used (the others' bases
        came from empty calls)."""
        return dict(self.held_used)

    def charged(self, name: str, base: float) -> tuple[list[float], int, float]:
        """(per-call times, calls charged, margin) of one contender under step device_sync.
        A call's time is its stream end event's, unless its device-wide end event came more than
        the margin later than the empty call's would (base): then work went on past the timed
        stream's end (a side stream, a copy, a native thread's launch) and the call is charged
        what came later than that: its device-wide time less the base and the margin. The charge
        grows from zero with the lateness, so an honest call whose host woke a little past the
        margin costs that little (charging the whole time past the base made each such call jump
        by the margin). Every late call keeps its first margin uncharged, however late it is. Step
        amortized_time prices a candidate whose time sits in a minority of calls at their mean."""
        s = self.samples.get(name)
        if s is None or not s.times_ms:
            return [], 0, 0.0
        if len(s.synced_ms) != len(s.times_ms):
            return list(s.times_ms), 0, 0.0
        margin = tail_margin(statistics.median(s.times_ms))
        out, n = [], 0
        for t, d in zip(s.times_ms, s.synced_ms):
            late = d - t - base - margin
            if late > 0:
                out.append(t + late)
                n += 1
            else:
                out.append(t)
        return out, n, margin


def samples_record(outcome: TimingOutcome, meta: dict[str, Any]) -> dict[str, Any]:
    """Every per-call time the timing phase produced, as plain lists: what step device_sync,
    harness_overhead and amortized_time decided on, so a reader (benchmarks/charge_replay.py) can
    recompute the price under another rule without a GPU. The judge logs it at debug level, with
    the candidate's and the problem's hash added (candidate_hash, problem_hash): whose verdict it is
    in a service's log."""
    return {
        "contenders": {c: {"times_ms": list(s.times_ms), "synced_ms": list(s.synced_ms)} for c, s in outcome.samples.items()},
        "null_ms": {k: list(v) for k, v in outcome.null_ms.items()},
        "null_synced_ms": {k: list(v) for k, v in outcome.null_synced_ms.items()},
        "held": {k: {"times_ms": list(t), "synced_ms": list(d)} for k, (t, d) in outcome.held.items()},
        "null_tail_before_ms": meta.get("null_tail_before_ms"),
        "held_tail_before_ms": meta.get("held_tail_before_ms"),
        "null_before_ms": meta.get("null_before_ms"),
    }


def _held_ceiling(before: dict[str, float], length_ms: float) -> float | None:
    """The most the reference child's held tail may count for a call of length_ms: the largest
    tail its held calls had at setup, before any candidate code ran, over the lengths up to the
    first one at least length_ms, plus TAIL_BASE_SLACK_MS; None without setup figures."""
    rows = sorted((float(k), v) for k, v in before.items())
    if not rows:
        return None
    up = next((ms for ms, _ in rows if ms >= length_ms), rows[-1][0])
    return max(v for ms, v in rows if ms <= up) + TAIL_BASE_SLACK_MS


def _tail(stream: list[float], synced: list[float]) -> float | None:
    """Median of (device-wide end - stream end) over calls timed both ways, else None."""
    if not stream or len(stream) != len(synced):
        return None
    return statistics.median(d - t for t, d in zip(stream, synced))


def tail_margin(stream_median_ms: float) -> float:
    """How much later than the empty call's a call's device-wide end may come uncharged."""
    return min(TAIL_MARGIN_MAX_MS, max(TAIL_MARGIN_MIN_MS, TAIL_MARGIN_SHARE * stream_median_ms))


# The guard of step device_sync (the flag, not the charge) fires when the candidate's median call came
# later than the margin and than this share of the call (the margin's own share, without its cap). The
# host's wake-up after a long synchronize differs by process (a call held 1-3 ms: median tail 17-84 us
# on the H200), so an honest 3.2 ms matmul or 0.27 ms softmax can come 10-70 us late, past the 10 us
# margin alone, and fired the guard in some GPU runs (docs/judge.md, docs/zoo.md); side work of a tenth
# of the call or more still fires it (the zoo's side streams hide 2 ms). What fires no flag is still
# charged: every call pays its lateness beyond the margin (TimingOutcome.charged).
GUARD_LATE_SHARE = 0.1


def late_threshold(stream_median_ms: float) -> float:
    """How late (beyond its base) the candidate's median call may come before step device_sync's
    guard fires: the margin, or GUARD_LATE_SHARE of the call if that is more."""
    return max(tail_margin(stream_median_ms), GUARD_LATE_SHARE * stream_median_ms)


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


def host_breakdown(s: Samples | None) -> str:
    """Where a contender's judge-side wall clock went per call, as its child's clock says:
    '0.41 inputs, 0.02 flush, 0.30 call, 0.00 output, 0.05 outside the loop (ms/call)'."""
    if s is None or not s.wall_calls or not s.host_ms:
        return ""
    n, b = s.wall_calls, max(1, len(s.batches))
    once = {k: s.host_ms[k] for k in ("flush_first", "flush_max") if k in s.host_ms}
    drain = s.host_ms.get("drain")
    per_call = {k: v for k, v in s.host_ms.items() if k not in once and k != "drain"}
    parts = [f"{v / n:.3g} {k}" for k, v in per_call.items()]
    rest = (s.wall_ms - sum(per_call.values()) - (drain or 0.0)) / n
    text = ", ".join(parts + [f"{rest:.3g} outside the loop (channel, flags check)"]) + " ms/call"
    if once:
        text += " (flush per batch: " + ", ".join(f"{k.split('_')[1]} call {v / b:.3g}" for k, v in once.items()) + " ms on average)"
    if drain is not None:
        text += f" (the synchronize ending each batch: {drain / b:.3g} ms on average)"
    return text


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
        result = got["result"]
        self.rechecked += 1
        return "" if result["ok"] else f"timed call {self.rechecked}: {result['message']}"


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
        with cand.paused(cuda) if cand is not None else contextlib.nullcontext():
            ref_setup = ref.call("setup_timing", setup, timeout_s=policy.build_timeout_s)
        compile_s = ref_setup["compile_s"]
        r.per_call_ms.update(ref_setup.get("per_call_ms", {}))
        r.switches["lead_us"] = lead_for(lead_us, ref_setup.get("launch_ms"))  # every timed call's, and the candidate's rehearsal
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
                         lead_us=r.switches["lead_us"])


def _recheck(r: _Rounds, n: int) -> str:
    """Re-check n timed candidate outputs; the first failure's message, or empty."""
    for _ in range(n):
        failure = r.recheck_one()
        if failure:
            return failure
    return ""


def _warmup(policy: Policy) -> float:
    return policy.timing.warmup_ms if policy.enabled("warmup") else 0.0
