"""What the device-wide synchronize costs inside a timed interval, and what changes it (GPU only).

Each measurement is a fresh process (the spread between processes is what the repeatability
target is about). In it, the example candidate and its eager reference are timed in interleaved
rounds with the judge's protocol (L2 flush, lead spin, start event, call, device sync, end event),
and in the same calls a second event is recorded right after the call returns, before the
synchronize: `e1` is start to that stream-ordered event (the call alone), `e2` start to the judge's
end event, `tail` = e2 - e1 (the host noticing the GPU is done and queueing the end event). The
empty call is timed the same way (step harness_overhead's subtraction).

Variants, set before torch creates its CUDA context (benchmarks/hostwait.py): the driver's default wait,
spin-waiting, blocking sync, pinning to the GPU's NUMA node, spin plus pinning.

    python benchmarks/sync_bench.py run --out DIR [--processes 4] [--variants default,spin,...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "cuda"
VARIANTS = {"default": ("auto", False), "spin": ("spin", False), "blocking": ("blocking", False),
            "pin": ("auto", True), "spin_pin": ("spin", True)}
PROBLEMS = ("softmax", "layernorm")


def child(variant: str, rounds: int, batch: int) -> dict:
    import hostwait  # beside this script

    sched, pin = VARIANTS[variant]
    prepared = hostwait.prepare(0, pin=pin, sched=sched) if (pin or sched != "auto") else {}
    import torch

    from kernelwright.judge import inputs, timing
    from kernelwright.judge.inputs import Case
    from kernelwright.judge.policy import TimingConfig

    dev = torch.device("cuda")
    lead_us = TimingConfig().lead_us
    sw = timing.switches_from({"flush": True, "events": True, "sync": True, "lead_us": lead_us}, cuda=True)
    fns = {}
    for name in PROBLEMS:
        problem = inputs.import_file(EX / name / "problem.py", f"kw_problem_{name}")
        cand = inputs.import_file(EX / name / "model_new.py", f"kw_candidate_{name}")
        values = inputs.raw_inputs(problem, Case("native", 1), dev)
        fns[f"{name}_candidate"] = (inputs.init_model(problem, cand.ModelNew, 1, dev), values)
        fns[f"{name}_eager"] = (inputs.init_model(problem, problem.Model, 1, dev), values)
    fns["null"] = (timing.nothing, [])

    def one(fn, args):
        timing.flush_l2()
        torch.cuda.synchronize()
        start, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        timing._lead_spin(sw.lead_us)
        start.record()
        fn(*args)
        e1.record()
        torch.cuda.synchronize()
        e2.record()
        e2.synchronize()
        return start.elapsed_time(e1), start.elapsed_time(e2)

    rows: dict[str, dict[str, list[float]]] = {k: {"e1": [], "e2": [], "judge": []} for k in fns}
    with torch.no_grad():
        for fn, args in fns.values():
            timing.warm_up(fn, lambda _i, a=args: a, 100.0, cuda=True)
        for _ in range(rounds):
            for key, (fn, args) in fns.items():
                for _ in range(batch):
                    a, b = one(fn, args)
                    rows[key]["e1"].append(a)
                    rows[key]["e2"].append(b)
                # the judge's own function, unchanged (no second event)
                # the judge's own function: its device-wide times (its stream times are e1's)
                judged: list[float] = []
                timing.time_calls(fn, lambda _i, a=args: a, batch, cuda=True, switches=sw, synced=judged)
                rows[key]["judge"].extend(judged)
    out = {"variant": variant, "prepared": prepared, "cpus": sorted(os.sched_getaffinity(0)), "pid": os.getpid()}
    for key, r in rows.items():
        tails = [b - a for a, b in zip(r["e1"], r["e2"])]
        out[key] = {"e1": statistics.median(r["e1"]), "e2": statistics.median(r["e2"]), "tail": statistics.median(tails),
                    "tail_p90": sorted(tails)[int(0.9 * len(tails))], "judge": statistics.median(r["judge"]), "n": len(r["e1"])}
    return out


def _spread(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return (max(xs) - min(xs)) / statistics.median(xs) if len(xs) > 1 and statistics.median(xs) else None


def run(out: Path, processes: int, variants: list[str], rounds: int, batch: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    log = (out / "sync_bench.log").open("a")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for i in range(processes):  # variants interleaved across processes, so drift hits them alike
        for v in variants:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, __file__, "child", v, "--rounds", str(rounds), "--batch", str(batch)],
                                  capture_output=True, text=True, env=env, timeout=300)
            log.write(f"--- {v} #{i} rc={proc.returncode} {time.perf_counter() - t0:.1f} s\n{proc.stderr[-3000:]}\n")
            log.flush()
            try:
                results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            except (IndexError, json.JSONDecodeError):
                results.append({"variant": v, "error": proc.stderr[-500:]})
            (out / "sync_bench.json").write_text(json.dumps({"processes": results}, indent=2))
    summary: dict[str, dict] = {}
    for v in variants:
        ok = [r for r in results if r.get("variant") == v and "error" not in r]
        s: dict = {"n_processes": len(ok), "prepared": ok[0]["prepared"] if ok else None}
        for key in [k for k in (ok[0] if ok else {}) if isinstance(ok[0][k], dict) and "e1" in ok[0][k]]:
            per = {m: [r[key][m] for r in ok] for m in ("e1", "e2", "tail", "judge")}
            null_judge = [r["null"]["judge"] for r in ok]
            corrected = [j - n for j, n in zip(per["judge"], null_judge)]
            s[key] = {**{f"{m}_ms": per[m] for m in per}, "corrected_ms": corrected,
                      **{f"{m}_spread": _spread(per[m]) for m in ("e1", "e2", "judge")}, "corrected_spread": _spread(corrected)}
        summary[v] = s
    doc = {"processes": results, "summary": summary}
    (out / "sync_bench.json").write_text(json.dumps(doc, indent=2))
    return doc


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child")
    c.add_argument("variant", choices=sorted(VARIANTS))
    c.add_argument("--rounds", type=int, default=8)
    c.add_argument("--batch", type=int, default=10)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--processes", type=int, default=4)
    r.add_argument("--variants", default=",".join(VARIANTS))
    r.add_argument("--rounds", type=int, default=8)
    r.add_argument("--batch", type=int, default=10)
    args = ap.parse_args()
    if args.cmd == "child":
        print(json.dumps(child(args.variant, args.rounds, args.batch)))
        return 0
    doc = run(args.out, args.processes, args.variants.split(","), args.rounds, args.batch)
    for v, s in doc["summary"].items():
        for key, m in s.items():
            if isinstance(m, dict):
                print(v, key, {k: (round(x, 4) if isinstance(x, float) else [round(y, 4) for y in x] if isinstance(x, list) else x)
                               for k, x in m.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
