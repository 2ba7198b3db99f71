"""Whether synthesis workers compile on this GPU machine, with the sandbox and without.

    PYTHONPATH=src python3 benchmarks/synth_gpu_probe.py --out "$OUT" [--device cuda]

At 8b5ee19 on an H100 every candidate of `kernelwright synth --device cuda` was rejected at stage
`error` with "AssertionError: Artifact of type=inductor already registered in mega-cache artifact
factory" (benchmarks/results/synth_h200.md, section 6): torch's inductor cache module ran twice in the
worker, the first time failing. The workers have run inside the sandbox since 2f568e5 and as the
judge's hosted children since 392df30, and no GPU run came between: this runs the same small synthesis
under `--sandbox off` and `--sandbox auto` (one worker) and prints each candidate's stage and reason,
then the end of each run's console. Since the commit after 8b5ee19 a failed compile's first error is
the one reported (judge.reference_checks.compiled: on a GPU the reset after it imported the cache
module again, and that second failure replaced the first in the result). Files in --out: probe_MODE/ (the runs) and synth_gpu_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(mode: str, out: Path, device: str) -> dict:
    folder = out / f"probe_{mode}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "kernelwright", "synth", "--n", "1", "--seed", "1", "--device", device, "--workers", "1",
           "--max-candidates", "2", "--timeout-s", "120", "--sandbox", mode, "--out", str(folder)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    rows = []
    path = folder / "candidates.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        rows.append({"status": r.get("status"), "stage": r.get("stage"), "reason": r.get("reason")})
    return {"mode": mode, "rc": done.returncode, "seconds": round(time.perf_counter() - t0, 1), "candidates": rows,
            "console_tail": (done.stdout + done.stderr)[-6000:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs = [run(mode, args.out, args.device) for mode in ("off", "auto")]
    (args.out / "synth_gpu_probe.json").write_text(json.dumps({"commit": os.environ.get("KERNELWRIGHT_COMMIT"), "runs": runs}, indent=1))
    for r in runs:
        print(f"--sandbox {r['mode']}: rc {r['rc']}, {r['seconds']} s")
        for c in r["candidates"]:
            print(f"  {c['status']:9} {c['stage']}: {(c['reason'] or '')[:300]}")
        print(r["console_tail"][-2500:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
