"""A stand-in for KernelBench's evaluation protocol, written from its published description, used
only as the anchor of the throughput benchmark (judge_bench.py --sections throughput).

Protocol: import the candidate (a load_inline build happens at import), construct Model and ModelNew
under one seed in this same process, 5 correctness trials (fresh get_inputs() each, allclose at
atol=rtol=1e-2), then 100 timed trials with CUDA events after 3 warm-up calls. No isolation, no L2
flush, no baselines. Prints one JSON line: {"status", "runtime_ms", "seconds"}.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path


def _import(path: Path, name: str):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    t0 = time.perf_counter()
    ap = argparse.ArgumentParser()
    ap.add_argument("problem", type=Path)
    ap.add_argument("candidate", type=Path, help="model_new.py")
    args = ap.parse_args()
    import torch

    problem = _import(args.problem, "kb_problem")
    cand = _import(args.candidate, "kb_candidate")
    init = problem.get_init_inputs()
    torch.manual_seed(42)
    model = problem.Model(*init).cuda()
    torch.manual_seed(42)
    new = cand.ModelNew(*init).cuda()
    status = "correct"
    with torch.no_grad():
        for trial in range(5):
            torch.manual_seed(trial)
            inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
            ref, out = model(*inputs), new(*inputs)
            if ref.shape != out.shape or not torch.allclose(ref, out, atol=1e-2, rtol=1e-2):
                status = "incorrect"
                break
        times = []
        if status == "correct":
            for _ in range(3):
                new(*inputs)
            torch.cuda.synchronize()
            for _ in range(100):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                new(*inputs)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
    times.sort()
    median = times[len(times) // 2] if times else None
    print(json.dumps({"status": status, "runtime_ms": median, "seconds": time.perf_counter() - t0}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
