"""Where does the candidate child's extra host time per timed call come from? (GPU experiment)

On the H200 at 670f11b the judge's wall clock refused three honest example candidates: the
candidate child spent 2.1-3.1 ms per timed call between writing the call's inputs and the start
event (the L2 flush and the synchronize before it), where the reference child spent 0.23 ms on the
same step with the same inputs, and the candidate child's own empty calls 0.28 ms. This script
replays the candidate child's commands in fresh processes, one piece of its history per process,
and times the same calls after each piece, so the piece that leaves the cost behind shows:

    PYTHONPATH=src python3 benchmarks/host_probe.py --out DIR [--example softmax]

Variants (each a fresh process): `fresh` (setup and warm-up only), `poison` (15 times the poison
of a correctness case), `cases` (15 correctness cases, no op audit), `audit` (the op audit's one
forward), `save` (15 outputs saved with torch.save), `full` (15 audited cases and the audit, as
the judge runs them). After the piece, the probe times batches of the candidate, the reference
model in the same process and empty calls, with the judge's own timing function and switches,
and records each part's host milliseconds per call (judge.timing.time_calls's `host`).
Writes DIR/host_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("fresh", "poison", "cases", "audit", "save", "full")
CASES = 15
BATCHES, CALLS = 4, 20


def _measure(cc, timing, inputs, torch, model, cuda: bool) -> dict:
    """Host ms per call per part, and median event times, for the candidate, the reference model
    and empty calls, with the protocol's switches (flush, events, sync, lead spin)."""
    lead = 200.0
    sw = {"flush": True, "events": True, "sync": True, "lead_us": lead}
    rng = __import__("random").Random(7)
    out = {}
    for name in ("candidate", "reference", "null", "candidate_no_fresh"):
        host: dict[str, float] = {}
        stream, synced, n = [], [], 0
        for _ in range(BATCHES):
            calls = [[rng.randrange(len(cc.S.pool)), None if name == "candidate_no_fresh" else rng.randrange(1, 2**31)] for _ in range(CALLS)]
            switches = timing.switches_from(sw, cuda=cuda)
            s: list[float] = []
            with torch.no_grad():
                if name == "null":
                    t = timing.time_null(CALLS, cuda=cuda, switches=sw, synced=s, host=host)
                else:
                    fn = cc.S.model if name.startswith("candidate") else model
                    get = inputs.pool_getter(cc.S.problem, cc.S.pool, calls, cc.S.device)
                    t = timing.time_calls(fn, get, CALLS, cuda=cuda, switches=switches, synced=s, host=host)
            stream += t
            synced += s
            n += CALLS
        out[name] = {"host_ms_per_call": {k: round(v / n, 4) for k, v in host.items()},
                     "stream_median_ms": round(statistics.median(stream), 4), "synced_median_ms": round(statistics.median(synced), 4) if synced else None}
    return out


def child(example: str, variant: str, device: str) -> dict:
    import torch

    from kernelwright.judge import child_candidate as cc
    from kernelwright.judge import correctness, inputs, timing
    from kernelwright.judge.inputs import Case

    folder = ROOT / "examples" / device / example
    cuda = device == "cuda"
    problem, candidate = folder / "problem.py", folder / "model_new.py"
    t0 = time.perf_counter()
    cc.setup({"problem_path": str(problem), "candidate_path": str(candidate), "device": device, "precision": "fp32",
              "init_seed": 1234, "check_identities": True})
    cc.setup_timing({"pool_seeds": [11, 12, 13], "warmup_ms": 10.0})
    model = inputs.init_model(cc.S.problem, cc.S.problem.Model, 1234, cc.S.device)
    with torch.no_grad():
        sample = model(*inputs.raw_inputs(cc.S.problem, Case("native", 5), cc.S.device))
    output_bytes = [inputs.tensor_bytes(sample)]
    del sample
    res = {"variant": variant, "example": example, "setup_s": round(time.perf_counter() - t0, 2), "before": _measure(cc, timing, inputs, torch, model, cuda)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if variant == "poison":
            for _ in range(CASES):
                cc._poison(output_bytes)
        elif variant in ("cases", "full"):
            for i in range(CASES):
                case = Case("native", 100 + i)
                cc.run_case({"case": case.to_dict(), "path": f"{tmp}/case-{i}.pt", "poison": True, "check_inputs": True,
                             "check_flags": True, "output_bytes": output_bytes, "audit": variant == "full"})
                os.unlink(f"{tmp}/case-{i}.pt")
        if variant in ("audit", "full"):
            cc.audit({"case": Case("native", 999).to_dict(), "path": f"{tmp}/audit.pt"})
        elif variant == "save":
            for i in range(CASES):
                with torch.no_grad():
                    out = cc.S.model(*inputs.raw_inputs(cc.S.problem, Case("native", 200 + i), cc.S.device))
                cc._save(out, f"{tmp}/save-{i}.pt")
                os.unlink(f"{tmp}/save-{i}.pt")
        if cuda:
            torch.cuda.synchronize()
    _ = correctness  # imported for the same module state as the child
    res["piece_s"] = round(time.perf_counter() - t0, 2)
    res["after"] = _measure(cc, timing, inputs, torch, model, cuda)
    return res


def _provenance(commit: str, device: str) -> dict:
    if device != "cuda":
        return {"device": device, "commit": commit, "command": " ".join(sys.argv)}
    from judge_bench import provenance  # GPU, driver, torch, CUDA, commit, date, command

    return provenance(commit)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--example", default="softmax")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--commit", default="unknown", help="the commit being measured (recorded in the file's provenance)")
    ap.add_argument("--child", default="")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of the script only")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.example, args.child, args.device)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for k, variant in enumerate(args.variants.split(","), 1):
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--example", args.example, "--device", args.device, "--child", variant],
                           capture_output=True, text=True, timeout=300)
        row = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"variant": variant, "error": p.stderr[-2000:]}
        rows.append(row)
        (args.out / "host_probe.json").write_text(json.dumps({"provenance": _provenance(args.commit, args.device), "runs": rows}, indent=1))
        brief = {w: {c: row[w][c]["host_ms_per_call"].get("flush") for c in row[w]} for w in ("before", "after")} if "after" in row else row.get("error", "")[-300:]
        print(f"[{k}] {variant} ({time.perf_counter() - t0:.1f} s): flush ms/call {brief}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
