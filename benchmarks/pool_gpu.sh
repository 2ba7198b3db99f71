#!/usr/bin/env bash
# Issue 29's GPU record: the judge's pool on one GPU, through Ray and through local workers.
#
#   KERNELWRIGHT_COMMIT=<sha> PARTS="bench uses" ROUNDS=2 bash benchmarks/pool_gpu.sh "$OUT"
# Parts, in the order PARTS names them (default: both):
#   bench  pool_bench.py: the judge alone, a local worker and a Ray actor, ROUNDS rounds (default 2) after a warm-up
#   uses   optimize --demo --ray, then a rollout of 4 episodes judged by a Ray actor
# The parts' limits add up to 560 s (a device call may run 600); the uses part's have not yet been
# measured on a GPU. The exit status is 1 when a part failed or was cut at its limit.
#
# Ray: the GPU machine has none and no package index, so it comes in the ignored folder .whl (the
# device tool's `carry`), made here by benchmarks/ray_wheel.sh: ray_min.tar.xz, Ray 2.60.0's cp312
# wheel unpacked without ray/jars, ray/dashboard/client/build and ray/rllib, packed with xz, and the
# wheels of the needs that machine lacks. Both go to /tmp/site, put first on PYTHONPATH.
set -uo pipefail
OUT=${1:?usage: pool_gpu.sh OUT}
mkdir -p "$OUT"
if [ -f .whl/ray_min.tar.xz ]; then
    mkdir -p /tmp/site
    [ -d /tmp/site/ray ] || tar -xJf .whl/ray_min.tar.xz -C /tmp/site || exit 9
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/benchmarks PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
export KERNELWRIGHT_COMMIT=${KERNELWRIGHT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
# one file for the machine (the device tool brings back at most 8): Ray's version, then the GPU's name and driver
python3 -c "import ray; print('ray', ray.__version__)" 2>&1 | tee "$OUT/machine.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/machine.txt"
status=0
for part in ${PARTS:-bench uses}; do
case $part in
bench)
    timeout -k 15 290 python3 benchmarks/pool_bench.py --out "$OUT/pb" --device cuda --rounds "${ROUNDS:-2}" --warmup 1 --backends local,ray 2>&1 | tee "$OUT/pool_bench.log"
    rc=$?; echo "bench rc=$rc" | tee -a "$OUT/pool_bench.log"; [ "$rc" = 0 ] || status=1
    ;;
uses)
    # the CUDA demo (a replay of a recording shipped in examples/recordings: no LLM), judged by one Ray actor
    timeout -k 15 120 python3 -m kernelwright optimize --demo --device cuda --ray --store "$OUT/demo.sqlite" --out "$OUT/demo_export" 2>&1 | tee "$OUT/demo_ray.log"
    rc=$?; echo "demo rc=$rc" | tee -a "$OUT/demo_ray.log"; [ "$rc" = 0 ] || status=1
    # a rollout judged by one Ray actor: a scripted policy on loopback (no LLM) writes each problem's shipped solution
    timeout -k 15 150 python3 benchmarks/rl_rollout_bench.py --device cuda --episodes 4 --concurrency 2 --problems 4 --ray --out "$OUT/rlb" 2>&1 | tee "$OUT/rollout_ray.log"
    rc=$?; echo "rollout rc=$rc" | tee -a "$OUT/rollout_ray.log"; [ "$rc" = 0 ] || status=1
    rm -rf "$OUT/rlb/episodes" "$OUT/rlb/rollout" "$OUT/rlb/problems" "$OUT/rlb/store.sqlite" "$OUT/demo_export" "$OUT/demo.sqlite"
    ;;
*) echo "a part is bench or uses, not $part" >&2; exit 2 ;;
esac
done
exit $status
