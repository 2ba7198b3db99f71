"""CPU figures the docs quote, measured again with provenance (issue 32: every figure in the docs
comes from benchmarks/results/ or names its commit).

    PYTHONPATH=src python3 benchmarks/doc_figures_cpu.py --out DIR [--runs 5] [--commit SHA]

The docs quote these as ratios against an anchor measured in the same run (STYLE 14: absolute
times come from the GPU machine only); the seconds are kept for the record. Sections, each over
--runs fresh processes (median and every run):
- `early_refusals`: the wall time of `kernelwright eval --device cpu --no-store` for a candidate
  with a syntax error, an empty model_new.py, and a ModelNew whose constructor cannot take the
  problem's init inputs (README.md, "Using it", and docs/judge.md, "eval"). The whole command is
  timed: the interpreter's start and kernelwright's imports (that the judge's process imports no
  torch for these is inferred from the times, not checked). Anchor: the same command judging the example's honest candidate (a full verdict),
  one per round after the round's refusals, after one untimed verdict; ratios per round.
- `dynamo_import`: `import torch._dynamo` in a fresh interpreter after `import torch`; anchor:
  that `import torch` in the same process (docs/judge.md, the fork server).
- `synth_fresh_worker`: `kernelwright synth --n N --device cpu --workers 1` (the rule composer's
  tasks: one worker reused for every job), and `synth --from` that run's folder (the same tasks,
  each job in a fresh worker; docs/synth.md). Per run, the compile stage's worker seconds per
  candidate both ways, the other stages' too, and the paired difference; the two runs' reports are
  copied to DIR. Each run's first job pays a fresh worker both ways, so N (--synth-n, default 12)
  dilutes that.

- `precision_units` (docs/judge.md, the precision step): relative L2 errors from a float64 oracle,
  in units of eps32 = 2^-23, of fp32 matrix products (randn, 256 x K by K x 256 for several K and
  seeds) whose operands are first rounded to fp16, TF32 (10 mantissa bits, rounded to nearest) or
  bf16 and then multiplied exactly (in float64: the rounding of the operands alone), of torch's own
  fp32 product, and of 64 row sums of n randn terms added one after another in fp32 (each partial
  sum rounded to fp32), against sqrt(n). These are ratios of errors; no time.
- `socket_buffers` (docs/judge.md, what the memory watch cannot count): a thousand unix socket
  pairs, each filled both ways until a send would block; the drop in the machine's MemAvailable and the
  growth of this process's RSS, with the kernel's default buffer sizes; --runs times, closed between.
- `watch_look` (docs/judge.md, the watch): one look of the judge's memory and disk watch
  (`judge.quota.look`) at a Python process that imported torch (as a candidate child has), with 90
  idle processes started beside it, as a share of
  the watch's interval (`judge.quota.WATCH_S`); the seconds are kept for the record.

--sections picks some of them (default: all). Writes DIR/doc_figures_cpu.json. Nothing here needs a
GPU; run it on a quiet machine (the load average before and after is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBLEM = ROOT / "examples" / "cpu" / "elementwise_chain" / "problem.py"
HONEST = PROBLEM.parent  # the example's own candidate folder (model_new.py and kernels/)

CANDIDATES = {
    "syntax_error": "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n",
    "empty_file": "",
    "wrong_constructor": ("import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
                          "    def __init__(self, a, b, c, d, e, f, g):\n        super().__init__()\n\n"
                          "    def forward(self, x):\n        return x\n"),
}


def _commit(given: str) -> str:
    if given != "unknown":
        return given
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return out.stdout.strip() or given


def _tree_changed() -> bool | None:
    """Whether the working tree differs from the commit recorded (None outside a git checkout)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT)
    return bool(out.stdout.strip()) if out.returncode == 0 else None


def _env() -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=_env(), timeout=300)
    return time.perf_counter() - t0, done


def _eval(cand: Path) -> list[str]:
    return [sys.executable, "-m", "kernelwright", "eval", str(PROBLEM), str(cand), "--device", "cpu", "--no-store"]


def early_refusals(runs: int) -> dict:
    secs: dict[str, list[float]] = {name: [] for name in CANDIDATES}
    statuses: dict[str, set[str]] = {name: set() for name in CANDIDATES}
    reasons: dict[str, set[str]] = {name: set() for name in CANDIDATES}
    anchor: list[float] = []
    honest: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in CANDIDATES.items():
            (Path(tmp) / name).mkdir()
            (Path(tmp) / name / "model_new.py").write_text(text)
        _timed(_eval(HONEST), Path(tmp))  # untimed: the first verdict also fills caches the later ones find
        for i in range(runs):  # each round: the three refusals, then the anchor
            for name in CANDIDATES:
                took, done = _timed(_eval(Path(tmp) / name), Path(tmp))
                first = (done.stdout.strip().splitlines() or [f"exit {done.returncode}: {done.stderr.strip()[-200:]}"])[0]
                statuses[name].add(first.split(":")[0])  # eval's first line: the status and its reason
                reasons[name].add(first.replace(tmp, "TMP")[:300])
                secs[name].append(round(took, 3))
                print(f"[early_refusals] {name} run {i + 1}/{runs}: {took:.2f} s, {first.split(':')[0]}", flush=True)
            took, done = _timed(_eval(HONEST), Path(tmp))
            anchor.append(round(took, 3))
            honest.add((done.stdout.strip().splitlines() or [f"exit {done.returncode}"])[0].split(":")[0])
            print(f"[early_refusals] anchor run {i + 1}/{runs}: {took:.2f} s", flush=True)
    med = statistics.median(anchor)
    rows = {}
    for name in CANDIDATES:
        ratios = [round(s / a, 4) for s, a in zip(secs[name], anchor)]  # each refusal against its own round's anchor
        rows[name] = {"median_s": round(statistics.median(secs[name]), 3), "runs_s": secs[name], "statuses": sorted(statuses[name]),
                      "reasons": sorted(reasons[name]), "ratio_to_full_verdict": {"median": statistics.median(ratios), "runs": ratios}}
    return {"refusals": rows, "anchor": {"what": "the same command judging the example's own candidate (a full verdict)", "median_s": round(med, 3),
                                         "runs_s": anchor, "statuses": sorted(honest)}}


def dynamo_import(runs: int) -> dict:
    code = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); import torch._dynamo; "
            "print(t1 - t0, time.perf_counter() - t1)")
    secs, anchor = [], []
    for i in range(runs):
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=300, check=True)
        torch_s, dynamo_s = (float(x) for x in done.stdout.strip().splitlines()[-1].split())
        secs.append(round(dynamo_s, 3))
        anchor.append(round(torch_s, 3))
        print(f"[dynamo_import] run {i + 1}/{runs}: import torch {torch_s:.2f} s, then torch._dynamo {dynamo_s:.2f} s", flush=True)
    ratios = [round(d / a, 3) for d, a in zip(secs, anchor)]
    return {"median_s": round(statistics.median(secs), 3), "runs_s": secs,
            "anchor": {"what": "import torch, in the same process before it", "median_s": round(statistics.median(anchor), 3), "runs_s": anchor},
            "ratio_to_torch_import": {"median": statistics.median(ratios), "runs": ratios}}


def synth_fresh_worker(runs: int, n: int, out: Path) -> dict:
    """Per seed: an untimed composer run makes the task set; then the composer run again (same seed,
    same tasks, one reused worker) and `--from` the set (a fresh worker per job), in alternating
    order. Compared: each stage's worker seconds per candidate that entered it."""
    rows = []
    keep = out / "synth_reports"
    keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            common = ["--n", str(n), "--device", "cpu", "--workers", "1", "--json"]
            base = [sys.executable, "-m", "kernelwright", "synth"]
            made, shared, fresh = (Path(tmp) / f"{k}{i}" for k in ("made", "shared", "fresh"))
            cmds = {"made": [*base, "--seed", str(i), "--out", str(made), *common],
                    "shared": [*base, "--seed", str(i), "--out", str(shared), *common],
                    "fresh": [*base, "--seed", str(i), "--from", str(made), "--out", str(fresh), *common]}
            order = ["made", "shared", "fresh"] if i % 2 == 0 else ["made", "fresh", "shared"]
            reports = {}
            for key in order:
                _, done = _timed(cmds[key], Path(tmp))
                if done.returncode:
                    raise RuntimeError(f"synth ({key}) failed: {done.stderr[-600:]}")
                reports[key] = json.loads((Path(tmp) / f"{key}{i}" / "report.json").read_text())
                shutil.copy(Path(tmp) / f"{key}{i}" / "report.json", keep / f"seed{i}_{key}.json")
            stages = {}
            for kind in ("shared", "fresh"):
                for r in reports[kind].get("stages", []):
                    stages.setdefault(r["stage"], {})[kind] = round(r["worker_seconds"] / max(1, r["entered"]), 3)
            comp = stages.get("compile", {})
            row = {"seed": i, "order": order[1:], "candidates": {k: reports[k].get("n_candidates") for k in ("shared", "fresh")},
                   "accepted": {k: reports[k].get("n_accepted") for k in ("shared", "fresh")},
                   "worker_s_per_candidate": stages,
                   "compile_fresh_minus_shared_s": round(comp["fresh"] - comp["shared"], 3) if len(comp) == 2 else None,
                   "compile_fresh_over_shared": round(comp["fresh"] / comp["shared"], 2) if len(comp) == 2 and comp["shared"] else None}
            rows.append(row)
            print(f"[synth_fresh_worker] run {i + 1}/{runs}: {json.dumps(row)}", flush=True)
    diffs = [r["compile_fresh_minus_shared_s"] for r in rows if r["compile_fresh_minus_shared_s"] is not None]
    ratios = [r["compile_fresh_over_shared"] for r in rows if r["compile_fresh_over_shared"] is not None]
    return {"tasks_per_run": n, "runs": rows,
            "compile_fresh_minus_shared_s": {"median": statistics.median(diffs) if diffs else None, "runs": diffs},
            "compile_fresh_over_shared": {"median": statistics.median(ratios) if ratios else None, "runs": ratios}}


EPS32 = 2.0 ** -23
SUM_TERMS = (513, 1 << 16, 1 << 20)  # the term counts judge/guards/precision.py's docstring names


def _round_mantissa(x, bits: int):
    """x (float32) rounded to nearest-even at `bits` explicit mantissa bits (TF32: 10), as float32."""
    import torch

    drop = 23 - bits
    i = x.contiguous().view(torch.int32)
    half, lsb = 1 << (drop - 1), (i >> drop) & 1
    return ((i + half - 1 + lsb) & ~((1 << drop) - 1)).view(torch.float32)


def _rel_l2(got, want) -> float:
    return float((got.double() - want).norm() / want.norm())


def precision_units(runs: int) -> dict:
    import torch

    rows, ks = [], (64, 256, 1024, 4096)
    for seed in range(runs):
        g = torch.Generator().manual_seed(seed)
        for k in ks:
            a, b = torch.randn(256, k, generator=g), torch.randn(k, 256, generator=g)
            oracle = a.double() @ b.double()
            row = {"seed": seed, "k": k, "torch_fp32": _rel_l2(a @ b, oracle) / EPS32}
            for name, r in (("fp16", lambda t: t.half().float()), ("bf16", lambda t: t.bfloat16().float()),
                            ("tf32", lambda t: _round_mantissa(t, 10))):
                row[name] = _rel_l2(r(a).double() @ r(b).double(), oracle) / EPS32
            rows.append(row)
    sums = []
    for n in SUM_TERMS:
        for seed in range(runs):
            x = torch.randn(n, 64, generator=torch.Generator().manual_seed(seed))  # 64 row sums of n terms, x[j] the j-th terms
            acc = torch.zeros(64, dtype=torch.float32)
            for j in range(n):  # one term after another, each partial sum rounded to fp32
                acc = acc + x[j]
            err = _rel_l2(acc, x.double().sum(0)) / EPS32
            sums.append({"n": n, "seed": seed, "eps32": err, "over_sqrt_n": err / n ** 0.5})
    rng = {name: [min(r[name] for r in rows), max(r[name] for r in rows)] for name in ("torch_fp32", "fp16", "tf32", "bf16")}
    return {"products": rows, "range_eps32": rng, "sums": sums,
            "sums_over_sqrt_n": {str(n): statistics.median(s["over_sqrt_n"] for s in sums if s["n"] == n) for n in SUM_TERMS},
            "note": "relative L2 error from the float64 oracle, in eps32 = 2^-23; sums: 64 row sums of n randn terms"}


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def socket_buffers(pairs: int = 1000) -> dict:
    import socket

    sysctl = {}
    for name in ("wmem_default", "rmem_default"):
        try:
            sysctl[name] = int(Path(f"/proc/sys/net/core/{name}").read_text())
        except OSError:
            sysctl[name] = None
    avail0, rss0, held, queued = _meminfo("MemAvailable"), _rss(), [], 0
    chunk = b"\0" * 65536
    try:
        for _ in range(pairs):
            a, b = socket.socketpair()
            held += [a, b]
            for end in (a, b):  # both directions filled
                end.setblocking(False)
                while True:
                    try:
                        queued += end.send(chunk)
                    except BlockingIOError:
                        break
        avail1, rss1 = _meminfo("MemAvailable"), _rss()
    finally:
        for s_ in held:
            s_.close()
    return {"pairs": pairs, "bytes_queued": queued, "mem_available_drop": avail0 - avail1, "rss_growth": rss1 - rss0, "sysctl": sysctl,
            "note": "MemAvailable is the whole machine's: other work moves it too (load recorded in provenance)"}


def watch_look(runs: int, others: int = 90) -> dict:
    from kernelwright.judge import quota

    # the watched process: like a candidate child, a Python process that imported torch (its mappings are what a look reads)
    child = subprocess.Popen([sys.executable, "-c", "import sys, time, torch; print('ready', flush=True); time.sleep(600)"],
                             stdout=subprocess.PIPE, text=True, env=_env())
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(others)]
    try:
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the watched child did not start")
        lim, looks = quota.limits(), []
        with tempfile.TemporaryDirectory() as d:
            for _ in range(max(20, runs * 4)):
                t0 = time.perf_counter()
                reason, _ = quota.look(child.pid, [d], None, lim)
                looks.append(time.perf_counter() - t0)
        n_proc = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
    finally:
        for p in [*procs, child]:
            p.kill()
            p.wait()
    med = statistics.median(looks)
    from kernelwright.judge.quota_usage import maps_readable

    return {"others_started": others, "processes_on_machine": n_proc, "look_s": looks, "median_s": med, "interval_s": quota.WATCH_S,
            "share_of_interval": med / quota.WATCH_S, "reason_last": reason, "euid": os.geteuid(), "maps_readable": maps_readable(),
            "note": "wall time of quota.look, 20 or more looks in this process"}


def _repeated(section, runs: int) -> dict:
    """A one-shot section `runs` times over: every run, and the range of its numeric fields."""
    rows = [section() for _ in range(runs)]
    keys = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {"runs": rows, "range": {k: [min(r[k] for r in rows), max(r[k] for r in rows)] for k in keys}}


SECTIONS = ("early_refusals", "dynamo_import", "synth_fresh_worker", "precision_units", "socket_buffers", "watch_look")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for doc_figures_cpu.json")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per timed figure; seeds for precision_units, rounds for "
                                                         "socket_buffers, a fifth of the looks for watch_look (default 5)")
    ap.add_argument("--synth-n", type=int, default=12, help="tasks per synth run (default 12)")
    ap.add_argument("--commit", default=os.environ.get("KERNELWRIGHT_COMMIT", "unknown"))
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated (default: all): " + ", ".join(SECTIONS))
    args = ap.parse_args(argv)
    sections = [x for x in args.sections.split(",") if x]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        ap.error(f"unknown or no sections: {', '.join(unknown) or args.sections!r} (known: {', '.join(SECTIONS)})")
    if args.runs < 1 or args.synth_n < 1:
        ap.error("--runs and --synth-n must be at least 1")
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "provenance": {"commit": _commit(args.commit), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "python": platform.python_version(), "torch": torch.__version__, "cores": os.cpu_count(),
                       "load_before": os.getloadavg()[0], "tree_changed": _tree_changed(),
                       "command": " ".join([Path(sys.executable).name, *sys.argv]), "pythonpath": os.environ.get("PYTHONPATH", "")},
    }
    run = {"early_refusals": lambda: early_refusals(args.runs), "dynamo_import": lambda: dynamo_import(args.runs),
           "synth_fresh_worker": lambda: synth_fresh_worker(args.runs, args.synth_n, out), "precision_units": lambda: precision_units(args.runs),
           "socket_buffers": lambda: _repeated(socket_buffers, args.runs), "watch_look": lambda: watch_look(args.runs)}
    for name in SECTIONS:
        if name in sections:
            result[name] = run[name]()
    result["provenance"]["load_after"] = os.getloadavg()[0]
    path = out / "doc_figures_cpu.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
