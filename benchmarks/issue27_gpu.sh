#!/usr/bin/env bash
# Issue 27's GPU checks in one device call, each part under its own time limit so that one slow part
# cannot take the others with it. Usage (repository root, on the GPU machine):
#   KERNELWRIGHT_COMMIT=<commit> bash benchmarks/issue27_gpu.sh OUT_DIR [KERNELBENCH_DIR]
# 1. step precision on built-in problems at full size: the reference as the candidate correct, an
#    autocast-to-fp16 candidate under the kernelbench preset refused by the guard (precision_scan.py);
# 2. the shipped CUDA examples as a suite (bench), with the guard and pricing version 2 in force;
# 3. the baselines against triton's do_bench (dobench_agreement.py) on DOBENCH_PROBLEMS (default 3:19,
#    the launch-bound MobileNetV1), when a KernelBench folder is given;
# 4. the GPU tests (the zoo's GPU entries among them).
# Each part's limit in seconds: SCAN_S, BENCH_S, DOBENCH_S, PYTEST_S; SKIP_BENCH=1 leaves part 2 out, SKIP_PYTEST=1
# part 4.
set -u
out=${1:?OUT_DIR}; kb=${2:-}
export PYTHONPATH=src
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
timeout "${SCAN_S:-150}" python3 benchmarks/precision_scan.py --out "$out" --device cuda > "$out/precision_scan.log" 2>&1; echo "precision_scan rc $?"
tail -3 "$out/precision_scan.log"
[ -n "${SKIP_BENCH:-}" ] || timeout "${BENCH_S:-240}" python3 -m kernelwright bench --suite examples/cuda -o "$out/bench_examples_cuda.json" --no-store > "$out/bench.log" 2>&1; echo "bench rc $?"
tail -8 "$out/bench.log"
if [ -n "$kb" ]; then
  timeout "${DOBENCH_S:-130}" python3 benchmarks/dobench_agreement.py --kernelbench "$kb" --out "$out" --problems "${DOBENCH_PROBLEMS:-3:19}" --jobs 8 --budget-s 5 \
    > "$out/dobench.log" 2> "$out/dobench_err.log"; echo "dobench rc $?"
  cat "$out/dobench.log"
fi
[ -n "${SKIP_PYTEST:-}" ] && exit 0
timeout "${PYTEST_S:-300}" python3 -m pytest -m gpu -v -rs -o addopts="" -p no:cacheprovider tests > "$out/gputests.log" 2>&1; echo "pytest rc $?"
grep -E "FAILED|ERROR|passed|failed" "$out/gputests.log" | tail -15
