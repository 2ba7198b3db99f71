#!/usr/bin/env bash
# The warm judge's figures on the GPU machine, in three calls of under ten minutes each (the
# device runs one command at most 600 s; a machine goes back 30 s after a call, so chain them).
#
#   bash benchmarks/judge_rows.sh 1 COMMIT "$OUT"   # pytest -m gpu; memory_bench (KernelBench level 1 under out/kb)
#   bash benchmarks/judge_rows.sh 2 COMMIT "$OUT"   # served softmax, the KernelBench protocol, throughput
#   bash benchmarks/judge_rows.sh 3 COMMIT "$OUT"   # the fault soak
#
# Each call writes smi.txt and one callN.tgz under OUT (few files come back from a call). COMMIT is
# the commit under test, passed by hand (the machine's copy has no git history). Call 1 needs
# KernelBench's level 1 files at out/kb/KernelBench/level1 (a checkout of the public repository,
# carried to the machine, never committed); without them its memory_bench is skipped, and says so.
set -u
call=${1:?call 1, 2 or 3}
commit=${2:?the commit under test}
out=${3:?an output folder}
case "$call" in 1|2|3) ;; *) echo "judge_rows.sh: call must be 1, 2 or 3, not '$call'" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src
mkdir -p "$out/call$call"
dir=$out/call$call
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  python3 -c "import torch, sys; print(torch.__version__, torch.version.cuda, sys.version.split()[0])"
  echo "commit $commit, call $call"; date -u; } > "$out/smi.txt" 2>&1
cp "$out/smi.txt" "$dir/smi.txt"
worst=0
step() {  # step NAME TIMEOUT_S COMMAND...: run it, its console in NAME.log, say how it ended
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  # SIGINT at the limit: pytest and Python unwind (summaries, atexit: the judge's pools and fork
  # server close); the judge's children live in their own sessions, out of timeout's reach
  timeout -s INT -k 20 "$limit" "$@" > "$dir/$name.log" 2>&1
  local rc=$?
  worst=$((rc > worst ? rc : worst))
  echo "$name: rc $rc in $((SECONDS - t0)) s (limit $limit s)" | tee -a "$dir/steps.txt"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$dir/steps.txt" 2>&1  # anything left on the GPU
}
case "$call" in
  1)
    step gputests 360 python3 -m pytest -m gpu -o addopts="" -p no:xdist -v -rfs --durations=15 tests
    if [ -d out/kb/KernelBench/level1 ]; then
      step memory 150 python3 benchmarks/memory_bench.py --out "$dir/mem" --commit "$commit" --kernelbench out/kb/KernelBench/level1
    else
      echo "memory: not run, out/kb/KernelBench/level1 is missing (carry out/kb)" | tee -a "$dir/steps.txt"
    fi
    ;;
  2)
    step serve 240 python3 benchmarks/warm_bench.py --out "$dir/wa" --commit "$commit" --device cuda \
      --sections baseline,serve,kbprotocol --n-serve 20 --n-serve-co 8 --n-serve-co-torch 4
    step concurrent 340 python3 benchmarks/warm_bench.py --out "$dir/wb" --commit "$commit" --device cuda \
      --sections concurrent --n-concurrent 10 --clients 4
    ;;
  3)
    step soak 575 python3 benchmarks/soak_bench.py --out "$dir/soak" --commit "$commit" --deadline-s 510 --clients 5
    ;;
esac
tail -n 3 "$dir"/*.log 2>/dev/null
tar czf "$out/call$call.tgz" -C "$out" "call$call" && rm -rf "$dir"
exit "$worst"
