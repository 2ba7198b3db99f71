#!/usr/bin/env bash
# A newcomer's first hour (issue 26), as a transcript: each command of the issue's "Why", run from
# this checkout on this machine, with its exit code, wall time and the head of its output.
#
#     bash benchmarks/first_hour_transcript.sh OUT [KERNELBENCH_DIR]
#
# Run it in a fresh clone after the install (the README's first line). Writes OUT/transcript.md;
# the store, the caches and every file a command makes stay under OUT. No LLM is involved: the
# demo replays a recording made against the scripted local server, and `optimize --model
# openai:gpt-x` is run with no key on purpose (it must stop before measuring anything).
set -u
OUT=$(realpath -m "${1:?usage: first_hour_transcript.sh OUT [KERNELBENCH_DIR]}")
KB=${2:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT/work"
export KERNELWRIGHT_STORE="$OUT/store.sqlite" KERNELWRIGHT_CACHE="$OUT/cache"
unset OPENAI_API_KEY ANTHROPIC_API_KEY KERNELWRIGHT_API_KEY
KW="python3 -m kernelwright"
MD="$OUT/transcript.md"
{
  echo "# A newcomer's first hour, transcript"
  echo
  echo "commit $(git -C "$ROOT" rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(python3 -c 'import platform; print("Python", platform.python_version())'), torch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo
} > "$MD"

step() {  # step TITLE CWD COMMAND...
  local title=$1 cwd=$2; shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  (cd "$cwd" && "$@") > "$OUT/step.out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  {
    echo "## $title"
    echo
    echo "\`$*\` (in \`${cwd#"$OUT"/}\`): exit $rc, $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
    echo
    echo '```'
    head -c 2500 "$OUT/step.out"
    echo
    echo '```'
    echo
  } >> "$MD"
  echo "$title: exit $rc" >&2
}

W="$OUT/work"
cp -r "$ROOT/examples" "$W/examples"
printf 'import torch\ndef f(:\n' > "$W/syntax.py"
: > "$W/empty.py"
printf 'import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n\n    def forward(self, x):\n        return x\n' > "$W/ctor.py"
P=examples/cpu/softmax/problem.py

step "The README's first command (after the install)" "$W" $KW optimize --demo --out "$OUT/demo"
step "The version" "$W" $KW --version
step "eval: a syntax error" "$W" $KW eval $P syntax.py
step "eval: an empty file" "$W" $KW eval $P empty.py
step "eval: a constructor the inputs cannot fit, exit status for scripts" "$W" $KW eval $P ctor.py --exit-status
step "problems check on a built-in problem (CPU size)" "$W" $KW problems check builtin:cumsum_reverse_time
step "A workspace and check --quick" "$W" $KW workspace init builtin:cumsum_reverse_time ws
step "check --quick in it (the template is refused: exit 6)" "$W/ws" $KW check --quick
step "optimize with no API key" "$W" $KW optimize builtin:softmax_with_temperature --model openai:gpt-x
step "runs list" "$W" $KW runs list
RUN=$(python3 -c "import json,sys; print(json.load(open('$OUT/demo/run.json'))['run_id'])" 2>/dev/null || echo none)
step "runs show of the demo's run" "$W" $KW runs show "$RUN"
step "resume of the finished demo run" "$W" $KW resume "$RUN"
step "synth --n 5" "$W" $KW synth --n 5 --out "$OUT/synth"
step "The shipped examples as a suite" "$W" $KW bench --suite examples/cpu -o "$OUT/bench.json"
if [ -n "$KB" ]; then
  step "problems list of a KernelBench checkout (cold)" "$W" $KW problems list --suite "kernelbench:$KB"
  step "... again (warm)" "$W" $KW problems list --suite "kernelbench:$KB"
fi
echo "wrote $MD" >&2
