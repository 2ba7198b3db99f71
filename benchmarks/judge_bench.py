"""The judge's H200 benchmark: build times, throughput against a KernelBench-style protocol,
repeatability, event time against ncu, and the example kernels' verdicts.

    PYTHONPATH=src python3 benchmarks/judge_bench.py --out DIR [--sections build,throughput,...]

Writes DIR/judge_bench.json (every row with provenance) and DIR/*.log; prints a short table last.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples" / "cuda"
SECTIONS = ("sanity", "build", "throughput", "repeatability", "ncu", "examples", "gputests")


def provenance(commit: str) -> dict:
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    name, _, driver = (smi.splitlines() or [""])[0].partition(",")
    return {
        "gpu": name.strip(), "driver": driver.strip(), "torch": torch.__version__, "cuda": torch.version.cuda,
        "python": sys.version.split()[0], "commit": commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def run(cmd: list[str], log: Path, env: dict | None = None, timeout: float = 600) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)
    dt = time.perf_counter() - t0
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}  [{dt:.2f} s, rc={proc.returncode}]\n{proc.stdout[-20000:]}\n{proc.stderr[-20000:]}\n")
    return dt, proc


def last_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        pass
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{") or line.startswith("["):
            try:
                return json.loads(line)
            except ValueError:
                continue
    start = text.find("{")
    return json.loads(text[start:]) if start >= 0 else None


def sec_sanity(out: Path, rows: list) -> None:
    import torch

    p = torch.cuda.get_device_properties(0)
    rows.append({"section": "sanity", "gpu": p.name, "sms": p.multi_processor_count, "l2_bytes": p.L2_cache_size,
                 "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]})


def sec_build(out: Path, rows: list) -> None:
    """Cold raw build (fresh cache each time) 5x, cached once; load_inline cold in a fresh process."""
    from kernelwright.judge import build
    from kernelwright.judge.candidate import discover

    src = discover(EX / "softmax").sources[0]
    cold = []
    for _ in range(5):
        with tempfile.TemporaryDirectory() as d:
            os.environ["KERNELWRIGHT_CACHE"] = d
            spec = build.BuildSpec(source=src.text, lang=src.lang, name=src.name, arch=None, extra_flags=())
            res = build.build(spec)
            assert res.ok, res.log
            cold.append(res.seconds)
            cached = build.build(spec).seconds
    os.environ.pop("KERNELWRIGHT_CACHE", None)
    rows.append({"section": "build", "what": "raw nvcc, one kernel (softmax)", "cold_s": cold, "cold_median_s": statistics.median(cold), "cached_s": cached})
    with tempfile.TemporaryDirectory() as d:
        base, _ = run([sys.executable, "-c", "import torch, torch.utils.cpp_extension"], out / "build.log")
        t, proc = run([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(EX / 'softmax_load_inline')!r}); import model_new"],
                      out / "build.log", env={"TORCH_EXTENSIONS_DIR": d})
    rows.append({"section": "build", "what": "load_inline, same kernel, fresh process", "cold_s": t, "python_torch_import_s": base, "ok": proc.returncode == 0})


PHASE = re.compile(r"INFO kernelwright\.judge\.evaluate: ([0-9.]+) s: (.*)")


def _ours(problem: Path, cand: Path, log: Path, env: dict, samples: bool = False) -> tuple[float, dict]:
    """One fresh `kernelwright eval` process; its verdict, with the judge's phase start times added,
    and with samples, the timing phase's per-call times (the judge's debug line)."""
    cmd = [sys.executable, "-m", "kernelwright.cli", "eval", str(problem), str(cand), "--device", "cuda", "--baselines", "skip", "--json", "--no-store"]
    t, proc = run(cmd, log, env={**env, "KERNELWRIGHT_LOG": "debug" if samples else "info"})
    verdict = last_json(proc.stdout) or {}
    verdict["_phases"] = [[float(m.group(1)), m.group(2)] for m in PHASE.finditer(proc.stderr)]
    if samples:
        from charge_replay import samples_in_log

        found = samples_in_log(proc.stderr)
        priced = [rec for rec in found if not rec.get("superseded")]  # a window timed again was not priced
        verdict["_samples"] = priced[-1] if priced else None
    return t, verdict


def sec_throughput(out: Path, rows: list) -> None:
    """Seconds per verdict, cold (empty caches) and warm: the KernelBench-style protocol on the
    load_inline candidate against ours on the same kernel through the raw build path. (Ours on the
    load_inline candidate pays the same ~50 s load_inline build when cold: see the build section.)"""
    log = out / "throughput.log"
    prob = EX / "softmax" / "problem.py"
    li = EX / "softmax_load_inline"
    with tempfile.TemporaryDirectory() as d:
        env = {"KERNELWRIGHT_CACHE": d + "/kw", "TORCH_EXTENSIONS_DIR": d + "/kb"}
        for phase in ("cold", "warm"):
            t, proc = run([sys.executable, str(ROOT / "benchmarks" / "kernelbench_protocol.py"), str(prob), str(li / "model_new.py")], log, env=env)
            kb = last_json(proc.stdout) or {}
            t_raw, v_raw = _ours(prob, EX / "softmax", log, env)
            rows.append({"section": "throughput", "phase": phase, "kernelbench_protocol_s": t, "kernelbench_status": kb.get("status"),
                         "kernelbench_runtime_ms": kb.get("runtime_ms") or kb.get("mean_ms"),
                         "ours_raw_s": t_raw, "ours_raw_status": v_raw.get("status"), "ours_raw_build_s": v_raw.get("build_s"),
                         "ratio_raw": t / t_raw, "ours_raw_phases": v_raw.get("_phases"), "ours_raw_timing": v_raw.get("timing"),
                         "note": "ours: full protocol (every correctness case, isolation, poison, adaptive timing, profiler), "
                                 "baselines skipped as KernelBench precomputes them"})


def sec_repeatability(out: Path, rows: list) -> None:
    """One candidate judged 10 times (baselines skipped); the row is rewritten after every verdict."""
    log = out / "repeat.log"
    row = {"section": "repeatability", "candidate": "softmax", "runtime_ms": [], "seconds": []}
    rows.append(row)
    for _ in range(10):
        t, v = _ours(EX / "softmax" / "problem.py", EX / "softmax", log, {}, samples=True)
        if v.get("runtime_ms"):
            row["runtime_ms"].append(v["runtime_ms"])
            row["seconds"].append(t)
            row.setdefault("timing", []).append(v.get("timing"))
            row.setdefault("phases", []).append(v.get("_phases"))
            row.setdefault("samples", []).append(v.get("_samples"))
        times = row["runtime_ms"]
        if times:
            med = statistics.median(times)
            row.update(median_ms=med, spread=(max(times) - min(times)) / med, n=len(times))
            raw = [t["raw_median_ms"] for t in row["timing"] if t and t.get("raw_median_ms")]
            if raw:  # before step harness_overhead's subtraction
                row.update(raw_median_ms=raw, raw_spread=(max(raw) - min(raw)) / statistics.median(raw),
                           overhead_ms=[t.get("overhead_ms") for t in row["timing"] if t])
        (out / "repeat_partial.json").write_text(json.dumps(row, indent=2))


def _kernel_regex(cand: Path) -> str:
    from kernelwright.judge.candidate import discover

    names = set()
    for s in discover(cand).sources:
        text = re.sub(r"__launch_bounds__\s*\([^)]*\)", " ", s.text)
        names.update(re.findall(r"__global__\s+(?:static\s+)?void\s+(\w+)", text))
    return "regex:" + "|".join(sorted(names)) if names else "regex:.*"


def sec_ncu(out: Path, rows: list) -> None:
    log = out / "ncu.log"
    ncu = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    for name in ("softmax", "elementwise_chain", "matmul"):
        prob, cand = EX / name / "problem.py", EX / name / "model_new.py"
        target = [sys.executable, str(ROOT / "benchmarks" / "ncu_target.py"), str(prob), str(cand)]
        _, ev = run(target + ["--events", "--variants", "--runs", "50"], log)
        evj = last_json(ev.stdout) or {}
        # (spin-waiting, --spin, was measured at 840e01e and did not help: benchmarks/results/sync_h200_840e01e.json)
        _, pf = run(target + ["--events", "--runs", "50", "--profile-first"], log)  # after the torch profiler ran in the process
        evj.update({f"profiled_{k}": v for k, v in (last_json(pf.stdout) or {}).items() if k.endswith("_median_ms")})
        event = evj.get("event_median_ms")
        _, proc = run([ncu, "--clock-control", "none", "--csv", "--metrics", "gpu__time_duration.sum", "-k", _kernel_regex(EX / name)] + target + ["--runs", "5"], log)
        durs = _ncu_ms(proc.stdout)
        ncu_ms = statistics.median(durs) if durs else None
        rows.append({"section": "ncu", "candidate": name, "event_median_ms": event, "ncu_median_ms": ncu_ms, "ncu_samples_ms": durs,
                     "event_over_ncu": event / ncu_ms if event and ncu_ms else None, "spin": evj.get("spin"),
                     **{k: v for k, v in evj.items() if k.endswith("_median_ms") and k != "event_median_ms"},
                     **{f"{k[:-10]}_over_ncu": v / ncu_ms for k, v in evj.items() if k.endswith("_median_ms") and k != "event_median_ms" and v and ncu_ms}})


def _ncu_ms(text: str) -> list[float]:
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if not lines:
        return []
    per_launch: dict[str, float] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(row.get("Metric Unit", ""), 1e-6)
        key = row.get("ID", str(len(per_launch)))
        per_launch[key] = per_launch.get(key, 0.0) + float(row["Metric Value"].replace(",", "")) * scale
    # several kernels per forward (e.g. a fallback path) add up per call: group by call order
    return list(per_launch.values())


def sec_examples(out: Path, rows: list) -> None:
    _, proc = run([sys.executable, "-m", "kernelwright.cli", "demo", "--device", "cuda", "--json", "--no-store"], out / "examples.log", timeout=900)
    verdicts = last_json(proc.stdout) or []
    (out / "example_verdicts.json").write_text(json.dumps(verdicts, indent=2))
    for v in verdicts:
        rows.append({"section": "examples", "problem": v["problem"]["name"], "build_path": v["candidate"]["build_path"], "status": v["status"],
                     **{k: v.get(k) for k in ("runtime_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile", "speedup_vs_best",
                                              "floor_ms", "efficiency", "max_abs_error", "build_s")},
                     "iqr_ms": (v.get("timing") or {}).get("iqr_ms"), "n": (v.get("timing") or {}).get("n"), "log": (v.get("log") or "")[:500]})


def sec_gputests(out: Path, rows: list) -> None:
    # the zoo's GPU entries run through benchmarks/zoo_bench.py (one command would not hold both)
    _, proc = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "--ignore=tests/test_zoo.py", "tests"],
                  out / "gputests.log", timeout=600)
    rows.append({"section": "gputests", "rc": proc.returncode, "summary": proc.stdout.strip().splitlines()[-1:] if proc.stdout else []})


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--commit", default=os.environ.get("KW_COMMIT", "unknown"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    prov = provenance(args.commit)
    print(json.dumps(prov), flush=True)
    rows: list[dict] = []
    for name in args.sections.split(","):
        t0 = time.perf_counter()
        try:
            globals()[f"sec_{name}"](args.out, rows)
        except Exception as exc:  # a broken section must not lose the others
            rows.append({"section": name, "error": f"{type(exc).__name__}: {exc}"})
        print(f"[{name}] {time.perf_counter() - t0:.1f} s", flush=True)
        (args.out / "judge_bench.json").write_text(json.dumps([{**r, "provenance": prov} for r in rows], indent=2))
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k not in ("log",)}, default=str)[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
