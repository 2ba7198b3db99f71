"""Warm correctness-only verdicts of the four CPU examples in one process, from the checkout given:
the median of rounds 2-4 per example, for comparing the verdict path at two commits on one machine.

    PYTHONPATH=CHECKOUT/src python3 benchmarks/verdict_speed.py CHECKOUT
"""
import statistics
import sys
import time
from pathlib import Path

from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.policy import Policy

root = Path(sys.argv[1])
out = {}
for ex in ("elementwise_chain", "layernorm", "matmul", "softmax"):
    d = root / "examples" / "cpu" / ex
    ts = []
    for _ in range(4):
        t = time.perf_counter()
        v = evaluate(d / "problem.py", d, Policy(time_candidate=False), device="cpu")
        ts.append(time.perf_counter() - t)
        assert v.status.value == "correct", v.log
    out[ex] = round(statistics.median(ts[1:]), 3)
print(out)
