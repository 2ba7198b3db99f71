"""Pricing one timed window: each contender's time from its calls (step device_sync's charge, the
harness overhead, step amortized_time), the speedups and the verdict's timing record
(judge.phases_timing runs the window; judge.pricing holds the arithmetic the baseline cache shares)."""

from __future__ import annotations

import json
import logging
import statistics
from typing import Any

from kernelwright.judge import pricing, stats
from kernelwright.judge.context import Context
from kernelwright.judge.measure import RETIME_CHARGE_SHARE
from kernelwright.judge.samples import GUARD_LATE_SHARE, late_threshold, samples_record
from kernelwright.judge.pricing import MIN_MS, speedups
from kernelwright.core.records import Timing

log = logging.getLogger(__name__)
SAMPLES_PREFIX = "timing samples "  # the debug line that carries samples.samples_record as JSON


def log_samples(flow: Context, outcome: Any, superseded: bool = False) -> None:
    """The window's per-call record at debug level (samples.samples_record); a window timed again
    is marked superseded, so a reader prices only the last."""
    if log.isEnabledFor(logging.DEBUG):
        vb = flow.vb
        log.debug(SAMPLES_PREFIX + json.dumps({**samples_record(outcome, flow.meta), "candidate_hash": vb.candidate.get("hash"),
                                               "problem_hash": vb.problem.hash, **({"superseded": True} if superseded else {})}))


def _runtime(flow: Context, times: dict[str, list[float]], name: str, notes: list[str], overhead: float,
             synced: tuple[dict[str, list[float]], dict[str, float]] = ({}, {})) -> float | None:
    """A contender's time: the median of its calls, less the harness overhead. Step amortized_time
    prices the candidate at its trimmed mean instead where that mean shows the time sitting in a
    minority of calls (GPU only; on the CPU backend the host's noise moves means, so there the
    note only advises). Baselines keep their median and get a note: pricing them at a mean would
    let a stall during eager's calls, or a candidate that causes one, inflate the candidate's
    speedup. The test for a minority looks at the calls as timed, before the subtraction; where each
    call has a device-wide time (step device_sync), at those (synced[0]), and a trimmed mean of them
    is priced less the empty call's tail (synced[1]): the host's late wake-ups sit in every
    device-wide time alike, but in the charged times only in the few calls a charge picked out."""
    calls = times.get(name)
    if not calls:
        return None
    whole, base = synced[0].get(name) or calls, synced[1].get(name, 0.0) if synced[0].get(name) else 0.0
    whole_med, trimmed, concentrated = stats.amortized(whole)
    if not concentrated:
        return pricing.median_price(calls, overhead)
    applies = name == "candidate" and flow.device == "cuda" and flow.policy.enabled("amortized_time")
    notes.append(f"{name}: trimmed mean {trimmed:.4g} ms over {len(calls)} calls is more than {stats.AMORTIZED_SLACK:g}x the "
                 f"median {whole_med:.4g} ms" + ("; the trimmed mean is its time" if applies else "; the median kept"))
    return max(MIN_MS, trimmed - base - overhead) if applies else pricing.median_price(calls, overhead)


def _overheads(flow: Context, outcome: Any, times: dict[str, list[float]]) -> dict[str, float]:
    """Record step harness_overhead; what to subtract from each contender (zeros when off)."""
    vb = flow.vb
    cap = flow.meta.get("null_before_ms")
    found = outcome.overheads(cap)
    if vb.off_or("harness_overhead", "" if flow.device == "cuda" else "CPU backend: not applicable (host-clock times are never claims)"):
        if found is None:
            vb.step("harness_overhead", False, "no empty calls were timed")
        else:
            ref, cand = (statistics.median(outcome.null_ms[k]) for k in ("reference", "candidate"))
            n = len(outcome.null_ms["reference"])
            baselines = [c for c in ("eager", "compile") if times.get(c)]
            whom = f"{found['eager']:.4g} ms from the baselines, " if baselines else ""
            before = f", {cap:.4g} ms in the reference child before any candidate code ran (the cap)" if cap is not None else ""
            under = [f"; {c}'s median {statistics.median(times[c]):.4g} ms is not above it: its time is taken as {MIN_MS:g} ms"
                     for c in ("candidate", *baselines) if statistics.median(times[c]) <= found[c]]
            vb.step("harness_overhead", True,
                    f"the protocol around an empty call, {n} times in each child, interleaved with the rounds: median "
                    f"{ref:.4g} ms in the reference child, {cand:.4g} ms in the candidate's{before}; subtracted: "
                    f"{whom}{found['candidate']:.4g} ms from the candidate (never more than the reference child's)" + "".join(under))
            return found
    return {"candidate": 0.0, "eager": 0.0, "compile": 0.0}


def _device_sync(flow: Context, outcome: Any) -> tuple[dict[str, list[float]], tuple[dict[str, list[float]], dict[str, float]]]:
    """(per-call times, (device-wide times, the empty call's tail)) of each contender under step
    device_sync (TimingOutcome.charged), and the step's record: how many calls were charged the
    lateness of their device-wide end beyond the margin. The guard fires when the candidate's median
    call was late by more than samples.late_threshold (the margin, or a tenth of the call if more):
    its work went on past its own stream. It looks at the lateness, not at how far the charge moved the
    median, which leaves the margin out: a guard on the charge would need twice the margin to fire. The
    share keeps the host's per-process wake-up after a long call from firing it on an honest candidate;
    the charge does not depend on it. The second pair is empty without device-wide times."""
    vb = flow.vb
    names = [c for c in ("candidate", "eager", "compile") if outcome.samples.get(c) is not None and outcome.samples[c].times_ms]
    plain = {c: list(outcome.samples[c].times_ms) for c in names}
    if "candidate" not in names or flow.device != "cuda" or not flow.policy.enabled("device_sync") or not any(
            outcome.samples[c].synced_ms for c in names):
        return plain, ({}, {})
    if not outcome.null_synced_ms.get("reference") or not outcome.null_synced_ms.get("candidate"):
        said = ("device-wide synchronize before the end event; no empty calls were timed (step harness_overhead), so the host's "
                "own round trip cannot be told apart: every call's device-wide time counts")
        vb.step("device_sync", True, said)
        vb.guard("device_sync", False, said)
        synced = {c: list(outcome.samples[c].synced_ms) or plain[c] for c in names}
        return synced, (synced, {})
    bases = outcome.tail_bases(flow.meta.get("null_tail_before_ms"), flow.meta.get("held_tail_before_ms"))
    out, parts, device = {}, [], {}
    for c in names:
        if len(outcome.samples[c].synced_ms) == len(outcome.samples[c].times_ms):
            device[c] = list(outcome.samples[c].synced_ms)
        charged, n, margin = outcome.charged(c, bases[c])
        out[c] = pricing.charged_times(c, charged, plain[c])
        parts.append(f"{c} {n} of {len(out[c])} (margin {margin * 1e3:.3g} us)" if c == "candidate" else
                     f"{c} {n} of {len(out[c])} late, not charged")
    moved = statistics.median(out["candidate"]) - statistics.median(plain["candidate"])
    late = [d - t - bases["candidate"] for t, d in zip(plain["candidate"], device.get("candidate", []))]
    threshold = late_threshold(statistics.median(plain["candidate"]))
    fired = bool(late) and statistics.median(late) > threshold
    held = outcome.held_lengths()
    basis = ", ".join(f"{c} {bases[c] * 1e3:.3g} us" for c in names)
    how = ("; from calls of the judge's spin kernel held as long as the contender's median for " + ", ".join(
        f"{c} ({ms:.3g} ms)" for c, ms in held.items()) + ", from empty calls for the rest" if held else "; from empty calls")
    if flow.meta.get("held_before_error"):
        how += f"; the reference child's held calls at setup failed ({flow.meta['held_before_error']}), so the candidate's are not used"
    detail = ("device-wide synchronize before the end event; each call also has an end event on its own stream; that time "
              "counts, plus the candidate's lateness of the device-wide end beyond the margin, measured against the judge's "
              f"own call of the same length (that call's tail: {basis}{how}); baselines at their stream times (pricing "
              f"v{pricing.VERSION}); calls charged: " + ", ".join(parts)
              + (f"; the candidate's median call came {statistics.median(late) * 1e3:.3g} us late, more than the guard's "
                 f"{threshold * 1e3:.3g} us (the margin, or {GUARD_LATE_SHARE:g} of the call if more), and the "
                 f"charge moved its median by {moved:.4g} ms: its work went on past its own stream's end" if fired else ""))
    retimed = flow.retimed
    if retimed:
        detail += ("; this is the window timed in a fresh candidate child: in the one before, the charge moved the candidate's "
                   "median by " + ", ".join(f"{x * 100:.2g} %" for x in retimed)
                   + f" (more than {RETIME_CHARGE_SHARE * 100:g} %), and that window was not priced")
    vb.step("device_sync", True, detail)
    vb.guard("device_sync", fired, detail)
    return out, (device, bases)


def fill_numbers(flow: Context, outcome: Any) -> None:
    vb = flow.vb
    log_samples(flow, outcome)
    times, device = _device_sync(flow, outcome)
    cand = stats.summarize(times["candidate"])
    notes: list[str] = []
    overhead = _overheads(flow, outcome, times)
    runtime, eager, comp = (_runtime(flow, times, c, notes, overhead[c], device) for c in ("candidate", "eager", "compile"))
    vb.numbers.update(speedups(runtime, eager, comp))
    cuda = flow.device == "cuda"
    if vb.off_or("amortized_time"):
        said = "; ".join(notes) if notes else f"trimmed means within {stats.AMORTIZED_SLACK:g}x the medians: medians are the times"
        vb.step("amortized_time", True, said if cuda else f"{said} (advisory on the CPU backend)")
        concentrated = [n for n in notes if n.startswith("candidate:")]
        vb.guard("amortized_time", bool(concentrated) and cuda, concentrated[0] if concentrated else "")
    wall = outcome.samples["candidate"].wall_per_call()
    o = overhead["candidate"]
    if runtime is not None:  # what the wall clock holds the price against
        outcome.priced_base_ms = o + device[1].get("candidate", 0.0)
        outcome.priced_ms = runtime + outcome.priced_base_ms
    vb.timing = Timing(n=cand.n, median_ms=max(MIN_MS, cand.median_ms - o), iqr_ms=cand.iqr_ms, wall_ms=wall, profiler_ms=None,
                       overhead_ms=o if o else None, raw_median_ms=cand.median_ms)
