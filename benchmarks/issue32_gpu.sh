#!/usr/bin/env bash
# Issue 32's record on the GPU, at one commit, in as many device calls as it takes. Usage (repository
# root, on the GPU machine):
#   KERNELWRIGHT_COMMIT=<commit> PARTS="zoo repeat" bash benchmarks/issue32_gpu.sh OUT_DIR
# Parts, each under its own limit in seconds (the variable beside it), run in the order PARTS names them:
#   suite     eager and torch.compile of every built-in problem at its GPU size, with the degeneracy
#             gate (suite_bench.py; SUITE_S, default 540). A later call goes on with the same store:
#             problems already timed are skipped, gate included;
#   bench     `kernelwright bench` of the shipped solutions in benchmarks/solutions/h200, with the
#             warm-up of their torch.compile baselines (bench_run.py; BENCH_S, 540). A later call
#             resumes from the earlier calls' finished problems (the warm-up runs again);
#   zoo       the zoo's GPU entries, every step on and with the entry's steps off (zoo_bench.py;
#             ZOO_S, 300); resumes;
#   gputests  `pytest -m gpu tests` (GPUTESTS_S, 420);
#   repeat    each shipped CUDA example judged 10 times (repeat_bench.py; REPEAT_S, 420); resumes;
#   tail      the event tail of the GPU machine, as at 8c7dbbd (tail_bench.py; TAIL_S, 240).
# TOTAL_S (default 570, under the device call's 600 s) bounds the whole call: a part whose limit does
# not fit what is left runs under what is left, or not at all under 60 s.
# Work goes to WORK (default out/i32_<commit>). It stays on a warm machine between back-to-back
# calls, or travels as `carry` after being unpacked from an earlier call's tarball. Its stamp (the
# commit and the GPU's name) must match every later call's: one record is one commit on one kind of
# GPU. After each part the work folder's results are packed into OUT_DIR/i32_<parts>.tgz, beside
# OUT_DIR/i32.log; nothing else goes there (the device tool returns at most 8 files).
set -u
out=${1:?OUT_DIR}
commit=${KERNELWRIGHT_COMMIT:?set KERNELWRIGHT_COMMIT to the commit being measured}
parts=${PARTS:?set PARTS, e.g. PARTS="zoo repeat"}
for part in $parts; do
  case $part in suite|bench|zoo|gputests|repeat|tail) ;; *) echo "unknown part $part (known: suite bench zoo gputests repeat tail)" >&2; exit 2 ;; esac
done
W=${WORK:-out/i32_$commit}
export PYTHONPATH=src PYTHONUNBUFFERED=1
start=$(date +%s); total=${TOTAL_S:-570}
mkdir -p "$out" "$W"
log="$out/i32.log"
say() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$log"; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
stamp="$commit on ${gpu:-no GPU}"
if [ -e "$W/stamp" ] && [ "$(cat "$W/stamp")" != "$stamp" ]; then
  say "$W holds $(cat "$W/stamp"), not $stamp: one record is one commit on one kind of GPU; give another WORK"; exit 3
fi
echo "$stamp" > "$W/stamp"
say "$stamp; parts: $parts; work $W; the call's budget ${total} s"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__)"; } >> "$W/host.txt" 2>&1
tag=$(echo "$parts" | tr ' ' '-')

pack() {
  tar czf "$out/i32_$tag.tgz" "$W"
  local bytes; bytes=$(stat -c %s "$out/i32_$tag.tgz")
  local over=""; [ "$bytes" -gt 16000000 ] && over=" (over the device tool's 16 MiB a file: it will not come back)"
  say "packed $W: $bytes bytes$over"
}

quiet_gpu() {  # a killed part may leave judge processes (their own sessions) on the GPU: wait up to 60 s
  local k left
  for k in $(seq 1 30); do
    left=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c .)
    [ "$left" = 0 ] && return 0
    sleep 2
  done
  say "still on the GPU after 60 s: $(nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader | tr '\n' ' ')"
}

fit() {  # a part's limit: its own, or what is left of the call less 25 s for the wait and the packing
  local left=$((total - ($(date +%s) - start) - 25))
  echo $(($1 < left ? $1 : left))
}

run_part() {  # name, limit (from fit), command...: the output to W/<name>_<n>.log, its rc to the log
  local name=$1 limit=$2; shift 2
  if [ "$limit" -lt 60 ]; then say "$name not run: ${limit} s left in this call"; return; fi
  local n=1; while [ -e "$W/${name}_$n.log" ]; do n=$((n + 1)); done
  say "$name (its call $n, limit ${limit} s): $*"
  timeout -k 15 "$limit" "$@" > "$W/${name}_$n.log" 2>&1
  local rc=$? cut=""; [ "$rc" = 124 ] || [ "$rc" = 137 ] && cut=" (cut at its limit)"
  say "$name rc $rc$cut; last lines:"; tail -4 "$W/${name}_$n.log" | cut -c1-300 | tee -a "$log"
  quiet_gpu
  pack
}

for part in $parts; do
  case $part in
    suite)
      s=$(fit "${SUITE_S:-540}"); n=1; while [ -e "$W/suite_$n" ]; do n=$((n + 1)); done
      more=(); [ -e "$W/suite_store.sqlite" ] && more=(--gate-skip-cached)
      run_part suite "$s" python3 benchmarks/suite_bench.py run --out "$W/suite_$n" --store "$W/suite_store.sqlite" \
        --suite builtin:1 --suite builtin:2 --suite builtin:3 --commit "$commit" --jobs 12 --gate-jobs 8 \
        --deadline-s $((s > 130 ? s - 70 : 60)) --budget-s 3 "${more[@]}"
      ;;
    bench)
      more=(); if [ -e "$W/bench/bench.json" ]; then cp "$W/bench/bench.json" "$W/bench_before.json"; more=(--resume-from "$W/bench_before.json"); fi
      only=$(ls benchmarks/solutions/h200 | sed -n 's/\.py$//p' | paste -sd, -)
      run_part bench "$(fit "${BENCH_S:-540}")" python3 benchmarks/bench_run.py --out "$W/bench" --commit "$commit" --suite builtin \
        --solutions benchmarks/solutions/h200 --budget-s 6 --warm-jobs 13 --only "$only" "${more[@]}"
      ;;
    zoo)
      more=(); [ -e "$W/zoo/zoo_cuda.json" ] && more=(--resume)
      run_part zoo "$(fit "${ZOO_S:-300}")" python3 benchmarks/zoo_bench.py run --device cuda --out "$W/zoo" --commit "$commit" "${more[@]}"
      ;;
    gputests)
      run_part gputests "$(fit "${GPUTESTS_S:-420}")" python3 -m pytest -m gpu -q -rA -o addopts="" -p no:cacheprovider --durations=20 tests
      ;;
    repeat)
      r=$(fit "${REPEAT_S:-420}"); more=(); [ -e "$W/repeat/repeat_bench.json" ] && more=(--resume)
      run_part repeat "$r" python3 benchmarks/repeat_bench.py --out "$W/repeat" --device cuda --n 10 --commit "$commit" \
        --deadline-s $((r > 120 ? r - 60 : 60)) "${more[@]}"
      ;;
    tail)
      run_part tail "$(fit "${TAIL_S:-240}")" python3 benchmarks/tail_bench.py --out "$W/tail" --commit "$commit" \
        --variants plain,fork,fork+spin,fork+pin --processes 5 --lengths 0,100,300,1000 --gap-s 3
      ;;
  esac
done
say "done: $parts"
