#!/usr/bin/env bash
# The warm judge's figures on the GPU machine, in calls of under ten minutes each (the device runs
# one command at most 600 s; a machine goes back 30 s after a call, so chain them).
#
#   bash benchmarks/judge_rows.sh 1  COMMIT "$OUT"   # pytest -m gpu; memory_bench (KernelBench level 1 under out/kb)
#   bash benchmarks/judge_rows.sh 2  COMMIT "$OUT"   # served softmax, the KernelBench protocol, throughput
#   bash benchmarks/judge_rows.sh 2t COMMIT "$OUT"   # throughput alone, with more time (a slow host)
#   bash benchmarks/judge_rows.sh 1t COMMIT "$OUT"   # memory_bench, then throughput (the rows left when only those two are)
#   bash benchmarks/judge_rows.sh 3  COMMIT "$OUT"   # the fault soak: started in a session of its own, waited for
#   bash benchmarks/judge_rows.sh 3w COMMIT "$OUT"   # the soak again: wait for it, collect it
#
# Each call writes smi.txt and one callN.tgz under OUT (few files come back from a call). COMMIT is
# the commit under test, passed by hand (the machine's copy has no git history). Call 1 needs
# KernelBench's level 1 files at out/kb/KernelBench/level1 (a checkout of the public repository,
# carried to the machine, never committed); without them its memory_bench is skipped, and says so.
#
# The soak (300 verdicts) took 373-423 s on fast hosts up to f8dca61, 757 s of script on a fast
# host at b5d1f88 (where its time went: soak_h200.md), more than one call may run. So call 3 starts it with setsid, which the
# device lets run on between calls until the machine goes back, and waits up to 560 s; if it has
# not finished, the call ends with rc 3 and call 3w (made at once: an idle machine goes back after
# 30 s) waits up to 560 s more and collects it. The soak's own deadline stops it submitting at
# 1000 s. Calls 3 and 3w need the same machine, and a machine goes back after 30 minutes held (and
# a session has 30 minutes of device time): 1, 2, 3 and 3w together do not fit one machine on a
# slow host; when only throughput and the soak are left, run 1t, 3 and 3w.
set -u
call=${1:?call 1, 1t, 2, 2t, 3 or 3w}
commit=${2:?the commit under test}
out=${3:?an output folder}
case "$call" in 1|1t|2|2t|3|3w) ;; *) echo "judge_rows.sh: call must be 1, 1t, 2, 2t, 3 or 3w, not '$call'" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/src
soakdir=/tmp/kw-judge-rows-soak  # outside OUT, which is emptied before each command
wait_s=${JUDGE_ROWS_WAIT_S:-560}  # how long calls 3 and 3w wait for the soak
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
soak_wait() {  # wait up to $1 s for the detached soak; copy what there is; rc 3 while it still runs
  local t0=$SECONDS pid finished=0 dead=0
  while [ $((SECONDS - t0)) -lt "$1" ]; do
    [ -e "$soakdir/rc" ] && break
    pid=$(cat "$soakdir/pid" 2>/dev/null)
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then  # gone: its rc is written, or it died without one
      sleep 1; [ -e "$soakdir/rc" ] || dead=1; break
    fi
    sleep 2
  done
  [ -e "$soakdir/rc" ] && finished=1  # decided before the copy: a soak ending during it is collected by 3w
  cp -r "$soakdir/." "$dir/" 2>/dev/null
  if [ $finished = 1 ]; then
    local rc; rc=$(cat "$soakdir/rc")
    echo "soak: rc $rc, finished $(date -u)" | tee -a "$dir/steps.txt"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "soak: cut at its limit; its service may still run (its own session): check nvidia-smi below" | tee -a "$dir/steps.txt"
    worst=$((rc > worst ? rc : worst))
  elif [ $dead = 1 ]; then
    echo "soak: its process ($pid) is gone without an rc (killed from outside?) $(date -u)" | tee -a "$dir/steps.txt"
    worst=$((2 > worst ? 2 : worst))
  else
    echo "soak: still running after this call's $1 s of waiting ($(date -u)); run call 3w at once" | tee -a "$dir/steps.txt"
    tail -n 2 "$soakdir/soak/soak_bench.log" 2>/dev/null | tee -a "$dir/steps.txt"
    worst=3
  fi
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$dir/steps.txt" 2>&1
}
case "$call" in
  1|1t)
    if [ "$call" = 1 ]; then
      step gputests 360 python3 -m pytest -m gpu -o addopts="" -p no:xdist -v -rfs --durations=15 tests
    fi
    if [ -d out/kb/KernelBench/level1 ]; then
      step memory 150 python3 benchmarks/memory_bench.py --out "$dir/mem" --commit "$commit" --kernelbench out/kb/KernelBench/level1
    else
      echo "memory: not run, out/kb/KernelBench/level1 is missing (carry out/kb)" | tee -a "$dir/steps.txt"
    fi
    if [ "$call" = 1t ]; then
      step concurrent 410 python3 benchmarks/warm_bench.py --out "$dir/wb" --commit "$commit" \
        --device cuda --sections concurrent --n-concurrent 10 --clients 4
    fi
    ;;
  2|2t)
    if [ "$call" = 2 ]; then
      step serve 240 python3 benchmarks/warm_bench.py --out "$dir/wa" --commit "$commit" --device cuda \
        --sections baseline,serve,kbprotocol --n-serve 20 --n-serve-co 8 --n-serve-co-torch 4
    fi
    step concurrent "$([ "$call" = 2 ] && echo 340 || echo 560)" python3 benchmarks/warm_bench.py --out "$dir/wb" --commit "$commit" \
      --device cuda --sections concurrent --n-concurrent 10 --clients 4
    ;;
  3)
    if [ -e "$soakdir/pid" ] && kill -0 "$(cat "$soakdir/pid")" 2>/dev/null; then
      echo "soak: one is already running (pid $(cat "$soakdir/pid")); waiting for it" | tee -a "$dir/steps.txt"
    else
      rm -rf "$soakdir" && mkdir -p "$soakdir"
      cp "$out/smi.txt" "$soakdir/smi_start.txt"
      # its own session: the device ends a call's other processes when the call returns
      setsid bash -c 'echo $$ > "$1/pid"; timeout -s INT -k 30 1100 python3 benchmarks/soak_bench.py --out "$1/soak" \
          --commit "$2" --deadline-s 1000 --clients 5 > "$1/soak.log" 2>&1; echo $? > "$1/rc.tmp"; mv "$1/rc.tmp" "$1/rc"' \
        _ "$soakdir" "$commit" < /dev/null > /dev/null 2>&1 &
      echo "soak: started $(date -u) in $soakdir" | tee -a "$dir/steps.txt"
    fi
    soak_wait "$wait_s"
    ;;
  3w)
    if [ ! -e "$soakdir/pid" ]; then  # a fresh machine: the soak went with the last one
      echo "soak: none on this machine ($soakdir/pid is missing): the machine that ran call 3 went back; run call 3 again" | tee -a "$dir/steps.txt"
      worst=2
    else
      soak_wait "$wait_s"
    fi
    ;;
esac
tail -n 3 "$dir"/*.log 2>/dev/null
tar czf "$out/call$call.tgz" -C "$out" "call$call" && rm -rf "$dir"
exit "$worst"
