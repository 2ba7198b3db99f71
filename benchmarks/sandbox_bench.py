"""The sandbox on the GPU: the zoo contained, the controls correct, the GPU reachable from inside,
and what the sandbox costs a warm verdict.

    PYTHONPATH=src python3 benchmarks/sandbox_bench.py --out DIR [--rounds 10]

1. Sanity: GPU, driver, torch; what `judge.sandbox.support()` finds on this machine.
2. The sandbox zoo (tests/sandbox_zoo.py) on the CUDA backend: each attack's honest part is the
   CUDA ReLU of tests/fixtures/candidates/relu_cuda, judged with `--sandbox auto` and the judge's
   in-process guards off; status, whether a BREACH got out, and what changed outside. The controls:
   relu_cuda and examples/cuda/softmax under auto, strict and off.
3. Latency: one process, warm workers, `--rounds` verdicts of examples/cuda/softmax (timed, no
   torch.compile baseline) in each mode, alternating auto and off so that drift hits both alike;
   wall seconds per verdict, medians and their ratio (auto over off, the issue's bound: 1.05).
4. Profile (part `profile`, not in the default): the same verdicts under cProfile in the judge's
   process, alternating modes; per mode, seconds per verdict in each function (cumulative), and the
   functions whose time differs most between auto and off: where the sandbox's cost goes. Also the
   uid helper's cost alone (`uids.signal_uid` to a uid with no process, when the judge is root).
Writes DIR/sandbox_bench.json and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import sandbox_zoo as zoo  # noqa: E402
from kernelwright.judge import sandbox  # noqa: E402
from kernelwright.judge.evaluate import evaluate  # noqa: E402
from kernelwright.judge.policy import Policy, TimingConfig  # noqa: E402

HONEST_CUDA = (ROOT / "tests" / "fixtures" / "candidates" / "relu_cuda" / "model_new.py").read_text()
SOFTMAX = ROOT / "examples" / "cuda" / "softmax"


def provenance() -> dict[str, Any]:
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    except OSError:
        driver = ""
    return {"gpu": gpu, "driver": driver or None, "torch": torch.__version__, "cuda": torch.version.cuda,
            "python": sys.version.split()[0], "commit": os.environ.get("KERNELWRIGHT_COMMIT") or commit or None,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "command": " ".join(sys.argv)}


def run_zoo(device: str, rows: list[dict[str, Any]], save) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="kw-sandbox-bench-") as tmp:
        world = zoo.World(Path(tmp), lambda k, v: os.environ.__setitem__(k, v))
        try:
            for name in sorted(zoo.ATTACKS):
                t0 = time.perf_counter()
                verdict, text, changed = zoo.judge_attack(world, name, device=device, honest=HONEST_CUDA if device == "cuda" else zoo.HONEST)
                rows.append({"attack": name, "status": verdict.status.value, "breach": "BREACH" in text or zoo.SECRET in text,
                             "changed": changed, "sandbox": verdict.sandbox, "seconds": round(time.perf_counter() - t0, 2),
                             "log": verdict.log[-400:] if verdict.status.value != "correct" else ""})
                print(f"zoo {name}: {rows[-1]['status']} breach={rows[-1]['breach']} changed={changed}", flush=True)
                save()
        finally:
            world.close()
    return rows


def run_controls(device: str, rows: list[dict[str, Any]], save) -> list[dict[str, Any]]:
    controls = [("relu_cuda" if device == "cuda" else "relu_correct", zoo.RELU,
                 ROOT / "tests" / "fixtures" / "candidates" / ("relu_cuda" if device == "cuda" else "relu_correct"))]
    if device == "cuda":
        controls.append(("softmax", SOFTMAX / "problem.py", SOFTMAX))
    for mode in ("auto", "off", "strict"):  # auto first: if time runs out, what matters most is in
        for name, problem, cand in controls:
            pol = Policy(time_candidate=False, compile_baseline=False, baselines="skip", sandbox=mode)
            v = evaluate(problem, cand, pol, device=device)
            rows.append({"control": name, "mode": mode, "status": v.status.value, "sandbox": v.sandbox, "log": v.log[-300:]})
            print(f"control {name} {mode}: {v.status.value} {v.sandbox}", flush=True)
            save()
    return rows


def run_latency(device: str, rounds: int, out: dict[str, Any], save) -> dict[str, Any]:
    timing = TimingConfig(budget_s=3.0)
    walls: dict[str, list[float]] = {"auto": [], "off": []}
    statuses: dict[str, list[str]] = {"auto": [], "off": []}
    problem, cand = (SOFTMAX / "problem.py", SOFTMAX) if device == "cuda" else (zoo.RELU, ROOT / "tests" / "fixtures" / "candidates" / "relu_correct")
    out.update({"problem": str(problem.relative_to(ROOT)), "rounds": rounds, "walls_s": walls, "statuses": statuses})
    for mode in ("auto", "off"):  # warm both modes' workers once, not counted
        evaluate(problem, cand, Policy(compile_baseline=False, timing=timing, sandbox=mode), device=device)
    for i in range(rounds):
        for mode in (("auto", "off") if i % 2 == 0 else ("off", "auto")):
            t0 = time.perf_counter()
            v = evaluate(problem, cand, Policy(compile_baseline=False, timing=timing, sandbox=mode), device=device)
            walls[mode].append(time.perf_counter() - t0)
            statuses[mode].append(v.status.value)
        save()
    med = {m: statistics.median(w) for m, w in walls.items()}
    out.update({"median_s": med, "ratio_auto_over_off": med["auto"] / med["off"]})
    return out


def _per_verdict(stats: Any, n: int) -> dict[str, dict[str, float]]:
    """pstats' table as {"file:line(function)": {calls, tottime, cumtime}}, each per verdict."""
    rows = {}
    for (file, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        rows[f"{Path(file).name}:{line}({func})"] = {"calls": nc / n, "tottime": tt / n, "cumtime": ct / n}
    return rows


def run_profile(device: str, rounds: int, out: dict[str, Any], save) -> dict[str, Any]:
    import cProfile
    import pstats

    from kernelwright.judge import uids

    timing = TimingConfig(budget_s=3.0)
    problem, cand = (SOFTMAX / "problem.py", SOFTMAX) if device == "cuda" else (zoo.RELU, ROOT / "tests" / "fixtures" / "candidates" / "relu_correct")
    if os.getuid() == 0:  # the helper alone: a uid no process has (the signaller of pid 1's uid, never a child's)
        helper = []
        for _ in range(10):
            t0 = time.perf_counter()
            uids.signal_uid(uids.UID_BASE + 1, 0)
            helper.append(time.perf_counter() - t0)
        out["signal_uid_s"] = {"median": statistics.median(helper), "all": helper}
        kept, sent = uids.Signaller(uids.UID_BASE + 1), []  # the kept helper a candidate child gets: a line on its pipe
        try:
            kept.signal(0)  # its start, not counted
            for _ in range(10):
                t0 = time.perf_counter()
                kept.signal(0)
                sent.append(time.perf_counter() - t0)
        finally:
            kept.close()
        out["kept_signaller_s"] = {"median": statistics.median(sent), "all": sent}
        t0 = time.perf_counter()
        for _ in range(10):
            uids.all_stopped(uids.UID_BASE + 1)
        out["all_stopped_s"] = (time.perf_counter() - t0) / 10
        out["proc_entries"] = sum(1 for x in os.listdir("/proc") if x.isdigit())
        from kernelwright.judge import quota

        t0 = time.perf_counter()  # what the watch thread reads of /proc per look, holding the judge's GIL meanwhile
        for _ in range(10):
            quota.processes(os.getpid(), uids.UID_BASE + 1)
        out["watch_processes_s"] = (time.perf_counter() - t0) / 10
    # seccomp may force speculation mitigations (SSBD, STIBP) on a process, which slow its code: a
    # confined process's own account, beside the judge's and the machine's
    with tempfile.TemporaryDirectory(prefix="kw-spec-") as box:
        os.chmod(box, 0o777)
        cmd = ["grep", "-i", "specul", "/proc/self/status"]
        confined = subprocess.run(sandbox.command(sandbox.spec_for("auto"), cmd, box), cwd=box, capture_output=True, text=True, timeout=60)
        out["speculation"] = {"confined": confined.stdout.strip() or confined.stderr.strip()[-300:],
                              "judge": "\n".join(x for x in Path("/proc/self/status").read_text().splitlines() if "peculation" in x),
                              "machine": {f.name: f.read_text().strip() for f in sorted(Path("/sys/devices/system/cpu/vulnerabilities").glob("spec*"))},
                              "kernel": os.uname().release}
    for mode in ("auto", "off"):  # warm both modes' workers once, not counted
        evaluate(problem, cand, Policy(compile_baseline=False, timing=timing, sandbox=mode), device=device)
    stats: dict[str, Any] = {}
    walls: dict[str, list[float]] = {"auto": [], "off": []}
    for i in range(rounds):
        for mode in (("auto", "off") if i % 2 == 0 else ("off", "auto")):
            prof = cProfile.Profile()
            t0 = time.perf_counter()
            prof.enable()
            evaluate(problem, cand, Policy(compile_baseline=False, timing=timing, sandbox=mode), device=device)
            prof.disable()
            walls[mode].append(time.perf_counter() - t0)
            stats[mode] = pstats.Stats(prof) if mode not in stats else stats[mode].add(prof)
        out["walls_s"] = walls
        save()  # the walls so far: a run cut off by its time limit keeps them
    table = {m: _per_verdict(stats[m], rounds) for m in stats}
    keys = set(table["auto"]) | set(table["off"])
    zero = {"calls": 0.0, "tottime": 0.0, "cumtime": 0.0}
    diff = sorted(((k, table["auto"].get(k, zero), table["off"].get(k, zero)) for k in keys),
                  key=lambda r: -abs(r[1]["cumtime"] - r[2]["cumtime"]))
    out.update({"rounds": rounds, "walls_s": walls, "median_s": {m: statistics.median(w) for m, w in walls.items()},
                "top_cumtime": {m: sorted(table[m].items(), key=lambda r: -r[1]["cumtime"])[:40] for m in table},
                "largest_differences": [{"function": k, "auto": a, "off": o} for k, a, o in diff[:40]]})
    save()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--parts", default="zoo,controls,latency",
                    help="which parts, in this order (comma-separated: zoo, controls, latency, profile); the JSON is rewritten after every row")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    sup = sandbox.support()
    result: dict[str, Any] = {"provenance": provenance(), "device": device, "support": {**sup.__dict__, "missing": list(sup.missing())},
                              "socket_families": list(sandbox.socket_families())}
    print(json.dumps(result, default=str), flush=True)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = sorted(set(parts) - {"zoo", "controls", "latency", "profile"})
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}: choose from zoo, controls, latency, profile")

    def save() -> None:  # after every row: a run cut off by its time limit still leaves what it measured
        (args.out / "sandbox_bench.json").write_text(json.dumps(result, indent=1, default=str))

    for part in parts:
        if part in ("latency", "profile"):
            result[part] = {}
            (run_latency if part == "latency" else run_profile)(device, args.rounds, result[part], save)
            if part == "profile":
                prof = result["profile"]
                print(f"profile ({prof['rounds']} rounds): medians auto {prof['median_s']['auto']:.3f} s, off {prof['median_s']['off']:.3f} s; "
                      f"uid helper {prof.get('signal_uid_s', {}).get('median', float('nan')) * 1e3:.1f} ms "
                      f"(kept: {prof.get('kept_signaller_s', {}).get('median', float('nan')) * 1e3:.2f} ms), "
                      f"all_stopped {prof.get('all_stopped_s', float('nan')) * 1e3:.1f} ms, watch's /proc read {prof.get('watch_processes_s', float('nan')) * 1e3:.1f} ms "
                      f"({prof.get('proc_entries')} processes)", flush=True)
                print(f"  speculation: {prof['speculation']}", flush=True)
                for row in prof["largest_differences"][:15]:
                    print(f"  {row['auto']['cumtime'] - row['off']['cumtime']:+.4f} s/verdict  {row['function']}  "
                          f"(auto {row['auto']['cumtime']:.4f}, off {row['off']['cumtime']:.4f}, calls {row['auto']['calls']:.1f}/{row['off']['calls']:.1f})", flush=True)
        else:
            result[part] = []
            (run_zoo if part == "zoo" else run_controls)(device, result[part], save)
    save()
    if not {"zoo", "controls", "latency"} <= set(result):
        return 0
    # contained: nothing got out and nothing outside changed (the fork bomb may starve its own
    # process of threads and end runtime_error: its status is reported beside it)
    contained = sum(1 for r in result["zoo"] if not r["breach"] and not r["changed"])
    lat = result["latency"]
    print(f"\n{result['provenance']['gpu'] or 'cpu'} · commit {result['provenance']['commit']} · sandbox layers {sup.layers('auto')}")
    print(f"zoo: {contained} of {len(result['zoo'])} attacks contained; statuses: " + ", ".join(f"{r['attack']} {r['status']}" for r in result["zoo"]))
    print("controls: " + ", ".join(f"{r['control']}/{r['mode']} {r['status']}" for r in result["controls"]))
    print(f"latency ({lat['rounds']} rounds): auto {lat['median_s']['auto']:.3f} s, off {lat['median_s']['off']:.3f} s, ratio {lat['ratio_auto_over_off']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
