"""The correctness phase of one evaluation: every case in the candidate child, compared in the reference
child, and the op audit (see judge.evaluate for the flow; judge.context for what the phases read of it;
judge.phases_timing and judge.phases_pricing for the phases after it)."""

from __future__ import annotations

import math
import secrets
import time
from typing import Any

from kernelwright.judge import ops
from kernelwright.judge.guards import precision
from kernelwright.judge.channel import close_fds
from kernelwright.judge.context import Context
from kernelwright.judge.measure import moved_names
from kernelwright.judge.policy import NEAR_POSITIONS
from kernelwright.core.records import Case, Status
from kernelwright.judge.verdicts import Stop
from kernelwright.judge.workers import Child, ChildError


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
    op_audit(flow, ref, cand)
    if policy.enabled("numerics_flags"):
        vb.guard("numerics_flags", False, "flags at their pinned values after every call")
    if policy.enabled("function_identities"):
        vb.guard("function_identities", False, "every watched function unchanged after the import and every call")


def op_audit(flow: Context, ref: Child, cand: Child, retimed: bool = False) -> None:
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
