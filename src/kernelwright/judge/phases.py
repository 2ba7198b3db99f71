"""The correctness and timing phases of one evaluation (see judge.evaluate for the flow; judge.context for what they read of it)."""

from __future__ import annotations

import json
import logging
import math
import secrets
import statistics
import time
from typing import Any

from kernelwright.judge import memory, ops, stats
from kernelwright.judge.guards import kernel_provenance, physics_floor, precision, wall_clock
from kernelwright.judge.channel import close_fds
from kernelwright.judge.context import Context
from kernelwright.judge.measure import (NULL_CALLS, RETIME_CHARGE_SHARE, RETIMES, BetweenCalls, FlagsMoved, IdentitiesMoved, moved_names, run_timing, samples_record, GUARD_LATE_SHARE, late_threshold)
from kernelwright.judge.policy import NEAR_POSITIONS
from kernelwright.judge import pricing
from kernelwright.judge.pricing import MIN_MS, speedups
from kernelwright.core.records import Case, Status, Timing
from kernelwright.judge.verdicts import Stop
from kernelwright.judge.workers import Child, ChildError

log = logging.getLogger(__name__)
SAMPLES_PREFIX = "timing samples "  # the debug line that carries measure.samples_record as JSON


def _record_correctness_steps(flow: Context, cases: list[Case], skipped: list[int], near_blind: bool = False) -> None:
    vb = flow.vb
    if vb.off_or("seeds"):
        vb.step("seeds", True, f"{len(flow.seeds)} secret seeds")
    if vb.off_or("distributions"):
        kinds = sorted({c.kind for c in cases if c.kind not in ("native", "extra", "near")})
        dropped = sorted({cases[i].id for i in skipped})
        note = f"; skipped where the reference is not finite: {', '.join(dropped)}" if dropped else ""
        vb.step("distributions", True, f"get_inputs() plus {', '.join(kinds)}{note}")
    if vb.off_or("near_duplicate"):
        blind = ("; on this problem the changes do not move the reference past the tolerance, so a replayed answer "
                 "would pass this case" if near_blind else "")
        vb.step("near_duplicate", True, f"{NEAR_POSITIONS} elements per floating input changed in place after a first call on the same tensors{blind}")
    if vb.off_or("extra_shapes"):
        n = sum(c.kind == "extra" for c in cases)
        vb.step("extra_shapes", n > 0, f"{n} get_test_inputs() lists" if n else "the problem has no get_test_inputs()")
    how = flow.cand_meta.get("digest", "native")  # the candidate child's setup says how it digests (judge.digest)
    unchanged = "bitwise after every call" + (f"; the digest by {how}" if how not in ("native", "off") else "")
    for name, note in (("inputs_unchanged", unchanged), ("poison", "0xFF (NaN) fill of the allocator's free blocks before every call and every re-checked timed call"),
                       ("output_checks", "exact torch.Tensor, shape, dtype; non-finite values must match"),
                       ("numerics_flags", "TF32 and reduced-precision flags pinned and checked after every call"),
                       ("function_identities", "timing, checking and judge functions recorded before the import, checked after it and after every call")):
        if vb.off_or(name):
            vb.step(name, True, note)


def correctness_phase(flow: Context, ref: Child, cand: Child, cases: list[Case]) -> None:
    """Run every case in the candidate child and compare in the reference child."""
    policy, vb = flow.policy, flow.vb
    try:  # sent before the candidate's import (judge.evaluate)
        refs_reply = ref.wait("references", timeout_s=policy.build_timeout_s)
        skipped = refs_reply["skipped"]
    except ChildError as exc:
        raise Stop(Status.INFRA_ERROR, f"the reference child failed computing references: {exc}\n{exc.log_tail}") from None
    flow.say(f"checking correctness on {len(cases)} input sets")
    _record_correctness_steps(flow, cases, skipped, bool(refs_reply.get("near_blind")))
    worst = [0.0, 0.0]
    spent = [0.0, 0.0]  # seconds waiting for the candidate child's cases, for the reference child's comparisons
    parts: dict[str, float] = {}  # where the candidate child says its case time went (log only)
    t_phase = time.perf_counter()
    # On the CPU backend the candidate runs case i while the reference child compares case i - 1
    # (its output is a sealed memfd: nothing can change it). On CUDA the output is handed over as
    # an IPC handle to memory the candidate's process can still write, so the reference child
    # copies it before the candidate child is sent anything more. Either way the earliest failing
    # case decides the verdict, as if the cases ran one after another.
    pipelined = flow.device != "cuda"
    pending: tuple[int, Case] | None = None
    for i, case in enumerate(cases):
        if i in skipped:
            continue
        t0 = time.perf_counter()
        try:
            res = _run_case(flow, cand, i, case)
        except Stop:
            if pending is not None:
                _finish_compare(flow, ref, *pending, worst)
            raise
        fds = cand.received_fds()
        try:
            t1 = time.perf_counter()
            spent[0] += t1 - t0
            _add_parts(parts, res.get("parts_s"))
            if pending is not None:
                _finish_compare(flow, ref, *pending, worst)
                pending = None
            spent[1] += time.perf_counter() - t1
            _check_case_reply(flow, case, res)  # after case i - 1's verdict, so its guards come first
            t1 = time.perf_counter()
            with cand.paused(not pipelined):
                ref.send("compare", {"case_index": i, "handover": res.get("handover")}, fds=fds)
                if not pipelined:
                    _finish_compare(flow, ref, i, case, worst)
            spent[1] += time.perf_counter() - t1
        finally:
            close_fds(fds)
        if pipelined:
            pending = (i, case)
    if pending is not None:
        t1 = time.perf_counter()
        _finish_compare(flow, ref, *pending, worst)
        spent[1] += time.perf_counter() - t1
    said = ", ".join(f"{name} {sec:.2f} s" for name, sec in parts.items()) or "poison, the audited call, input checks, staging"
    flow.say(f"correctness cases done in {time.perf_counter() - t_phase:.2f} s: {spent[0]:.2f} s in the candidate child's calls "
             f"({said}, as the child reports), {spent[1]:.2f} s more waiting for comparisons")
    vb.numbers.update(max_abs_error=worst[0], max_rel_error=worst[1])
    precision.apply(flow, refs_reply.get("precision_skipped") or flow.oracle_note, refs_reply.get("precision_s"))
    _op_audit(flow, ref, cand)
    if policy.enabled("numerics_flags"):
        vb.guard("numerics_flags", False, "flags at their pinned values after every call")
    if policy.enabled("function_identities"):
        vb.guard("function_identities", False, "every watched function unchanged after the import and every call")


def _op_audit(flow: Context, ref: Child, cand: Child, retimed: bool = False) -> None:
    """One more forward, on fresh secret inputs, under the candidate child's dispatch mode; its output is
    compared like a correctness case, so a candidate cannot recognise the audit's inputs and answer from a cache."""
    vb, policy = flow.vb, flow.policy
    if not vb.off_or("op_audit"):
        return
    flow.say("auditing one forward on fresh inputs")
    case = Case("native", secrets.randbelow(2**31 - 1) + 1)
    try:
        res = cand.call("audit", {"case": case.to_dict()}, timeout_s=policy.run_timeout_s)
    except ChildError as exc:
        raise flow.child_stop(exc, "the op audit") from None
    fds = cand.received_fds()
    try:
        _check_case_reply(flow, case, {k: v for k, v in res.items() if k != "ops"})  # its operators are judged below
        with cand.paused(flow.device == "cuda"):
            cmp = ref.call("recheck", {"input_seed": case.seed, "handover": res.get("handover")}, fds=fds, timeout_s=policy.run_timeout_s)
    except ChildError as exc:
        raise flow.child_stop(exc, "comparing the audited forward") from None
    finally:
        close_fds(fds)
    if not cmp["ok"]:
        vb.guard("op_audit", True, f"the audited forward on fresh inputs was wrong: {cmp['message']}"[:300])
        raise Stop(Status.INCORRECT, f"the audited forward (fresh inputs): {cmp['message']}")
    ops_seen = res.get("ops", {})
    compute = ops.disallowed(ops_seen)
    seen = ops.describe(ops.split_profiled(ops_seen)[0]) or "no ATen operators"
    if res.get("threads") and not policy.allow_torch_compute:
        vb.step("op_audit", True, f"ATen operators in one forward: {seen}")
        vb.guard("op_audit", True, f"Python threads alive during the audited forward: {', '.join(res['threads'])}")
        raise Stop(Status.REJECTED, f"Python threads were alive during the audited forward ({', '.join(res['threads'])}): "
                                    "work there is out of the audit's sight")
    if compute and not policy.allow_torch_compute:
        vb.step("op_audit", True, f"ATen operators in one forward: {seen}")
        vb.guard("op_audit", True, f"torch compute in the candidate's forward: {ops.describe(compute)}")
        raise Stop(Status.REJECTED, f"the candidate computes with torch operators ({ops.describe(compute)}); "
                                    "only allocation, views and layout copies are allowed unless the policy allows torch compute")
    note = " (torch compute allowed by the policy)" if compute else ""
    which = ("every correctness case in the first candidate child, and in the one taken for the window timed again one forward on fresh "
             "inputs" if retimed else "every correctness case and one forward on fresh inputs")
    vb.step("op_audit", True, f"{which} under a dispatch mode; operators of the fresh forward: {seen}{note}")
    vb.guard("op_audit", False, f"torch compute: {ops.describe(compute)}{note}" if compute else "allocation, views and layout copies only")


def _run_case(flow: Context, cand: Child, i: int, case: Case) -> dict[str, Any]:
    """Run one case in the candidate child; its reply (the staged output's description under
    "handover"; its descriptor, if any, from cand.received_fds())."""
    policy = flow.policy
    args = {
        "case": case.to_dict(), "poison": policy.enabled("poison"),
        "check_inputs": policy.enabled("inputs_unchanged"), "check_flags": policy.enabled("numerics_flags"),
        "output_bytes": flow.meta.get("output_bytes", []), "audit": policy.enabled("op_audit") and not policy.allow_torch_compute,
    }
    try:
        return cand.call("run_case", args, timeout_s=policy.run_timeout_s)
    except ChildError as exc:
        raise flow.child_stop(exc, f"case {case.id}") from None


def _check_case_reply(flow: Context, case: Case, res: dict[str, Any]) -> None:
    """Refuse a case whose call replaced watched functions, computed with torch operators (every
    case runs under the op audit's dispatch mode), moved numerics flags or changed its inputs."""
    vb = flow.vb
    if "identities_moved" in res:
        moved = moved_names(res["identities_moved"])
        vb.guard("function_identities", True, f"case {case.id}: {moved}")
        raise Stop(Status.REJECTED, f"case {case.id}: the candidate replaced {moved}")
    compute = ops.disallowed(res.get("ops") or {})
    if compute and not flow.policy.allow_torch_compute:
        vb.step("op_audit", True, f"ATen operators in case {case.id}: {ops.describe(ops.split_profiled(res['ops'])[0])}")
        vb.guard("op_audit", True, f"case {case.id}: torch compute in the candidate's forward: {ops.describe(compute)}")
        raise Stop(Status.REJECTED, f"case {case.id}: the candidate computes with torch operators ({ops.describe(compute)}); "
                                    "only allocation, views and layout copies are allowed unless the policy allows torch compute")
    if "flags_changed" in res:
        vb.guard("numerics_flags", True, f"case {case.id}: {res['flags_changed']}")
        raise Stop(Status.REJECTED, f"case {case.id}: the candidate changed numerics flags {res['flags_changed']}")
    if "inputs_changed" in res:
        vb.guard("inputs_unchanged", True, f"case {case.id}: input(s) at position(s) {res['inputs_changed']} modified")
        raise Stop(Status.INCORRECT, f"case {case.id}: the candidate modified its input(s) at position(s) {res['inputs_changed']}")


def _add_parts(parts: dict[str, float], reported: Any) -> None:
    """Add a case's per-part seconds as the candidate child reports them (log only: anything malformed is ignored)."""
    if not isinstance(reported, dict):
        return
    for part, sec in list(reported.items())[:8]:
        if not (isinstance(part, str) and isinstance(sec, (int, float)) and not isinstance(sec, bool)):
            continue
        try:
            value = float(sec)
        except OverflowError:
            continue
        if math.isfinite(value):
            parts[part[:20]] = parts.get(part[:20], 0.0) + value


def _finish_compare(flow: Context, ref: Child, i: int, case: Case, worst: list[float]) -> None:
    """Collect the reference child's comparison of case i (sent earlier)."""
    vb = flow.vb
    try:
        cmp = ref.wait("compare", timeout_s=flow.policy.run_timeout_s)
    except ChildError as exc:
        raise flow.child_stop(exc, f"comparing case {case.id}") from None
    if cmp["ok"] and "precision" in cmp:
        flow.precision = cmp["precision"]
    if cmp.get("max_abs_error") is not None:
        worst[0], worst[1] = max(worst[0], cmp["max_abs_error"]), max(worst[1], cmp["max_rel_error"])
    if not cmp["ok"]:
        vb.numbers.update(max_abs_error=cmp.get("max_abs_error"), max_rel_error=cmp.get("max_rel_error"))
        # no error figures: the output was not comparable (type, shape, dtype, unreadable)
        uncomparable = cmp.get("max_abs_error") is None and flow.policy.enabled("output_checks")
        step = "output_checks" if uncomparable else _case_step(i, case)
        if step is not None:
            vb.guard(step, True, f"case {case.id}: {cmp['message']}"[:300])
        raise Stop(Status.INCORRECT, f"case {case.id}: {cmp['message']}")


def _case_step(i: int, case: Case) -> str | None:
    """The correctness step a failing case belongs to; None for the first get_inputs() case, where
    a wrong answer is just wrong and no guard was needed to see it."""
    if case.kind == "native":
        return "seeds" if i > 0 else None
    return {"near": "near_duplicate", "extra": "extra_shapes"}.get(case.kind, "distributions")


def cached_baselines(flow: Context) -> dict[str, Any] | None:
    """The store's baseline record for this problem on this machine, precision, compile mode and
    timing protocol (judge.baseline), or None: then the baselines are measured now, and step interleave says why."""
    from kernelwright.judge import baseline

    rec = baseline.lookup(flow.baseline_store, flow.problem.hash, flow.meta, flow.device, flow.policy, flow.vb.size or "full")
    if rec is None or rec.get("eager_ms") is None or (flow.policy.compile_baseline and rec.get("compile_ms") is None):
        flow.cache_note = ("; no cached baselines for this problem, machine, precision, compile mode, timing protocol and size, "
                           "so they were measured now")
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
    lead = flow.lead_us()[0] and float((cached or {}).get("detail", {}).get("lead_us") or flow.lead_us()[0])
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
        _log_samples(flow, outcome, superseded=True)
        flow.say(f"step device_sync's charge for late device-wide ends moved the candidate's median by {share * 100:.2g} % (more "
                 f"than {RETIME_CHARGE_SHARE * 100:g} %): timing again in a fresh candidate child (this window is not priced)")
        cand = flow.fresh_candidate(cand)
        _record_timing_steps(flow, cached)  # the lead spin's note is the new child's
        _op_audit(flow, ref, cand, retimed=True)
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
    _fill_numbers(flow, outcome)
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
        drift = precision.DRIFT in outcome.recheck_failure  # within tolerance, but further than fp32 gets (guards.precision.drifted)
        vb.guard("precision" if drift else "timed_recheck", True, outcome.recheck_failure[:300])
        raise Stop(Status.REJECTED if drift else Status.INCORRECT, outcome.recheck_failure)
    if outcome.lead_us > flow.lead_us()[0] and vb.off_or("cuda_events"):  # the reference's calls take longer to queue (lead.lead_for)
        vb.step("cuda_events", True, f"CUDA events around every call, the start event queued behind a {outcome.lead_us:.0f} us spin on "
                f"{flow.meta.get('lead')} (the policy's {flow.lead_us()[0]:g} us, lengthened to the baselines' launch time): host launch latency is not timed")
    return outcome


def _charge_share(flow: Context, outcome: Any) -> float | None:
    """How far step device_sync's charge (measure.TimingOutcome.charged) moved the candidate's
    median in this window, as a share of its price without the charge (the median stream time less
    the harness overhead, as _runtime prices it; the amortized_time path is not read), when that is more than
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
    price = max(MIN_MS, statistics.median(s.times_ms) - (found or {}).get("candidate", 0.0))  # as _runtime prices it, uncharged
    share = (statistics.median(charged) - statistics.median(s.times_ms)) / price
    return share if share > RETIME_CHARGE_SHARE else None


def _log_samples(flow: Context, outcome: Any, superseded: bool = False) -> None:
    """The window's per-call record at debug level (measure.samples_record); a window timed again
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
    call was late by more than measure.late_threshold (the margin, or a tenth of the call if more):
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


def _fill_numbers(flow: Context, outcome: Any) -> None:
    vb = flow.vb
    _log_samples(flow, outcome)
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
