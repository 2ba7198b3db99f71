"""The reference child's comparisons of a candidate's outputs handed over by descriptor
(judge.handover) with the reference: a correctness case's (`compare`, with step precision's error
from the float64 oracle) and a timed call's (`recheck`, with step precision's drift test). They read
judge.child_reference's state, whose `setup` and `references` made the references.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from kernelwright.judge import child_reference, correctness, handover, inputs
from kernelwright.judge.child import error_kind
from kernelwright.judge.guards import precision as precision_guard
from kernelwright.judge.inputs import Case


def _compare_handover(refs: list[torch.Tensor], args: dict[str, Any], oracle: bool = False, drift: bool = False) -> dict[str, Any]:
    """Compare a candidate's staged outputs (judge.handover) with the reference: on CUDA read in
    place from its staging area, on the CPU copied out of its sealed memfd. The description is
    checked against the reference before anything is mapped or allocated for it."""
    S = child_reference.S

    def refused(message: str) -> dict[str, Any]:
        return {"ok": False, "message": message, "max_abs_error": None, "max_rel_error": None}

    desc, fds = args.get("handover"), args.get("_fds") or []
    try:
        items = handover.items_of(desc)
    except handover.HandoverError as exc:
        return refused(f"the output could not be read: {exc}")
    if len(items) != len(refs):
        return refused(f"{len(items)} outputs, expected {len(refs)}")
    for k, (ref, item) in enumerate(zip(refs, items)):
        problem = correctness.check_described(ref, item, S.strict)
        if problem:
            return refused((f"output {k}: " if len(refs) > 1 else "") + problem)
    if S.device.type == "cuda":
        torch.cuda.synchronize()  # an error of this child's own work (a recompute) surfaces here, as the judge's, not below
    try:  # on CUDA the comparison reads the candidate's staging area in place (handover.taken)
        with handover.taken(desc, items, fds, S.device) as outs:
            res = correctness.compare_outputs(refs, outs, S.atol, S.rtol, S.strict, S.tols).to_dict()
            if drift and res["ok"] and S.oracle:  # step precision on a timed call: no further from the fp32 reference than fp32 gets
                res.update({"ok": False, "message": far, "guard": "precision"} if (far := precision_guard.drifted(outs, refs, S.oracle["rows"])) else {})
            if oracle and res["ok"]:  # step precision: the candidate's error from the float64 oracle
                res["precision"] = [{**r, "e_c": precision_guard.candidate_error(outs[r["index"]], S.oracle["kept"][r["index"]])}
                                    for r in S.oracle["rows"]]
            return res
    except handover.HandoverError as exc:  # what the candidate staged is its own: unreadable is its fault
        return refused(f"the output could not be read: {exc}")
    except RuntimeError as exc:
        if desc.get("kind") != "cuda_ipc" or isinstance(exc, torch.OutOfMemoryError) or error_kind(exc) != "cuda":
            raise  # the judge's own failure (its memory included): infra_error
        S.tainted = f"reading an output failed ({exc})"[:300]  # a CUDA error there may leave this process's context unsound
        return refused(f"the output could not be read on the device: {exc}"[:1000])


def compare(args: dict[str, Any]) -> dict[str, Any]:
    """Compare a candidate's staged output for one case with the reference."""
    i, S = args["case_index"], child_reference.S
    return _compare_handover(child_reference._case_refs(i), args, oracle=bool(S.oracle) and S.oracle["case"] == i)


def recheck(args: dict[str, Any]) -> dict[str, Any]:
    """Compare a timed call's staged output with the reference on that call's inputs."""
    S = child_reference.S
    refs = child_reference._forward(inputs.raw_inputs(S.problem, Case("native", args["input_seed"]), S.device))
    return _compare_handover(refs, args, drift=True)


def handlers() -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {"compare": compare, "recheck": recheck}
