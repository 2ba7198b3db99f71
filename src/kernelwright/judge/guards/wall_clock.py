"""Guard wall_clock (step wall_clock_check): the judge's own wall clock around whole batches of the
candidate's calls against the time it is priced at. A timer the candidate under-reports moves every
batch; an honest candidate's slow calls that the median dropped are priced at the batches' sums
instead of refused. On the CPU backend it only advises (a shared host's clock is too noisy)."""

from __future__ import annotations

from typing import Any

from kernelwright.judge.guards.spec import GuardSpec
from kernelwright.judge.samples import TimingOutcome, host_breakdown
from kernelwright.judge.pricing import MIN_MS, speedups
from kernelwright.core.records import Status
from kernelwright.judge.verdicts import Stop

SPEC = GuardSpec(
    name="wall_clock", step="wall_clock_check", phases=("timing", "pricing"),
    watches="the median wall clock per call over the candidate's batches against its price plus the eager baseline's harness overhead",
    finding="the two figures and the children's own clocks", refusal="rejected",
    proofs=("tests/test_timing_guards.py::test_gpu_wall_clock_refuses_a_patched_event_timer",
            "tests/test_timing_guards.py::test_wall_clock_check_fires_when_the_reported_time_hides_real_time",
            "tests/test_gpu_steps_logic.py::test_padded_sums_buy_nothing_and_an_under_reporting_timer_is_refused"),
    accepts=("tests/test_timing_guards.py::test_wall_clock_check_accepts_an_honest_time_with_the_same_harness_overhead",
             "tests/test_gpu_steps_logic.py::test_an_honest_kernel_with_one_slow_call_a_batch_is_priced_at_its_sums_not_refused"),
    cuda_only=True,
)
WALL_SLACK = 1.5  # the guard's ratio ...
WALL_MARGIN_MS = 0.5  # ... and absolute margin per call


def apply(flow: Any, outcome: Any) -> None:
    """Record step wall_clock_check and the guard; reprice or refuse (GPU only)."""
    vb = flow.vb
    if not vb.off_or("wall_clock_check"):
        return
    fired, detail = wall_clock_check(outcome)
    cuda = flow.device == "cuda"
    if fired and cuda and outcome.priced_ms is not None:
        by_event, _ = wall_clock_check(outcome, against_price=False)  # the per-batch sums of its device-wide times
        if not by_event:
            # The sums cover the wall clock, the price does not: a few slow calls per batch that the
            # median (or the trimming) dropped, honest or padded. The candidate pays for its calls
            # as the sums have them, instead of being refused.
            event = outcome.samples["candidate"].batch_medians()[1]
            runtime = max(MIN_MS, event - outcome.priced_base_ms)
            vb.numbers.update(speedups(max(runtime, vb.numbers.get("runtime_ms") or 0.0), vb.numbers.get("eager_ms"),
                                       vb.numbers.get("compile_ms")))
            detail += (f"; its device-wide time per call, {event:.4g} ms, covers the wall clock: it is priced at that, less "
                       f"{outcome.priced_base_ms:.4g} ms of harness overhead and tail, {runtime:.4g} ms")
            vb.step("wall_clock_check", True, detail)
            vb.guard("wall_clock", True, detail)
            return
    vb.step("wall_clock_check", True, detail if cuda else f"{detail} (advisory on the CPU backend{': would have fired' if fired else ''})")
    vb.guard("wall_clock", fired and cuda, detail)
    if fired and cuda:
        raise Stop(Status.REJECTED, f"wall clock disagrees with the reported time: {detail}")


def wall_clock_check(outcome: TimingOutcome, *, against_price: bool = True) -> tuple[bool, str]:
    """(fired, detail): the candidate's wall clock per call against its reported time plus the
    eager baseline's harness overhead, each the median over that contender's batches. The
    reported time is the device-wide event time per call, or the time as priced plus the tail
    base (outcome.priced_ms) where that is less: a candidate that rewrites its per-call times
    from its own process (frames reach them) could pad one value a batch so that the sums match
    the wall clock while the median it is priced at stays low. against_price=False: the device-wide
    time only. A timer that
    under-reports moves every batch; one slow batch of an honest candidate (seen on the H200 with
    the tests' small batches: 2.2 ms/call against 1.7 allowed) moves only a mean."""
    cand, eager = outcome.samples.get("candidate"), outcome.samples.get("eager")
    cm = cand.batch_medians() if cand is not None else None
    if cm is None:
        return False, "no candidate batches"
    wall, event, _ = cm
    said = f"event time (to the device-wide end) {event:.4g} ms"
    priced = outcome.priced_ms if against_price else None
    if priced is not None and priced < event:
        # the price is a median (or a trimmed mean) of per-call times the candidate's process
        # handled; per-batch sums can be padded where the median drops the padding
        said = f"the time as priced, with the synchronize's tail, {priced:.4g} ms (device-wide event time {event:.4g} ms)"
        event = priced
    em = eager.batch_medians() if eager is not None else None
    if em is None:
        return False, f"candidate wall {wall:.4g} ms/call vs {said} (no eager overhead to compare)"
    overhead = max(0.0, em[2])
    expected = event + overhead
    fired = wall > WALL_SLACK * expected + WALL_MARGIN_MS
    detail = f"candidate wall {wall:.4g} ms/call; {said} + eager harness overhead {overhead:.4g} ms = {expected:.4g} ms"
    return fired, detail + _host_note(outcome)


def _host_note(outcome: TimingOutcome) -> str:
    """The children's own clocks, for a reader of the verdict (the guard does not read them)."""
    rows = [(f"{name} child", host_breakdown(outcome.samples.get(name))) for name in ("candidate", "eager")]
    for role in ("candidate", "reference"):
        s = outcome.null_wall.get(role)
        if s is not None and s.wall_calls:
            rows.append((f"{role} child's empty calls (wall {s.wall_ms / s.wall_calls:.3g} ms/call)", host_breakdown(s)))
    said = [f"{who}: {text}" for who, text in rows if text]
    return ("; as the children's clocks say: " + "; ".join(said)) if said else ""
