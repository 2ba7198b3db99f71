"""What one timing phase produced and how step device_sync prices it: each contender's samples
(TimingOutcome, Samples), the tail bases its empty and held calls give, the charge for late
device-wide ends and the margin and threshold it uses. The rounds that produce them are judge.measure's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

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
    recheck_guard: str = ""  # the guard whose finding recheck_failure is: timed_recheck, or precision (guards.precision.drifted)

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
