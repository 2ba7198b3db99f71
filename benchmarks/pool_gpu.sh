#!/usr/bin/env bash
# The judge's pool on the GPU machine: issue 29's record on one GPU (bench, uses) and issue 30's
# on several (scale, rl64).
#
#   KERNELWRIGHT_COMMIT=<sha> PARTS="bench uses" ROUNDS=2 bash benchmarks/pool_gpu.sh "$OUT"
#   KERNELWRIGHT_COMMIT=<sha> PARTS="scale" WORKERS=2 bash benchmarks/pool_gpu.sh "$OUT"
# Parts, in the order PARTS names them (default: bench uses):
#   bench  pool_bench.py: the judge alone, a local worker and a Ray actor, ROUNDS rounds (default 2) after a warm-up
#   uses   optimize --demo --ray, then a rollout of 4 episodes judged by a Ray actor
#   scale  pool_scale_bench.py on WORKERS Ray actors (default: one per GPU) against one, ROUNDS
#          rounds, then one actor killed mid-bench (SCALE_PARTS, default scale,kill; scale needs 2
#          or more: on one GPU, SCALE_PARTS=kill WORKERS=1); SCALE_S limit
#          (default 540). Resumes from out/scale_<commit>_<workers> (kept on a warm machine, or
#          carried back from an earlier call's scale.tgz).
#   rl64   rl_rollout_bench.py: 64 episodes (EPISODES) through Ray, one actor per GPU, 4 at once per
#          GPU; RL_S limit (default 540): the episodes not started in time stay for the next call,
#          which resumes from out/rl64_<commit> (or from an earlier call's rl64.tgz, carried back).
# bench and uses have limits that add up to 560 s (a device call may run 600). The exit status is 1
# when a part failed or was cut at its limit.
#
# Ray: the GPU machine has none and no package index, so it comes in the ignored folder .whl (the
# device tool's `carry`), made here by benchmarks/ray_wheel.sh: ray_min.tar.xz, Ray 2.60.0's cp312
# wheel unpacked without what the pool never loads (ray_wheel.sh names it), packed with xz, and the
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
scale)
    gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c .)
    W=out/scale_${KERNELWRIGHT_COMMIT}_${WORKERS:-$gpus}; mkdir -p "$W"
    timeout -k 15 "${SCALE_S:-540}" python3 benchmarks/pool_scale_bench.py --out "$W" --device cuda --backend ray --workers "${WORKERS:-$gpus}" \
        --rounds "${ROUNDS:-2}" --parts "${SCALE_PARTS:-scale,kill}" --resume 2>&1 | tee -a "$OUT/scale.log"
    rc=$?; echo "scale rc=$rc" | tee -a "$OUT/scale.log"; [ "$rc" = 0 ] || status=1
    tar czf "$OUT/scale.tgz" --exclude="$W/suite" "$W"
    ;;
rl64)
    gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -c .)
    W=out/rl64_${KERNELWRIGHT_COMMIT}; resume=""; [ -d "$W/rollout" ] && resume=--resume
    # no episode starts in the last 120 s of RL_S (counted from the rollout's start, after Ray's): those wait for the next call
    [ "${RL_S:-540}" -gt 180 ] || { echo "RL_S must be over 180 s" >&2; exit 2; }
    timeout -k 15 "${RL_S:-540}" python3 benchmarks/rl_rollout_bench.py --device cuda --episodes "${EPISODES:-64}" --concurrency $((4 * gpus)) \
        --problems 8 --ray --pool "$gpus" --out "$W" --start-within-s $(( ${RL_S:-540} - 120 )) $resume 2>&1 | tee -a "$OUT/rl64.log"
    rc=$?; echo "rl64 rc=$rc" | tee -a "$OUT/rl64.log"; [ "$rc" = 0 ] || status=1
    tar czf "$OUT/rl64.tgz" --exclude="$W/episodes" "$W"  # what --resume reads: rollout/, store.sqlite, problems/
    ;;
*) echo "a part is bench, uses, scale or rl64, not $part" >&2; exit 2 ;;
esac
done
exit $status
