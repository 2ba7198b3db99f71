"""How the synchronize's tail grows with the length of the call (GPU experiment, step device_sync).

Step device_sync charges a call when the end event after the synchronize (e2) comes later after
the stream's own end (e1) than the empty call's does, by more than a margin (since da7ad3d it is
charged the part beyond the margin; before, its whole device-wide time). On the H200 at c894224
two honest controls (a 3.2 ms fp32 matmul, a 0.28 ms load_inline softmax) were charged that way. This times calls of known length, the judge's own spin kernel
(judge.lead) held for D microseconds, through the judge's timing function, in fresh processes,
and records the tail e2 - e1 for each D. `--kinds` adds other work of the same length, interleaved
with the spin kernel's in each process, to tell whether the tail follows the kind of work (a full
GPU, one waiting thread, memory traffic) or only its length:

    PYTHONPATH=src python3 benchmarks/tail_bench.py --out DIR [--processes 3] [--kinds spin,sleep,copy]

Writes DIR/tail_bench.json: per process, kind and D, the median, 90th percentile and maximum tail.
(tail_h200_8f5dc55.json holds the spin kernel's rows alone, by D; tail_h200_f8ca54b.json holds
"wait" and "poll" rows, from a commit that tried the host polling before the synchronize.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

LENGTHS_US = (0, 20, 100, 300, 1000, 3000, 10000)
CALLS = 100


def _calls(kinds: list[str], spinner, torch) -> dict:
    """kind -> (D us -> a call that keeps the GPU busy about D us). "spin": the judge's spin kernel
    on every thread slot (judge.lead); "sleep": torch.cuda._sleep, one thread waiting on the clock;
    "copy": device-to-device copies of a 256 MiB chunk (memory-bound work), as many as take D us."""
    def timed(fn) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e3  # us

    out = {}
    for kind in kinds:
        if kind == "spin":
            out[kind] = lambda us: (lambda: spinner.spin(us))
        elif kind == "sleep":
            per_us = 10_000_000 / timed(lambda: torch.cuda._sleep(10_000_000))
            out[kind] = lambda us, k=per_us: (lambda c=max(1, int(us * k)): torch.cuda._sleep(c))
        elif kind == "copy":
            n = 2**28 // 4
            src, dst = torch.ones(n, device="cuda"), torch.empty(n, device="cuda")
            chunk_us = timed(lambda: dst.copy_(src))

            def copies(us, src=src, dst=dst, chunk_us=chunk_us):
                whole, part = divmod(us / chunk_us, 1.0)
                m = int(part * n)

                def call():
                    for _ in range(int(whole)):
                        dst.copy_(src)
                    if m:
                        dst[:m].copy_(src[:m])
                return call
            out[kind] = copies
        else:
            raise SystemExit(f"unknown kind {kind!r}: spin, sleep or copy")
    return out


def child(kinds: list[str]) -> dict:
    import torch

    from kernelwright.judge import lead, timing

    spinner = lead.load()
    if spinner is None:
        return {"error": lead.why()}
    sw = timing.switches_from({"flush": True, "events": True, "sync": True, "lead_us": 200.0}, cuda=True)
    makers = _calls(kinds, spinner, torch)
    rows: dict[str, dict] = {k: {} for k in kinds}
    for rep in range(2):  # the second pass is the one kept: the first warms every path
        for us in LENGTHS_US:
            for kind, make in makers.items():  # interleaved, so a drift of the process hits every kind alike
                synced: list[float] = []
                fn = (lambda: None) if us == 0 else make(us)
                stream = timing.time_calls(fn, lambda _i: [], CALLS, cuda=True, switches=sw, synced=synced)
                tails = sorted((d - t) * 1e3 for t, d in zip(stream, synced))
                rows[kind][str(us)] = {"stream_median_ms": round(statistics.median(stream), 4), "tail_median_us": round(statistics.median(tails), 2),
                                       "tail_p90_us": round(tails[int(0.9 * len(tails))], 2), "tail_max_us": round(tails[-1], 2)}
    torch.cuda.synchronize()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--commit", default="unknown", help="the commit being measured (recorded in the file's provenance)")
    ap.add_argument("--kinds", default="spin", help="comma-separated: spin (the judge's spin kernel), sleep (torch.cuda._sleep), copy")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.kinds.split(","))))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for k in range(args.processes):
        p = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--kinds", args.kinds, "--child"], capture_output=True, text=True, timeout=300)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-2000:]})
        from judge_bench import provenance  # GPU, driver, torch, CUDA, commit, date, command

        (args.out / "tail_bench.json").write_text(json.dumps({"provenance": provenance(args.commit), "lengths_us": LENGTHS_US, "calls": CALLS,
                                                             "processes": runs}, indent=1))
        if "error" in runs[-1]:
            print(f"process {k + 1}: {runs[-1]['error'][-500:]}", flush=True)
            continue
        for kind, rows in runs[-1].items():
            print(f"process {k + 1}, {kind}: " + "; ".join(f"{us} us: tail {r['tail_median_us']} (p90 {r['tail_p90_us']})"
                                                         for us, r in rows.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
