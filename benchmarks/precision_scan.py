"""Step precision on built-in problems, with the reference as the candidate: no false refusal, and
the errors each problem's fp32 reference and an honest candidate show against the float64 oracle.

    PYTHONPATH=src python3 benchmarks/precision_scan.py --out DIR [--problems a,b | --all] [--device cuda]
        [--half a,b]

Each problem is judged correctness-only (`Policy(time_candidate=False)`, `--allow-torch-compute`)
with `ModelNew = Model` appended to its own file, at the size the device uses by default. The
`--half` problems are judged a second time with a candidate that computes the problem's forward
under autocast to fp16 and returns float32 (the shortcut the guard is for), under the kernelbench
preset's 1e-2 tolerance: each must be refused, on a GPU `rejected` by step precision. Writes DIR/precision_scan.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# Problems where an honest fp32 result is furthest from float64: cuDNN's convolution algorithms, long
# matrix products and reductions, scans.
DEFAULT = ("conv1d_causal_dilated,conv2d_3x3_bias,conv2d_depthwise_7x7,conv3d_video_3x3x3,conv_transpose2d_upsample,"
           "conv2d_batchnorm_relu,separable_conv_relu6,convmixer_network,matmul_square_large,cumsum_reverse_time,"
           "cumsum_long_rows,softmax_with_temperature")
HALF = "matmul_square_large,conv2d_3x3_bias"
HALF_CANDIDATE = """

class ModelNew(Model):
    def forward(self, *args):
        with torch.autocast(device_type=args[0].device.type, dtype=torch.float16 if args[0].is_cuda else torch.bfloat16):
            out = super().forward(*args)
        return out.float()
"""


def _step(v, name: str) -> dict:
    return next(({"ran": s.ran, "reason": s.reason} for s in v.steps if s.name == name), {})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--problems", default=DEFAULT)
    ap.add_argument("--all", action="store_true", help="every built-in problem")
    ap.add_argument("--half", default=HALF, help="problems judged again with the autocast-to-half candidate")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    from kernelwright.judge.evaluate import evaluate, resolve_device
    from kernelwright.judge.policy import Policy, kernelbench_preset
    from kernelwright.problems.loader import load_problem
    from kernelwright.problems.suite import load_suite

    device = resolve_device(args.device)
    names = [e.problem.name for e in load_suite("builtin")] if args.all else [n for n in args.problems.split(",") if n]
    work = Path(tempfile.mkdtemp(prefix="kw-precision-scan-"))
    args.out.mkdir(parents=True, exist_ok=True)
    rows, t0 = [], time.perf_counter()

    def judge(name: str, source: str, policy: Policy, kind: str) -> None:
        problem = load_problem(f"builtin:{name}")
        folder = work / f"{kind}_{name}"
        folder.mkdir()
        (folder / "model_new.py").write_text(source)
        t1 = time.perf_counter()
        v = evaluate(problem.path, folder, policy, device=device)
        row = {"problem": name, "candidate": kind, "status": v.status.value, "size": v.problem.get("size"),
               "precision": _step(v, "precision"), "fired": [g.name for g in v.guards if g.fired], "log": v.log[:300],
               "seconds": round(time.perf_counter() - t1, 2)}
        rows.append(row)
        print(f"{name:32} {kind:9} {row['status']:9} {row['precision'].get('reason', '')[:150]}", flush=True)
        (args.out / "precision_scan.json").write_text(json.dumps({"device": device, "rows": rows}, indent=1))

    for name in names:
        source = load_problem(f"builtin:{name}").path.read_text()
        judge(name, source + "\n\nModelNew = Model\n", Policy(time_candidate=False, allow_torch_compute=True), "reference")
    for name in [n for n in args.half.split(",") if n]:
        source = load_problem(f"builtin:{name}").path.read_text()
        judge(name, source + HALF_CANDIDATE, kernelbench_preset(time_candidate=False, allow_torch_compute=True, distributions=()), "half")
    # the reference must be correct; the half candidate refused, on a GPU by step precision (there fp16's error fits
    # the 1e-2 tolerance, as in KernelBench); on a CPU autocast is bf16, whose error may exceed even that tolerance
    wrong = [r for r in rows if (r["status"] != "correct" if r["candidate"] == "reference" else
                                 (r["status"] == "correct" or (device == "cuda" and "precision" not in r["fired"])))]
    doc = {"device": device, "rows": rows, "wrong": wrong, "wall_s": round(time.perf_counter() - t0, 1)}
    (args.out / "precision_scan.json").write_text(json.dumps(doc, indent=1))
    print(f"{len(rows)} verdicts, {len(wrong)} not as expected, {doc['wall_s']} s", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
