"""The timing phase of one evaluation: the timed window (measure.run_timing) in the reference and
candidate children, a window timed again when step device_sync's charge moved its price too far, the
profiled call and the timing guards (judge.phases_pricing turns the window into the verdict's numbers)."""

from __future__ import annotations

import statistics
import secrets
from typing import Any

from kernelwright.judge import memory
from kernelwright.judge.guards import kernel_provenance, physics_floor, wall_clock
from kernelwright.judge.context import Context
from kernelwright.judge.measure import (NULL_CALLS, RETIME_CHARGE_SHARE, RETIMES, BetweenCalls, FlagsMoved, IdentitiesMoved, moved_names,
                                        run_timing)
from kernelwright.judge.phases import op_audit
from kernelwright.judge.phases_pricing import fill_numbers, log_samples
from kernelwright.judge.pricing import MIN_MS, speedups
from kernelwright.core.records import Status, Timing
from kernelwright.judge.verdicts import Stop
from kernelwright.judge.workers import Child, ChildError


def cached_baselines(flow: Context) -> dict[str, Any] | None:
    """The store's baseline record for this problem on this machine, precision, compile mode and
    timing protocol (judge.baseline), or None: then the baselines are measured now, and step interleave says why."""
    from kernelwright.judge import baseline

    rec = baseline.lookup(flow.baseline_store, flow.problem.hash, flow.meta, flow.device, flow.policy, flow.vb.size or "full")
    if rec is None or rec.get("eager_ms") is None or (flow.policy.compile_baseline and rec.get("compile_ms") is None):
        flow.cache_note = ("; no cached baselines for this problem, machine, precision, compile mode, timing protocol and size, "
                           "so they were measured now")
        return None
    rec_lead = (rec.get("detail") or {}).get("lead_us")
    if flow.device == "cuda" and (not isinstance(rec_lead, (int, float)) or (rec_lead > 0) != (flow.lead_us()[0] > 0)):
        # timed without the lead spin (it did not load then) while this verdict has one, or the other way round
        flow.cache_note = (f"; the cached baselines were timed {'behind' if rec_lead else 'without'} a lead spin and this verdict "
                           f"{'has one' if flow.lead_us()[0] > 0 else 'has none'}, so they were measured now")
        return None
    bad = baseline.well_formed(rec, flow.device, flow.policy.compile_baseline, flow.lead_us()[0])
    if bad:
        flow.cache_note = f"; the cached baseline record was not used ({bad}), so they were measured now"
        return None
    if not flow.policy.compile_baseline:
        rec = {**rec, "compile_ms": None}
    flow.cache_note = ""
    return rec


def _fresh_note(flow: Context) -> str:
    """Step fresh_inputs' note: the pool timing_phase gives the rounds (judge.memory.pool_slots)."""
    sets = memory.pool_slots_for(flow.meta, True)
    return (f"new get_inputs() values before every call, in a pool of {sets} input set{'s' if sets != 1 else ''} whose tensors "
            "keep their identity (judge.memory.pool_slots)")


def _record_timing_steps(flow: Context, cached: dict[str, Any] | None = None) -> None:
    vb, cuda = flow.vb, flow.device == "cuda"
    cpu = "CPU backend: not applicable (no L2 flush, events or streams; CPU times are never claims)"
    notes = {
        "l2_flush": "buffer of 2x the device's L2 read before every timed call (clean lines, no write-backs left for the call)",
        "cuda_events": "CUDA events around every call" + flow.lead_us()[1],
        "device_sync": "device-wide synchronize before the end event",
    }
    for name, note in notes.items():
        if vb.off_or(name, "" if cuda else cpu):
            vb.step(name, True, note)
    if vb.off_or("fresh_inputs"):
        vb.step("fresh_inputs", True, _fresh_note(flow))
    if vb.off_or("warmup"):
        vb.step("warmup", True, f"{flow.policy.timing.warmup_ms:g} ms per contender, at least 3 calls")
    if vb.off_or("interleave"):
        allowance = {"fp32": "", "tf32": "; baselines timed with TF32 allowed, as the policy allows the candidate",
                     "bf16": "; baselines timed under autocast to bf16, as the policy allows the candidate",
                     "fp16": "; baselines timed under autocast to fp16, as the policy allows the candidate"}[flow.policy.precision]
        if cached is not None:
            vb.step("interleave", True, f"baselines from the store (kernelwright baseline, {cached.get('created_at') or cached.get('stored_at')}, "
                    f"{cached.get('machine', {}).get('gpu')}, {cached['compile_mode']} compile): not timed in this run, so not "
                    "interleaved with the candidate" + allowance)
        else:
            vb.step("interleave", True, "contenders alternate in rounds, the first one rotating" + allowance + flow.cache_note)


def timing_phase(flow: Context, ref: Child, cand: Child) -> None:
    """Time the candidate and the baselines; apply the timing guards; fill the numbers. A window
    whose price step device_sync's charge moved too far (_charge_share) is timed again in a fresh
    candidate child."""
    policy, vb = flow.policy, flow.vb
    cached = cached_baselines(flow) if policy.baselines == "cached" else None
    _record_timing_steps(flow, cached)
    baselines = policy.baselines == "measured" or (policy.baselines == "cached" and cached is None)
    flow.say("timing " + ("candidate, eager" + (" and torch.compile" if policy.compile_baseline else "") if baselines else "the candidate"))
    # cached baselines were timed behind their own lead (lead.lead_for): the candidate gets the same
    lead = float(cached["detail"]["lead_us"]) if cached is not None and flow.lead_us()[0] > 0 else flow.lead_us()[0]
    outcome = _timed_window(flow, ref, cand, baselines, lead)
    floor: float | None = None  # the lowest median stream time of a window not priced
    for _ in range(RETIMES):
        share = _charge_share(flow, outcome)
        if share is None:
            break
        flow.retimed.append(share)
        vb.workers["retimed"] = len(flow.retimed)
        first = statistics.median(outcome.samples["candidate"].times_ms)
        floor = first if floor is None else min(floor, first)
        log_samples(flow, outcome, superseded=True)
        flow.say(f"step device_sync's charge for late device-wide ends moved the candidate's median by {share * 100:.2g} % (more "
                 f"than {RETIME_CHARGE_SHARE * 100:g} %): timing again in a fresh candidate child (this window is not priced)")
        cand = flow.fresh_candidate(cand)
        _record_timing_steps(flow, cached)  # the lead spin's note is the new child's
        op_audit(flow, ref, cand, retimed=True)
        outcome = _timed_window(flow, ref, cand, baselines, lead)
    if vb.off_or("timed_recheck"):
        vb.step("timed_recheck", True, f"{outcome.rechecked} timed outputs compared with the reference")
    if not policy.enabled("fresh_inputs"):
        vb.off_or("between_calls", "fresh_inputs is off: no seed was asked for, so there was no window to watch")
    elif vb.off_or("between_calls"):
        vb.step("between_calls", True, BETWEEN_CALLS_STEP)
        threads = ("no Python thread or child process alive" if not policy.allow_torch_compute
                   else "Python threads and child processes not refused (the policy allows torch compute)")
        vb.guard("between_calls", False, f"no hook of the candidate's set and nothing the draw reads changed; {threads}")
    if vb.off_or("adaptive_stop"):
        vb.step("adaptive_stop", True, outcome.stop_reason)
    fill_numbers(flow, outcome)
    if cached is not None:
        vb.numbers.update(speedups(vb.numbers.get("runtime_ms"), cached.get("eager_ms"), cached.get("compile_ms")))
        vb.numbers["baseline_source"] = "cached"
    if floor is not None:
        _floor_from_first_window(flow, floor)
    flow.say(f"timed {len(outcome.samples['candidate'].times_ms)} candidate calls ({outcome.stop_reason}); profiling one call")
    _profile(flow, cand)
    flow.say("profiled; applying the timing guards")
    wall_clock.apply(flow, outcome)
    physics_floor.apply(flow)


def _floor_from_first_window(flow: Context, stream_ms: float) -> None:
    """After a window timed again: the candidate is priced at no less than the window not priced
    gave its calls as timed on their own stream, uncharged (less this window's harness overhead).
    Candidate code sees its own times and can raise its own tails at will, so it could force the
    second window only when the first went badly; the floor leaves that choice worth at most the
    first window's charge, which is what the second window is there to take off."""
    vb = flow.vb
    runtime = vb.numbers.get("runtime_ms")
    least = max(MIN_MS, stream_ms - (vb.timing.overhead_ms or 0.0))
    if runtime is None or runtime >= least:
        return
    vb.numbers.update(speedups(least, vb.numbers.get("eager_ms"), vb.numbers.get("compile_ms")))
    step = vb.steps.get("device_sync")
    if step is not None:
        vb.step("device_sync", step.ran, f"{step.reason}; priced at the window not priced's median stream time, {least:.4g} ms "
                                         f"(less the harness overhead), not this window's {runtime:.4g} ms")


BETWEEN_CALLS_STEP = ("each timed call's seed asked for at its turn, after the last output and the slot's old storages were let go; "
                      "before it, the collector off, hooks of the candidate's (trace, profile, sys.monitoring, signal handlers) "
                      "switched off, what the draw reads compared with its state before the import, and Python threads, "
                      "child processes and descriptor 0 looked at")


def _timed_window(flow: Context, ref: Child, cand: Child, baselines: bool, lead_us: float) -> Any:
    """One run of the timing protocol (measure.run_timing) in these children, behind a lead spin of
    at least `lead_us`; a guard that fires in it, or a timed output that is wrong, ends the evaluation."""
    policy, vb = flow.policy, flow.vb
    try:
        null_calls = NULL_CALLS if flow.device == "cuda" and policy.enabled("harness_overhead") else 0
        outcome = run_timing(policy, ref, cand, flow.workdir, baselines=baselines, lead_us=lead_us, say=flow.say,
                             poison_bytes=flow.meta.get("output_bytes", []), null_calls=null_calls, cuda=flow.device == "cuda",
                             held=(flow.device == "cuda" and flow.meta.get("lead_ok") is True, flow.cand_meta.get("lead_ok") is True),
                             pool_size=memory.pool_slots_for(flow.meta, policy.enabled("fresh_inputs")))
    except ChildError as exc:
        raise flow.child_stop(exc, "timing") from None
    except FlagsMoved as exc:
        vb.guard("numerics_flags", True, str(exc))
        raise Stop(Status.REJECTED, f"the candidate changed numerics flags {exc}") from None
    except IdentitiesMoved as exc:
        vb.guard("function_identities", True, str(exc))
        raise Stop(Status.REJECTED, f"the candidate replaced {exc}") from None
    except BetweenCalls as exc:
        vb.step("between_calls", True, BETWEEN_CALLS_STEP)
        vb.guard("between_calls", True, f"when a timed call's seed was about to come: {exc}")
        raise Stop(Status.REJECTED, f"between timed calls, where the next call's inputs are drawn: {exc}") from None
    if outcome.recheck_failure:
        if vb.off_or("timed_recheck"):
            vb.step("timed_recheck", True, f"{outcome.rechecked} timed outputs compared with the reference")
        drift = outcome.recheck_guard == "precision"  # within tolerance, but further than fp32 gets (guards.precision.drifted)
        vb.guard("precision" if drift else "timed_recheck", True, outcome.recheck_failure[:300])
        raise Stop(Status.REJECTED if drift else Status.INCORRECT, outcome.recheck_failure)
    if outcome.lead_us > flow.lead_us()[0] and vb.off_or("cuda_events"):  # the reference's calls take longer to queue (lead.lead_for)
        vb.step("cuda_events", True, f"CUDA events around every call, the start event queued behind a {outcome.lead_us:.0f} us spin on "
                f"{flow.meta.get('lead')} (the policy's {flow.lead_us()[0]:g} us, lengthened to the baselines' launch time): host launch latency is not timed")
    return outcome


def _charge_share(flow: Context, outcome: Any) -> float | None:
    """How far step device_sync's charge (samples.TimingOutcome.charged) moved the candidate's
    median in this window, as a share of its price without the charge (the median stream time less
    the harness overhead, as phases_pricing._runtime prices it; the amortized_time path is not read), when that is more than
    measure.RETIME_CHARGE_SHARE; None otherwise, and on the CPU backend, with step device_sync off
    or without empty calls timed the device-wide way in both children (then every call's
    device-wide time counts, and there is no charge to read)."""
    if flow.device != "cuda" or not flow.policy.enabled("device_sync"):
        return None
    s = outcome.samples.get("candidate")
    if s is None or not s.times_ms or len(s.synced_ms) != len(s.times_ms) or not all(
            outcome.null_synced_ms.get(k) for k in ("reference", "candidate")):
        return None
    bases = outcome.tail_bases(flow.meta.get("null_tail_before_ms"), flow.meta.get("held_tail_before_ms"))
    charged, _, _ = outcome.charged("candidate", bases["candidate"])
    found = outcome.overheads(flow.meta.get("null_before_ms")) if flow.policy.enabled("harness_overhead") else None
    price = max(MIN_MS, statistics.median(s.times_ms) - (found or {}).get("candidate", 0.0))  # as phases_pricing._runtime prices it, uncharged
    share = (statistics.median(charged) - statistics.median(s.times_ms)) / price
    return share if share > RETIME_CHARGE_SHARE else None


def _profile(flow: Context, cand: Child) -> None:
    """One profiled call (GPU): the profiler's kernel-time sum (step profiler_check, reported) and
    the GPU time by origin (step kernel_provenance, a guard)."""
    vb = flow.vb
    cpu = "" if flow.device == "cuda" else "CPU backend: the CUDA profiler does not apply"
    check, origins = vb.off_or("profiler_check", cpu), vb.off_or("kernel_provenance", cpu)
    if not (check or origins):
        return
    try:
        res = cand.call("profile", {"input_seed": secrets.randbelow(2**31 - 1) + 1}, timeout_s=flow.policy.run_timeout_s)
    except ChildError as exc:
        raise flow.child_stop(exc, "profiling") from None
    if res.get("identities_moved"):
        moved = moved_names(res["identities_moved"])
        vb.guard("function_identities", True, f"profiled call: {moved}")
        raise Stop(Status.REJECTED, f"the candidate replaced {moved}")
    if check:
        prof = res["profiler_ms"]
        vb.timing = Timing(**{**vb.timing.__dict__, "profiler_ms": prof})
        top = ", ".join(f"{k} {ms:.4g} ms" for k, ms in res["kernels"][:5])
        vb.step("profiler_check", True, f"kernel time sum {prof:.4g} ms vs event median {vb.timing.median_ms:.4g} ms; top: {top}")
    if origins:
        kernel_provenance.apply(flow, res.get("activities") or [])
