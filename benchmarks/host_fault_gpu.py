"""A TMPDIR closed to the sandbox's uids is the host's fault: infra_error, never the candidate's.

    PYTHONPATH=src python3 benchmarks/host_fault_gpu.py --commit C --out DIR

For each honest candidate of the relu fixture (a raw CUDA kernel, a Triton kernel, plain torch), one
verdict on the GPU with TMPDIR below a 0700 folder and one with that folder opened to 0711, each in
a process of its own (tempfile reads TMPDIR once), the evaluation's folder in TMPDIR (never
/dev/shm). Expected: infra_error naming the folder, then the candidate's own verdict (correct; the
plain torch one is rejected by the op audit, as with any TMPDIR). Needs a root judge (the uid
layer); elsewhere it says so and exits 2. Writes DIR/host_fault_<gpu>_<commit>.json and prints a
table. The folder is this script's own, below /tmp: /tmp itself is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(HERE))

import hostinfo  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"
TORCH_RELU = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
ONE = r"""
import json, sys
from kernelwright.judge import evaluate as ev
from kernelwright.judge.policy import Policy
ev.SHM_MIN_FREE = 1 << 62  # the evaluation's folder in TMPDIR, as on a host without a roomy /dev/shm
v = ev.evaluate(sys.argv[1], sys.argv[2], Policy(compile_baseline=False, baselines="skip"), device=sys.argv[3])
print("VERDICT " + json.dumps({"status": v.status.value, "log": v.log[-600:], "layers": (v.sandbox or {}).get("layers")}))
"""


def one(problem: Path, candidate: Path, device: str, tmpdir: Path, cache: Path) -> dict[str, Any]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "TMPDIR": str(tmpdir), "KERNELWRIGHT_CACHE": str(cache),
           "PYTHONPATH": str(ROOT / "src")}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("CUDA_", "NVIDIA_", "LD_", "HOME"))})
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", ONE, str(problem), str(candidate), device], capture_output=True, text=True, env=env,
                          timeout=300, cwd=str(ROOT))
    line = next((x for x in done.stdout.splitlines() if x.startswith("VERDICT ")), "")
    row = json.loads(line[len("VERDICT "):]) if line else {"status": f"no verdict (exit {done.returncode})", "log": done.stderr[-600:]}
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commit", default="unknown", help="the commit of src/ that runs (written out: the GPU machine's .git may be stale)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from kernelwright.judge import sandbox

    if "uid" not in sandbox.spec_for("auto").layers:
        print("host_fault_gpu: no uid layer here (the judge is not root): nothing to show", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kw-hostfault-"))
    work.chmod(0o711)  # its caches and the torch candidate are read by the sandboxed uids by the bits, not by a capability
    (work / "torch_relu").mkdir()
    (work / "torch_relu" / "model_new.py").write_text(TORCH_RELU)
    cands = FIXTURES / "candidates"
    candidates = {"raw CUDA (relu_cuda)": (cands / "relu_cuda", "correct"), "Triton (relu_triton)": (cands / "relu_triton", "correct"),
                  "torch (no build)": (work / "torch_relu", "rejected")}
    if args.device == "cpu":
        candidates = {"raw C++ (relu_correct)": (cands / "relu_correct", "correct"), "torch (no build)": (work / "torch_relu", "rejected")}
    rows = []
    try:
        for name, (cand, own) in candidates.items():
            top = Path(tempfile.mkdtemp(prefix="kw-closed-", dir="/tmp"))
            (top / "tmp").mkdir()
            try:
                for mode in (0o700, 0o711):
                    top.chmod(mode)
                    row = one(FIXTURES / "problems" / "relu.py", cand, args.device, top / "tmp", work / f"cache-{len(rows)}")
                    row.update(candidate=name, above=oct(mode), folder=str(top), names_folder=f"below {top}," in row.get("log", ""),
                               expected="infra_error" if mode == 0o700 else own)
                    rows.append(row)
                    print(f"{name:24} {oct(mode):6} {row['status']:14} {row['seconds']:6.1f} s  names the folder: {row['names_folder']}", flush=True)
            finally:
                top.chmod(0o700)
                shutil.rmtree(top, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ok = all(r["status"] == r["expected"] and r["names_folder"] == (r["above"] == "0o700") for r in rows)
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        gpu = ""
    result = {"commit": args.commit, "gpu": gpu, "host": hostinfo.host(), "device": args.device, "rows": rows, "as_expected": ok,
              "command": " ".join(sys.argv)}
    tag = "h100" if "H100" in gpu else "h200" if "H200" in gpu else "cpu"
    path = args.out / f"host_fault_{tag}_{args.commit}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"as expected: {ok} -> {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
