#!/usr/bin/env bash
# Issue 32's record on the GPU, at one commit, in as many device calls as it takes. Usage (repository
# root, on the GPU machine):
#   KERNELWRIGHT_COMMIT=<commit> PARTS="suite bench" bash benchmarks/issue32_gpu.sh OUT_DIR
# Parts, each under its own limit in seconds (the variable beside it), run in the order PARTS names them:
#   suite     eager and torch.compile of every built-in problem at its GPU size, with the degeneracy
#             gate (suite_bench.py; SUITE_S, default 540). A second call goes on with the same store:
#             problems already timed are skipped, gate included;
#   bench     `kernelwright bench` of the shipped solutions in benchmarks/solutions/h200, with the
#             warm-up of their torch.compile baselines (bench_run.py; BENCH_S, 540). A second call
#             resumes from the first call's finished problems;
#   zoo       the zoo's GPU entries, every step on and with the entry's steps off (zoo_bench.py; ZOO_S, 300);
#   gputests  `pytest -m gpu tests` (GPUTESTS_S, 420);
#   repeat    each shipped CUDA example judged 10 times (repeat_bench.py; REPEAT_S, 420); resumes;
#   tail      the event tail of the GPU machine, as at 8c7dbbd (tail_bench.py; TAIL_S, 240).
# Work goes to WORK (default out/i32): it stays on a warm machine between back-to-back calls, or
# travels as `carry` after being unpacked from a previous call's tarball. Each call leaves in OUT_DIR
# i32_<parts>.tgz (the work folder's results, no build caches) and i32.log; nothing else, so the
# device tool's limit of 8 files holds.
set -u
out=${1:?OUT_DIR}
commit=${KERNELWRIGHT_COMMIT:?set KERNELWRIGHT_COMMIT to the commit being measured}
parts=${PARTS:?set PARTS, e.g. PARTS="suite bench zoo gputests repeat tail"}
W=${WORK:-out/i32}
export PYTHONPATH=src PYTHONUNBUFFERED=1
mkdir -p "$out" "$W"
log="$out/i32.log"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$log"; }
say "commit $commit, parts: $parts, work $W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >> "$W/host.txt" 2>&1
python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)" >> "$W/host.txt" 2>&1
tail -2 "$W/host.txt" | tee -a "$log"

run_part() {  # name, limit, command...: the command's output to W/<name>_<n>.log, its rc in the log
  local name=$1 limit=$2; shift 2
  local n=1; while [ -e "$W/${name}_$n.log" ]; do n=$((n + 1)); done
  say "$name (call $n, limit ${limit} s): $*"
  timeout "$limit" "$@" > "$W/${name}_$n.log" 2>&1
  local rc=$?
  say "$name rc $rc; last lines:"; tail -4 "$W/${name}_$n.log" | cut -c1-300 | tee -a "$log"
}

for part in $parts; do
  case $part in
    suite)
      s=${SUITE_S:-540}; n=1; while [ -e "$W/suite_$n" ]; do n=$((n + 1)); done
      more=(); [ -e "$W/suite_store.sqlite" ] && more=(--gate-skip-cached)
      run_part suite "$s" python3 benchmarks/suite_bench.py run --out "$W/suite_$n" --store "$W/suite_store.sqlite" \
        --suite builtin:1 --suite builtin:2 --suite builtin:3 --commit "$commit" --jobs 12 --gate-jobs 8 \
        --deadline-s $((s - 70)) --budget-s 3 "${more[@]}"
      ;;
    bench)
      more=(); if [ -e "$W/bench/bench.json" ]; then cp "$W/bench/bench.json" "$W/bench_before.json"; more=(--resume-from "$W/bench_before.json"); fi
      only=$(ls benchmarks/solutions/h200 | sed -n 's/\.py$//p' | paste -sd, -)
      run_part bench "${BENCH_S:-540}" python3 benchmarks/bench_run.py --out "$W/bench" --commit "$commit" --suite builtin \
        --solutions benchmarks/solutions/h200 --budget-s 6 --warm-jobs 13 --only "$only" "${more[@]}"
      ;;
    zoo)
      run_part zoo "${ZOO_S:-300}" python3 benchmarks/zoo_bench.py run --device cuda --out "$W/zoo" --commit "$commit"
      ;;
    gputests)
      run_part gputests "${GPUTESTS_S:-420}" python3 -m pytest -m gpu -q -rA -o addopts="" -p no:cacheprovider --durations=20 tests
      ;;
    repeat)
      r=${REPEAT_S:-420}; more=(); [ -e "$W/repeat/repeat_bench.json" ] && more=(--resume)
      run_part repeat "$r" python3 benchmarks/repeat_bench.py --out "$W/repeat" --device cuda --n 10 --commit "$commit" \
        --deadline-s $((r - 60)) "${more[@]}"
      ;;
    tail)
      run_part tail "${TAIL_S:-240}" python3 benchmarks/tail_bench.py --out "$W/tail" --commit "$commit" \
        --variants plain,fork,fork+spin,fork+pin --processes 5 --lengths 0,100,300,1000 --gap-s 3
      ;;
    *) say "unknown part $part (known: suite bench zoo gputests repeat tail)"; exit 2 ;;
  esac
done
tag=$(echo "$parts" | tr ' ' '-')
tar czf "$out/i32_$tag.tgz" --exclude='*/cache' --exclude='*/builds' --exclude='*/torch_extensions' --exclude='*/triton_cache' "$W"
say "packed $(du -h "$out/i32_$tag.tgz" | cut -f1) into i32_$tag.tgz"
