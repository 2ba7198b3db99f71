"""How the synchronize's tail grows with the length of the call (GPU experiment, step device_sync).

Step device_sync charges a call its device-wide time when the end event after the synchronize
(e2) comes later after the stream's own end (e1) than the empty call's does, by more than a
margin. On the H200 at c894224 two honest controls (a 3.2 ms fp32 matmul, a 0.28 ms load_inline
softmax) were charged that way. This times calls of known length, the judge's own spin kernel
(judge.lead) held for D microseconds, through the judge's timing function, in fresh processes,
and records the tail e2 - e1 for each D:

    PYTHONPATH=src python3 benchmarks/tail_bench.py --out DIR [--processes 3]

Writes DIR/tail_bench.json: per process and D, the median, 90th percentile and maximum tail.
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


def child() -> dict:
    import torch

    from kernelwright.judge import lead, timing

    spinner = lead.load()
    if spinner is None:
        return {"error": lead.why()}
    sw = timing.switches_from({"flush": True, "events": True, "sync": True, "lead_us": 200.0}, cuda=True)
    rows = {}
    for rep in range(2):  # the second pass is the one kept: the first warms every path
        for us in LENGTHS_US:
            synced: list[float] = []
            fn = (lambda: None) if us == 0 else (lambda u=us: spinner.spin(u))
            stream = timing.time_calls(fn, lambda _i: [], CALLS, cuda=True, switches=sw, synced=synced)
            tails = sorted((d - t) * 1e3 for t, d in zip(stream, synced))
            rows[str(us)] = {"stream_median_ms": round(statistics.median(stream), 4), "tail_median_us": round(statistics.median(tails), 2),
                             "tail_p90_us": round(tails[int(0.9 * len(tails))], 2), "tail_max_us": round(tails[-1], 2)}
    torch.cuda.synchronize()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--processes", type=int, default=3)
    ap.add_argument("--commit", default="unknown", help="the commit being measured (recorded in the file's provenance)")
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child()))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    runs = []
    for k in range(args.processes):
        p = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--child"], capture_output=True, text=True, timeout=300)
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-2000:]})
        from judge_bench import provenance  # GPU, driver, torch, CUDA, commit, date, command

        (args.out / "tail_bench.json").write_text(json.dumps({"provenance": provenance(args.commit), "lengths_us": LENGTHS_US, "calls": CALLS,
                                                             "processes": runs}, indent=1))
        print(f"process {k + 1}: " + ("; ".join(f"{us} us: tail {r['tail_median_us']} (p90 {r['tail_p90_us']})"
                                             for us, r in runs[-1].items()) if "error" not in runs[-1] else runs[-1]["error"][-500:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
