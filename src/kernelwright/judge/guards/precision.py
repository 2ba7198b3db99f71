"""Guard `precision`: a float32 answer computed in reduced precision inside, under an fp32 policy.

Watches: the candidate's float32 outputs on one get_inputs() case drawn in secret (random full-mantissa
values, where rounding to a shorter mantissa shows), measured against an oracle: the reference
model run with float64 parameters and buffers on the same inputs cast to float64 (judge.child_reference
computes it and the reference's error, judge.reference_compare the candidate's, in the reference child;
the candidate never sees it).
Runs: under `Policy.precision == "fp32"` with step `precision` on; and on every re-checked timed
call (step timed_recheck), where no oracle is computed: there the candidate's distance from the fp32
reference d = ||c - r|| / ||r|| is held to threshold(e_r) + e_r, with e_r from the oracle's case. By
the triangle inequality d > threshold(e_r) + e_r means e_c > threshold(e_r), so a candidate that
keeps fp32 while its answers are checked and switches to a shorter mantissa once it is timed is
refused as well, where the re-checked calls cannot be told from the others (docs/judge.md says
how far that holds: a candidate that recognises them can still keep fp32 for them alone). Under `tf32`, `bf16` or `fp16`
the policy allows that precision inside, loosens the tolerance to match and gives the baselines
the same allowance, so there is nothing to refuse.
Finding: per float32 output, the relative L2 errors e_c = ||c - o|| / ||o|| of the candidate and
e_r = ||r - o|| / ||o|| of the fp32 reference.
Refusal: `rejected` when some output has e_c > max(RATIO * e_r, FLOOR * EPS32): a shortcut the
tolerance alone may let through (KernelBench's 1e-2 does), refused as the other guards refuse
theirs; a wrong answer stays `incorrect`, decided by the tolerance before this guard.

The constants, measured on the CPU with randn inputs (relative L2 error in units of EPS32, over
64 outputs; benchmarks/doc_figures_cpu.py, section precision_units): torch's fp32 product (its
blocked sums) sits at 1-2; an honest fp32 kernel that sums naively, one term after another, at
about 0.13-0.15 sqrt(n) for n terms at the median: 3-4 at 513, 33-36 at 2**16, 132-188 at 2**20.
Rounding a product's operands alone, before any accumulation, costs fp16 and TF32 (rounded to
nearest) about 2400-2500 and bf16 about 20000. FLOOR = 256 leaves the worst naive 2**20-term sum
measured under it with margin 1.36 and fp16 above it by 9.5x (fewer outputs, or outputs that
cancel, move both); RATIO = 64 keeps candidates of
problems whose reference is itself far from the oracle (cancellation, long sequential scans)
to the reference's own order of error.
"""

from __future__ import annotations

import secrets
from typing import Any

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="precision", step="precision", phases=("correctness", "timing"),
    watches="the candidate's float32 outputs on a get_inputs() case drawn in secret, against a float64 oracle and the fp32 reference",
    finding="per output, e_c and e_r (relative L2 errors from the oracle) and the limit", refusal="rejected",
    proofs=("zoo_matmul_fp16_torch", "zoo_matmul_bf16_torch", "zoo_matmul_fp16_operands", "zoo_matmul_tf32_cuda", "zoo_matmul_fp16_when_timed"),
    accepts=("zoo_matmul_naive", "zoo_longsum_sequential", "examples/cpu/matmul"),
    where="judge.child_reference and judge.reference_compare (the oracle and both errors, in the reference child)",
)

EPS32 = 2.0**-23  # float32's machine epsilon
RATIO = 64.0  # the candidate may be this many times further from the oracle than the fp32 reference ...
FLOOR = 256.0  # ... and always this many EPS32
CHUNK = 1 << 22  # elements per step of the error sums (bounded temporaries on the device)
SAMPLE = 1 << 20  # elements per output the errors are measured on: drawn in secret where an output has more
DRIFT_MIN = 1024  # the fewest elements an output needs for the timed re-checks' test (drifted): e_r of a few elements varies by input
HOST_BYTES = 4 * 2**30  # the oracle's float64 run on the host: at most this much data (the model and one forward, doubled)
HOST_FLOPS = 5e10  # ... and at most this many FLOPs where the problem runs on a GPU (a float64 CPU forward; seconds)


def threshold(e_r: float) -> float:
    """The most relative L2 error from the float64 oracle a float32 output may have."""
    return max(RATIO * e_r, FLOOR * EPS32)


def decide(errors: list[dict[str, Any]]) -> tuple[bool, str]:
    """(fired, detail) from the reference child's figures: one {"index", "e_c", "e_r"} per float32
    output compared, plus "bitwise": true where the float64 run gave the fp32 run's values exactly
    (an exact operation, or one computing in fp32 inside: the oracle is no more precise, so an
    error past the floor there is not refused)."""
    worst: tuple[float, dict[str, Any]] | None = None
    parts = []
    for e in errors:
        lim = threshold(float(e["e_r"]))
        ratio = float(e["e_c"]) / lim
        parts.append(f"output {e['index']}: e_c {e['e_c']:.3g}, e_r {e['e_r']:.3g}, limit {lim:.3g}"
                     + (" (the float64 run equals the fp32 run: not refused)" if e.get("bitwise") and ratio > 1 else ""))
        if ratio > 1 and not e.get("bitwise") and (worst is None or ratio > worst[0]):
            worst = (ratio, e)
    detail = "relative L2 error from a float64 oracle on a get_inputs() case drawn in secret: " + "; ".join(parts)
    if worst is None:
        return False, detail
    e = worst[1]
    return True, (f"output {e['index']} is {e['e_c'] / EPS32:.0f} float32 epsilons from the float64 oracle, the fp32 reference "
                  f"{e['e_r'] / EPS32:.1f}: more than max({RATIO:g}x the reference's, {FLOOR:g} epsilons), as computing in fp16, "
                  f"bf16 or TF32 inside gives; " + detail)


def oracle_need(footprint: dict[str, int]) -> int:
    """Bytes the float64 run holds: the model's float64 copy and one forward (inputs, working set,
    outputs), each twice its float32 size (judge.memory.footprint's figures)."""
    p = int(footprint.get("param_bytes", 0))
    w = max(int(footprint.get("forward_peak_bytes", 0)), int(footprint.get("input_bytes", 0)) + int(footprint.get("output_bytes", 0)))
    return 2 * (p + w)


def rel_l2(out: Any, oracle: Any) -> float:
    """||out - oracle|| / ||oracle|| in float64, by chunks; out may sit on a GPU, oracle on the host."""
    import torch

    a, b = out.reshape(-1), oracle.reshape(-1)
    num = den = 0.0
    for k in range(0, b.numel(), CHUNK):
        o = b[k:k + CHUNK].to(a.device, torch.float64)
        num += float(torch.sum((a[k:k + CHUNK].to(torch.float64) - o) ** 2))
        den += float(torch.sum(o * o))
    return (num / den) ** 0.5 if den > 0 else float("nan")


def device_oracle_bytes(policy: Any, meta: dict[str, Any]) -> int:
    """What the verdict's memory estimate reserves on the GPU for the float64 run (judge.memory.estimate):
    its need where the step applies, 0 where it does not."""
    if policy.precision != "fp32" or not policy.enabled("precision"):
        return 0
    return oracle_need(meta.get("memory") or {})


def placement(meta: dict[str, Any], room: int | None, cuda: bool) -> tuple[str | None, str]:
    """Where the oracle runs ("device", "host"), or (None, why not). On the CPU backend on the host,
    up to HOST_BYTES. On a GPU on the device when its float64 run fits in `room` (what the
    verdict's memory estimate, judge.memory, reserves for the reference child beyond its context and
    model; None: no estimate), else on the host up to HOST_BYTES and HOST_FLOPS."""
    mem = meta.get("memory") or {}
    need = oracle_need(mem)
    fits_host = need <= HOST_BYTES
    if not cuda:
        if fits_host:
            return "device", ""
        return None, f"the float64 oracle would hold {need / 2**30:.2f} GiB, more than {HOST_BYTES / 2**30:g} GiB"
    if room is not None and need <= room:
        return "device", ""
    flops = int(meta.get("flops") or 0)
    if fits_host and flops <= HOST_FLOPS:
        return "host", ""
    return None, (f"the float64 oracle would hold {need / 2**30:.2f} GiB, more than the reference child's reservation leaves "
                  f"on the device, and on the host it is over {HOST_BYTES / 2**30:g} GiB or {HOST_FLOPS:.0e} FLOPs")


def oracle_outputs(model: Any, values: list[Any], device: Any) -> list[Any]:
    """The float64 oracle's outputs, where they were computed: the model run with float64 copies of its floating
    parameters and buffers on `device` (torch.func.functional_call: no float32 copy of the model
    on the way, and the model itself is left as it was), on the values with every floating tensor
    cast to float64. Raises as the model does."""
    import torch
    from torch.func import functional_call

    def wide(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return v.detach().to(device=device, dtype=torch.float64 if v.is_floating_point() else v.dtype)
        return v

    state = {k: wide(v) for k, v in [*model.named_parameters(), *model.named_buffers()]}
    with torch.no_grad():
        out = functional_call(model, state, tuple(wide(v) for v in values))
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o.detach() if isinstance(o, torch.Tensor) else o for o in outs]


def oracle_on(model: Any, values: list[Any], device: Any, run: Any = None) -> list[Any]:
    """oracle_outputs on `device`; where the device runs out of memory (a candidate starting beside
    the reference child can take it), again on the host, so that no candidate can make the step skip
    by filling the GPU. `run` stands in for oracle_outputs in tests."""
    import torch

    run = run or oracle_outputs
    try:
        return run(model, values, device)
    except torch.OutOfMemoryError:
        if torch.device(device).type == "cpu":
            raise
        torch.cuda.empty_cache()
        return run(model, values, torch.device("cpu"))


def figures(refs: list[Any], oracle: list[Any]) -> tuple[list[dict[str, Any]], str, dict[int, tuple[Any, Any]]]:
    """Per float32 output the fp32 reference's e_r and whether the oracle equals it bitwise; why
    none is compared, when none is; and what is kept for the candidate's comparison, by output:
    (the secret sample's flat indices, None for every element; the oracle's values there, float64
    on the host). Where an output has more than SAMPLE elements both errors are measured on the same
    SAMPLE elements drawn in secret: the relative L2 error of a uniform sample estimates the whole
    output's (a candidate that computed some share of its elements in reduced precision shows that
    share in the sample, not knowing which), and neither the oracle nor the errors cross to the
    host whole (a GiB-sized output cost over a second there)."""
    import torch

    if len(oracle) != len(refs):
        return [], f"the float64 run returned {len(oracle)} outputs, the fp32 run {len(refs)}", {}
    rows, why, kept = [], [], {}
    gen = torch.Generator().manual_seed(secrets.randbits(62))
    for k, (r, o) in enumerate(zip(refs, oracle)):
        if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor):
            r = r.to(o.device)
        if not isinstance(o, torch.Tensor) or r.dtype != torch.float32:
            why.append(f"output {k} is {r.dtype}, not float32" if r.dtype != torch.float32 else f"output {k} of the float64 run is not a tensor")
        elif o.dtype != torch.float64:
            why.append(f"output {k}: the float64 run returned {o.dtype} (the forward casts inside)")
        elif o.shape != r.shape or not bool(torch.isfinite(o).all()) or not bool(torch.isfinite(r).all()):
            why.append(f"output {k}: not finite, or shaped unlike the fp32 run's")
        elif not bool(o.any()):
            why.append(f"output {k}: all zero in the float64 run")
        else:
            bitwise = bool(torch.equal(r.to(torch.float64), o))
            n = o.numel()
            idx = None if n <= SAMPLE else torch.randint(n, (SAMPLE,), generator=gen).to(o.device)
            o_s = (o.reshape(-1) if idx is None else o.reshape(-1)[idx]).to("cpu")
            r_s = r.reshape(-1) if idx is None else r.reshape(-1)[idx]
            kept[k] = (None if idx is None else idx.to("cpu"), o_s)
            rows.append({"index": k, "e_r": 0.0 if bitwise else rel_l2(r_s, o_s), "bitwise": bitwise})
    return rows, "; ".join(why), kept


DRIFT = "computed in reduced precision once timed"  # what a timed re-check's refusal starts with (judge.phases_timing)


def drifted(outs: list[Any], refs: list[Any], rows: list[dict[str, Any]]) -> str:
    """Why a re-checked timed call's outputs are further from the fp32 reference than an fp32
    computation can be (d > threshold(e_r) + e_r on SAMPLE elements drawn in secret), or empty.
    e_r comes from another input (the oracle's case), so the test holds only where the reference's
    error is stable across inputs: outputs of DRIFT_MIN elements or more (a scalar sum that cancels
    has an e_r that varies by orders of magnitude: an honest reordered sum was refused in 8 of 300
    verdicts). Rows where the float64 run equalled the fp32 run are not tested, as decide() does
    not refuse them."""
    import torch

    gen = torch.Generator().manual_seed(secrets.randbits(62))
    for row in rows:
        k, e_r = row["index"], float(row["e_r"])
        if k >= len(outs) or k >= len(refs):
            continue
        c, r = outs[k].reshape(-1), refs[k].reshape(-1)
        if row.get("bitwise") or c.numel() != r.numel() or c.numel() < DRIFT_MIN:
            continue
        if c.numel() > SAMPLE:
            idx = torch.randint(c.numel(), (SAMPLE,), generator=gen)
            c, r = c[idx.to(c.device)], r[idx.to(r.device)]
        # the tolerance already matched non-finite elements; one of them would make the distance NaN, which passes any test
        finite = (torch.isfinite(c) & torch.isfinite(r.to(c.device))).to(r.device)
        c, r = c[finite.to(c.device)], r[finite]
        d, lim = rel_l2(c, r), threshold(e_r) + e_r
        if d > lim:
            return (f"{DRIFT}: output {k} is {d / EPS32:.0f} float32 epsilons from the fp32 reference, more than the "
                    f"{lim / EPS32:.0f} an fp32 computation can be (max({RATIO:g}x the reference's {e_r / EPS32:.1f} from the float64 "
                    f"oracle, {FLOOR:g}) plus that {e_r / EPS32:.1f})")
    return ""


def candidate_error(out: Any, kept: tuple[Any, Any]) -> float:
    """The candidate's e_c for one output, on the elements figures() kept (gathered where the output lies)."""
    idx, o_s = kept
    flat = out.reshape(-1)
    return rel_l2(flat if idx is None else flat[idx.to(flat.device)], o_s)


def oracle_spec(policy: Any, cases: list[Any], meta: dict[str, Any], estimate: Any, cuda: bool) -> tuple[dict[str, Any] | None, str]:
    """(what the reference child is asked for, why nothing is): the float64 oracle of the first
    get_inputs() case and where it runs; None when the step does not apply or the oracle cannot be had."""
    from kernelwright.judge import memory

    if policy.precision != "fp32" or not policy.enabled("precision"):
        return None, ""
    natives = [i for i, c in enumerate(cases) if c.kind == "native"]
    # drawn in secret among the get_inputs() cases, so a candidate that counts its calls cannot keep its
    # fp32 path for the checked one (the first call) and take a shortcut on the others
    first = secrets.choice(natives) if natives else None
    mem = meta.get("memory") or {}
    room = estimate.reference - memory.CTX - int(mem.get("param_bytes", 0)) if estimate is not None else None
    where, why = placement(meta, room, cuda)
    if first is None or where is None:
        return None, why or "no get_inputs() case"
    return {"case": first, "where": where}, ""


def apply(flow: Any, skipped: str, took: float | None) -> None:
    """Step precision: under an fp32 policy, refuse a candidate whose error
    from the float64 oracle is far past the fp32 reference's own."""
    vb = flow.vb
    allowance = f"the policy allows {flow.policy.precision} inside" if flow.policy.precision != "fp32" else ""
    if not vb.off_or("precision", allowance):
        return
    from kernelwright.core.records import Status  # here, not at the top: the reference child imports this module
    from kernelwright.judge.verdicts import Stop

    if flow.precision is None:
        vb.step("precision", False, f"no float64 oracle: {skipped or 'its get_inputs() case was not compared'}")
        return
    fired, detail = decide(flow.precision)
    if isinstance(took, (int, float)):
        detail += f" (the float64 run took {took:.3g} s)"
    vb.step("precision", True, detail)
    vb.guard("precision", fired, detail)
    if fired:
        raise Stop(Status.REJECTED, f"computed in reduced precision: {detail}")
