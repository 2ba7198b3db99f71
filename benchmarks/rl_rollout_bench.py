"""Issue 28's throughput figures: `rl rollout` of a scripted policy over problems with known-good
candidates, many episodes at once, on one device.

    PYTHONPATH=src python3 benchmarks/rl_rollout_bench.py --device cuda --episodes 64 --concurrency 4 --out "$OUT"
    PYTHONPATH=src python3 benchmarks/rl_rollout_bench.py --device cpu --episodes 8 --concurrency 2 --out /tmp/rlb   # a dry run
    ... --ray [ADDRESS] [--pool N]   # judged through the judge's pool (issue 29), as `rl rollout --ray`

No LLM is involved: the policy is a scripted OpenAI-compatible server on loopback
(kernelwright.llm.scripted) that, in every episode, writes the problem's shipped solution, calls
verify, then submit. Problems: on cuda the built-in problems with a solution in
benchmarks/solutions/h200 (the first --problems of them), on cpu the examples in examples/cpu.

Figures (rollout_bench.json and .md in --out, with episodes.jsonl.gz, a copy of rollout/episodes.jsonl):
- episodes per hour, over the rollout's wall time;
- the judge's busy fraction: the share of the wall time in which at least one judgement (a tool's
  verify or profile, or a final judgement) was in flight, from the episodes' own timestamps;
- verdict latency inside episodes, p50 and p90, per kind (verify, final), queueing for the device
  included; for finals also split into the wait for the device lock (final_device_wait, from each
  verdict's workers.device_wait_s) and the rest (final_own), and into phases from the verdict's own
  progress messages: final_setup (children, import), final_correctness (the cases),
  final_to_timing (the op audit and the wait for the timing lock), final_timing_setup (the reference
  child's warm-up and torch.compile build), final_timing (the candidate's warm-up, then the
  interleaved timing rounds of candidate, eager and compiled), final_guards (the profile and the timing guards),
  final_after_verdict (after the verdict's message: on CUDA the compute-sanitizer run), with the
  reference's torch.compile seconds (final_reference_compile). Through a judge service
  (KERNELWRIGHT_SERVICE) the episode hears one message per poll: few or no phases; this bench
  judges in process;
- lost episodes: planned minus recorded minus those not started in time (--start-within-s), which
  --resume runs (must be 0); the rewards and milestones.

With --resume, lost episodes, statuses and latencies cover every call's episodes; episodes per hour
and the busy fraction, this call's. A rollout may go on on another machine: copy back
`tar czf state.tgz OUT/rollout OUT/store.sqlite OUT/problems` (OUT relative to the checkout, as
`out/rlb`), unpack it in the next checkout and pass the same --out with --resume (on the GPU
machine's tool, `carry` that folder). Tried on the CPU on 2026-12-07: 2 of 4 episodes in one folder, the
other 2 resumed from the tar in another checkout, 4 recorded once, none lost.
A CPU dry run on 2026-12-06 (the 2-core box), `--device cpu --episodes 8 --concurrency 2`: 8 of 8
correct, none lost, 82 s.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def pairs(device: str, n: int) -> list[tuple[Path, dict[str, str]]]:
    """(problem file, its solution's files) for up to n problems."""
    if device == "cuda":
        from kernelwright.problems.suite import builtin_problem

        out = []
        for sol in sorted((ROOT / "benchmarks" / "solutions" / "h200").glob("*.py"))[:n]:
            out.append((builtin_problem(sol.stem).problem.path, {"model_new.py": sol.read_text()}))
        return out
    return [(d / "problem.py", {str(f.relative_to(d)): f.read_text() for f in sorted(d.rglob("*")) if f.is_file() and f.name != "problem.py"
                                and "__pycache__" not in f.parts})
            for d in sorted((ROOT / "examples" / "cpu").iterdir()) if (d / "problem.py").is_file()][:n]


def script(problems: list[tuple[str, dict[str, str]]], per_problem: int) -> list[dict]:
    """Write the solution's files (matched on the problem's name in the prompt), verify, submit."""
    entries = []
    for name, files in problems:
        writes = [{"name": "write_file", "arguments": {"path": path, "content": text}} for path, text in files.items()]
        entries += [{"when": f"Reference program `{name}`", "tool_calls": writes} for _ in range(per_problem)]
    total = per_problem * len(problems)
    entries += [{"when": r"^wrote \d+ bytes", "tool_calls": [{"name": "verify", "arguments": {}}]} for _ in range(total)]
    entries += [{"tool_calls": [{"name": "submit", "arguments": {"note": "the shipped solution"}}]} for _ in range(total)]
    return entries


def busy_fraction(intervals: list[tuple[float, float]], t0: float, t1: float) -> float:
    """The share of [t0, t1] covered by the union of the intervals."""
    covered, end = 0.0, t0
    for a, b in sorted(intervals):
        a, b = max(a, end), min(b, t1)
        if b > a:
            covered += b - a
            end = b
    return covered / (t1 - t0) if t1 > t0 else 0.0


# where a final verdict's seconds go: the first of its progress messages (env's final["progress"],
# [seconds since the final's last attempt began, message]) starting with each prefix, in order
PHASES = (("setup", "checking correctness"), ("correctness", "correctness cases done"), ("to_timing", "timing "),
          ("timing_setup", "warming up the candidate"), ("timing", "timed "), ("guards", "verdict "))


def final_phases(progress: list, seconds: float | None = None) -> dict[str, float]:
    """Seconds of each phase of one final verdict (those whose start and end were both heard), the
    rest after its `verdict` message when `seconds` (the attempt's) is given (on CUDA the
    compute-sanitizer run), and the reference's torch.compile seconds when a message says them."""
    at: dict[str, float] = {}
    compile_s = None
    for t, msg in progress or []:
        for key, prefix in PHASES:
            if key not in at and str(msg).startswith(prefix):
                at[key] = float(t)
        if compile_s is None and "torch.compile took " in str(msg):  # the first: a retime says it again, from the cache
            try:
                compile_s = float(str(msg).split("torch.compile took ", 1)[1].split(" s", 1)[0])
            except ValueError:
                pass
    out, last = {}, 0.0
    for key, _ in PHASES:
        if key not in at:
            break  # a phase not heard (a refusal before timing): the later ones are not counted
        out[key] = round(at[key] - last, 3)
        last = at[key]
    if seconds is not None and out:
        out["after_verdict" if "guards" in out else "unheard"] = round(max(0.0, seconds - last), 3)
    if compile_s is not None:
        out["reference_compile"] = compile_s
    return out


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timing-budget-s", type=float, default=None, help="the judge's timing budget per verdict (default: the policy's)")
    ap.add_argument("--resume", action="store_true", help="continue the rollout in --out (a second call when one was cut short)")
    ap.add_argument("--start-within-s", type=float, default=None,
                    help="start no episode later than this; the rest stay for --resume (fit a device call's limit, results still written)")
    ap.add_argument("--warm-references", type=int, default=None,
                    help="KERNELWRIGHT_WARM_REFERENCES for this run: idle reference children kept (default: the judge's, 2)")
    ap.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                    help="judge through the pool's Ray backend (client.pool; a local Ray when no address is given), as `rl rollout --ray`")
    ap.add_argument("--pool", type=int, default=None, metavar="N", help="the pool's workers (local processes without --ray)")
    args = ap.parse_args()
    if args.warm_references is not None:  # before the judge is imported: its pool reads it
        os.environ["KERNELWRIGHT_WARM_REFERENCES"] = str(args.warm_references)

    from kernelwright.agent.objective import Objective
    from kernelwright.llm.backend import make_backend
    from kernelwright.llm.scripted import ScriptedServer
    from kernelwright.rl.env import EnvConfig
    from kernelwright.rl.rollout import run_rollout
    from kernelwright.rl.tasks import load_tasks

    found = pairs(args.device, args.problems)
    folder = args.out / "problems"
    folder.mkdir(parents=True, exist_ok=True)
    named = []
    for path, files in found:
        name = path.parent.name if path.stem == "problem" else path.stem
        (folder / f"{name}.py").write_text(path.read_text())
        named.append((name, files))
    tasks = load_tasks(folder, heldout=0.0, device=args.device)
    per = -(-args.episodes // len(tasks))
    objective = Objective(max_turns=6, **({"timing_budget_s": args.timing_budget_s} if args.timing_budget_s else {}))
    pool = None
    if args.ray is not None or args.pool is not None:
        from kernelwright.client.pool import Pool

        pool = Pool("ray" if args.ray is not None else "local", workers=args.pool, device=args.device, address=args.ray or None)
    config = EnvConfig(device=args.device, objective=objective, store=args.out / "store.sqlite", workroot=args.out / "episodes", pool=pool)
    t0 = time.time()
    with ScriptedServer(script(named, per)) as server, contextlib.ExitStack() as stack:
        if pool is not None:
            stack.callback(pool.close)
        backend = make_backend("openai:scripted-policy", base_url=server.url, max_retries=0)
        summary = run_rollout(tasks, backend, config, episodes=args.episodes, concurrency=args.concurrency, out=args.out / "rollout", resume=args.resume,
                              start_within_s=args.start_within_s, progress=lambda row: print(f"[{time.time() - t0:7.1f} s] episode {row['seq']} {row['task']['id']}: "
                                                         f"{row['reward']['value']} ({row['end']})", flush=True))
    t1 = time.time()
    rows = [json.loads(x) for x in (args.out / "rollout" / "episodes.jsonl").read_text().splitlines()]
    spans, lat = [], {"verify": [], "final": []}
    for r in rows:
        for c in r.get("calls", []):
            if c.get("seconds") is not None and c["call"]["name"] in ("verify", "profile"):
                spans.append((c["started"], c["started"] + c["seconds"]))
                lat["verify"].append(c["seconds"])
        f = r.get("final") or {}
        if f.get("seconds") is not None and f.get("verdict"):
            spans.append((f["started"], f["started"] + f["seconds"]))
            lat["final"].append(f["seconds"])
            waits = (f["verdict"].get("workers") or {}).get("device_wait_s")
            if isinstance(waits, dict):  # the final's queueing for the device lock, and the rest: its own work
                lat.setdefault("final_device_wait", []).append(sum(waits.values()))
                lat.setdefault("final_own", []).append(f["seconds"] - sum(waits.values()))
            for key, secs in final_phases(f.get("progress") or [], f["seconds"] - (f.get("progress_from") or 0.0)).items():
                lat.setdefault(f"final_{key}", []).append(secs)
    gpu = ""
    if args.device == "cuda":
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    from kernelwright.report.bench import _commit

    commit = _commit() or "unknown"
    import torch
    result = {
        "provenance": {"commit": commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": args.device, "gpu": gpu,
                       "python": platform.python_version(), "torch": torch.__version__,
                       "warm_references": os.environ.get("KERNELWRIGHT_WARM_REFERENCES"), "command": " ".join(sys.argv),
                       "pool": None if pool is None else {"backend": "ray" if args.ray is not None else "local", "size": pool.size,
                                                          "sent": pool.sent, "replaced": pool.replaced, "retried": pool.retried},
                       "policy": "scripted OpenAI-compatible server on loopback: write the shipped solution, verify, submit"},
        "summary": summary, "planned": args.episodes, "recorded": len({r["seq"] for r in rows}), "not_started": summary["not_started"],
        "lost": args.episodes - len({r["seq"] for r in rows}) - summary["not_started"],  # started and not recorded
        "wall_s": round(t1 - t0, 1), "episodes_per_hour": round(summary["new"] * 3600 / (t1 - t0), 1),  # this call's episodes over its wall
        "judge_busy_fraction": round(busy_fraction(spans, t0, t1), 3),
        "latency_s": {k: {"n": len(v), "p50": pct(v, 0.5), "p90": pct(v, 0.9), "mean": statistics.fmean(v) if v else None} for k, v in lat.items()},
        "reference_children": {k: sum(1 for r in rows if (((r.get("final") or {}).get("verdict") or {}).get("workers") or {}).get("reference") == k)
                               for k in ("new", "warm", None)},  # how each final verdict's reference child came
        "statuses": {s: sum(1 for r in rows if ((r.get("final") or {}).get("verdict") or {}).get("status") == s)
                     for s in {((r.get("final") or {}).get("verdict") or {}).get("status") for r in rows}},
    }
    (args.out / "rollout_bench.json").write_text(json.dumps(result, indent=1, default=str))
    lines = [f"# rl rollout bench ({args.device}, {commit})", "", "```", json.dumps({k: result[k] for k in result if k != "summary"}, indent=1,
                                                                                      default=str), "```"]
    (args.out / "rollout_bench.md").write_text("\n".join(lines) + "\n")
    with gzip.open(args.out / "episodes.jsonl.gz", "wt") as f:  # every recorded episode beside the figures: one folder to copy back
        f.write((args.out / "rollout" / "episodes.jsonl").read_text())
    print(json.dumps({k: result[k] for k in ("recorded", "not_started", "lost", "wall_s", "episodes_per_hour", "judge_busy_fraction", "latency_s", "statuses")}, default=str))
    return 0 if result["lost"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
