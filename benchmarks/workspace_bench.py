"""Workspaces on a real device, through the command line only (`kernelwright workspace init`,
`kernelwright check`, `kernelwright workspace history`), each command in a subprocess as a coding
agent would run it.

    PYTHONPATH=src python3 benchmarks/workspace_bench.py --out DIR --commit SHA [--sections concurrency,checks]
        [--repeats 3] [--workspace WS --store STORE --candidates FILE ...]

- concurrency: two workspaces (examples/DEVICE/softmax and examples/DEVICE/layernorm, with the
  examples' candidates) are checked alone, one after the other, `--repeats` times; then both at
  once, `--repeats` times; then both at once with the device lock off (KERNELWRIGHT_GPU_LOCK=off),
  to show what the lock prevents. A warm-up check of each (which measures and caches the baselines
  and fills the build cache) comes first and is not counted. Reported: the candidate's median time
  of every check, and per workspace the ratio of the median concurrent time to the median time alone.
- contrast: softmax checked alone, then while layernorm is checked over and over in the background,
  with the lock and with it off (KERNELWRIGHT_GPU_LOCK=off).
- cuda_agent: a CUDA Agent-layout workdir (model.py, model_new.py importing cuda_extension,
  binding.cpp, kernels/rowsum.cu) made here, imported with `workspace import`, and checked.
- final: `check --final` (fresh seeds, baselines timed beside it, compute-sanitizer) on the fastest
  correct timed check of WS so far, its files taken from the store.
- checks: in the workspace WS, for each FILE in order: copy it to WS/model_new.py (a FILE whose
  name ends in `.quick.py` is checked with --quick, `.final.py` with --final), run `kernelwright
  check`, keep its report; then `kernelwright workspace history --json`. The candidates are written
  by an engineer acting as the coding agent between calls to this script; the store travels between
  calls (DIR/store.sqlite back, --store in).

Writes DIR/workspace_bench.json (rows with provenance, every report), DIR/console.log and
DIR/store.sqlite (a copy of the checks' store). Prints a short table last.
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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

PAIR = ("softmax", "layernorm")  # the concurrency section's workspaces, from examples/DEVICE/


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src"), **(extra or {})}


def _start(args: list[str], log: Path, extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, float, list[str]]:
    cmd = [sys.executable, "-m", "kernelwright", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(extra_env))
    return proc, time.monotonic(), args


def _finish(started: tuple[subprocess.Popen, float, list[str]], log: Path, timeout_s: float = 400) -> dict[str, Any]:
    proc, t0, args = started
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    wall = time.monotonic() - t0
    with log.open("a") as f:
        f.write(f"$ kernelwright {' '.join(args)}  (exit {proc.returncode}, {wall:.1f} s)\n{err}\n")
    try:
        data = json.loads(out)
    except ValueError:
        data = {"stdout": out[-3000:]}
    return {"exit": proc.returncode, "wall_s": round(wall, 2), "data": data}


def _cli(args: list[str], log: Path, extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    return _finish(_start(args, log, extra_env), log)


def _row(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of one check."""
    v = (result["data"].get("verdict") or {})
    timing = v.get("timing") or {}
    return {"exit": result["exit"], "wall_s": result["wall_s"], "status": result["data"].get("status"),
            "check": result["data"].get("check"), "runtime_ms": v.get("runtime_ms"), "iqr_ms": timing.get("iqr_ms"),
            "n": timing.get("n"), "eager_ms": v.get("eager_ms"), "compile_ms": v.get("compile_ms"),
            "baseline_source": v.get("baseline_source"), "speedup_vs_best": v.get("speedup_vs_best")}


# -- concurrency ------------------------------------------------------------------------------------


def _make_pair(scratch: Path, device: str, log: Path) -> dict[str, Path]:
    roots = {}
    for name in PAIR:
        ex = ROOT / "examples" / device / name
        root = scratch / name
        shutil.rmtree(root, ignore_errors=True)
        res = _cli(["workspace", "init", str(ex / "problem.py"), str(root), "--device", device, "--timing-budget-s", "5",
                    "--baselines", "skip", "--no-compile-baseline", "--json"], log)  # the candidate's own time is what is compared
        assert res["exit"] == 0, res
        (root / "model_new.py").unlink()
        shutil.copyfile(ex / "model_new.py", root / "model_new.py")
        if (ex / "kernels").is_dir():
            shutil.rmtree(root / "kernels")
            shutil.copytree(ex / "kernels", root / "kernels")
        roots[name] = root
    return roots


def _check_args(root: Path, store: Path) -> list[str]:
    return ["check", "-C", str(root), "--store", str(store), "--no-ncu", "--json", "-q"]


def concurrency(a: argparse.Namespace, scratch: Path, log: Path) -> dict[str, Any]:
    store = scratch / "concurrency.sqlite"
    roots = _make_pair(scratch, a.device, log)
    out: dict[str, Any] = {"warmup": {}, "alone": {n: [] for n in PAIR}, "together": {n: [] for n in PAIR},
                           "together_lock_off": {n: [] for n in PAIR}}
    for name, root in roots.items():
        out["warmup"][name] = _row(_cli(_check_args(root, store), log))
        print(f"warm-up {name}: {out['warmup'][name]}", flush=True)
    for r in range(a.repeats):
        for name, root in roots.items():
            out["alone"][name].append(_row(_cli(_check_args(root, store), log)))
        print(f"alone {r}: " + ", ".join(f"{n} {out['alone'][n][-1]['runtime_ms']}" for n in PAIR), flush=True)
    for key, env in (("together", None), ("together_lock_off", {"KERNELWRIGHT_GPU_LOCK": "off"})):
        for r in range(a.repeats if key == "together" else a.repeats_off):
            started = {n: _start(_check_args(root, store), log, env) for n, root in roots.items()}
            for name in PAIR:
                out[key][name].append(_row(_finish(started[name], log)))
            print(f"{key} {r}: " + ", ".join(f"{n} {out[key][n][-1]['runtime_ms']}" for n in PAIR), flush=True)
    out["summary"] = _concurrency_summary(out)
    return out


def _median(rows: list[dict[str, Any]]) -> float | None:
    times = [r["runtime_ms"] for r in rows if r.get("runtime_ms")]
    return statistics.median(times) if times else None


def _concurrency_summary(out: dict[str, Any]) -> dict[str, Any]:
    summary = {}
    for name in PAIR:
        alone = _median(out["alone"][name])
        row: dict[str, Any] = {"alone_median_ms": alone, "alone_all_ms": [r["runtime_ms"] for r in out["alone"][name]]}
        for key in ("together", "together_lock_off"):
            med = _median(out[key][name])
            row[f"{key}_median_ms"] = med
            row[f"{key}_all_ms"] = [r["runtime_ms"] for r in out[key][name]]
            row[f"{key}_ratio"] = round(med / alone, 4) if med and alone else None
            row[f"{key}_worst_ratio"] = (round(max(abs(t / alone - 1) for t in row[f"{key}_all_ms"] if t) + 1, 4)
                                         if alone and any(row[f"{key}_all_ms"]) else None)
        row["within_3pct"] = row["together_ratio"] is not None and abs(row["together_ratio"] - 1) <= 0.03
        summary[name] = row
    return summary


# -- checks -----------------------------------------------------------------------------------------


def checks(a: argparse.Namespace, log: Path) -> dict[str, Any]:
    root, store = Path(a.workspace).resolve(), Path(a.store).resolve()
    rows = []
    for cand in a.candidates:
        cand = Path(cand)
        shutil.copyfile(cand, root / "model_new.py")
        flags = ["--quick"] if cand.name.endswith(".quick.py") else ["--final"] if cand.name.endswith(".final.py") else []
        res = _cli(["check", "-C", str(root), "--store", str(store), "--json", *flags], log)
        report = _report(root, store, res["data"].get("check"), log)
        rows.append({"candidate": cand.name, "flags": flags, **_row(res), "report": report})
        print(f"\n===== {cand.name} {' '.join(flags)}: exit {res['exit']} in {res['wall_s']} s =====\n{report}", flush=True)
    hist = _cli(["workspace", "history", "-C", str(root), "--store", str(store), "--json"], log)
    return {"workspace": str(root), "rows": rows, "history": hist["data"]}


def contrast(a: argparse.Namespace, scratch: Path, log: Path) -> dict[str, Any]:
    """softmax checked while layernorm is checked over and over in the background, with the device
    lock and without: the background keeps the GPU busy, so the timing phases overlap unless the lock
    keeps them apart."""
    import threading

    store = scratch / "contrast.sqlite"
    roots = _make_pair(scratch, a.device, log)
    out: dict[str, Any] = {"warmup": {n: _row(_cli(_check_args(r, store), log)) for n, r in roots.items()}, "alone": [], "busy_lock_on": [],
                           "busy_lock_off": []}
    out["alone"] = [_row(_cli(_check_args(roots["softmax"], store), log)) for _ in range(a.repeats)]
    for key, env in (("busy_lock_on", None), ("busy_lock_off", {"KERNELWRIGHT_GPU_LOCK": "off"})):
        for _ in range(a.repeats):
            stop = threading.Event()

            def hog(env=env, stop=stop) -> None:
                while not stop.is_set():
                    _cli(_check_args(roots["layernorm"], store), log, env)

            thread = threading.Thread(target=hog, daemon=True)
            thread.start()
            time.sleep(4)  # the background check is past its start-up
            out[key].append(_row(_cli(_check_args(roots["softmax"], store), log, env)))
            stop.set()
            thread.join()
        print(f"{key}: " + ", ".join(str(r["runtime_ms"]) for r in out[key]), flush=True)
    alone = _median(out["alone"])
    out["summary"] = {k: {"median_ms": _median(out[k]), "ratio_to_alone": round(_median(out[k]) / alone, 4) if alone and _median(out[k]) else None,
                          "all_ms": [r["runtime_ms"] for r in out[k]]} for k in ("alone", "busy_lock_on", "busy_lock_off")}
    print(f"contrast: {json.dumps(out['summary'])}", flush=True)
    return out


AGENT_BINDING = """#include <torch/extension.h>
torch::Tensor rowsum_forward(torch::Tensor x);
PYBIND11_MODULE(cuda_extension, m) { m.def("rowsum_forward", &rowsum_forward); }
"""

AGENT_KERNEL = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void rowsum_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
    __shared__ float buf[256];
    const long r = blockIdx.x;
    float s = 0.0f;
    for (long c = threadIdx.x; c < cols; c += blockDim.x) s += x[r * cols + c];
    buf[threadIdx.x] = s;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if (threadIdx.x < o) buf[threadIdx.x] += buf[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) y[r] = buf[0];
}

torch::Tensor rowsum_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty({xc.size(0)}, xc.options());
    if (xc.size(0) > 0)
        rowsum_kernel<<<xc.size(0), 256, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), xc.size(1));
    return y;
}
"""

AGENT_MODEL_NEW = """import torch
import cuda_extension


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return cuda_extension.rowsum_forward(x)
"""


def cuda_agent(a: argparse.Namespace, scratch: Path, log: Path) -> dict[str, Any]:
    """A CUDA Agent-layout workdir with a .cu kernel and a pybind binding, imported and checked on the device."""
    wd = scratch / "agent_workdir"
    shutil.rmtree(wd, ignore_errors=True)
    shutil.rmtree(scratch / "imported", ignore_errors=True)
    (wd / "kernels").mkdir(parents=True)
    shutil.copyfile(ROOT / "tests" / "fixtures" / "problems" / "rowsum.py", wd / "model.py")
    (wd / "model_new.py").write_text(AGENT_MODEL_NEW)
    (wd / "binding.cpp").write_text(AGENT_BINDING)
    (wd / "kernels" / "rowsum.cu").write_text(AGENT_KERNEL)
    store = scratch / "agent.sqlite"
    made = _cli(["workspace", "import", str(wd), str(scratch / "imported"), "--device", a.device, "--no-compile-baseline", "--json"], log)
    res = _cli(["check", "-C", str(scratch / "imported"), "--store", str(store), "--no-ncu", "--json"], log)
    report = _report(scratch / "imported", store, res["data"].get("check"), log)
    print(f"\n===== CUDA Agent workdir imported (exit {made['exit']}), checked: exit {res['exit']} in {res['wall_s']} s =====\n{report}", flush=True)
    return {"import_exit": made["exit"], **_row(res), "build": res["data"].get("build"), "report": report}


def final(a: argparse.Namespace, log: Path) -> dict[str, Any]:
    """`check --final` on the fastest correct timed check of the workspace so far (its files from the store)."""
    from kernelwright.store import Store

    root, store = Path(a.workspace).resolve(), Path(a.store).resolve()
    hist = _cli(["workspace", "history", "-C", str(root), "--store", str(store), "--json"], log)["data"]
    timed = [r for r in hist.get("checks", []) if r["status"] == "correct" and r.get("speedup_vs_best")]
    if not timed:
        return {"skipped": "no correct timed check yet"}
    best = max(timed, key=lambda r: r["speedup_vs_best"])
    with Store.open(store) as db:
        files = db.get_candidate_files(best["candidate_hash"])
    (root / "model_new.py").write_text(files["model_new.py"])
    res = _cli(["check", "-C", str(root), "--store", str(store), "--json", "--final", "--sanitize-timeout-s", str(a.sanitize_timeout_s)], log)
    report = _report(root, store, res["data"].get("check"), log)
    print(f"\n===== check --final of check {best['seq']} ({best['candidate_hash'][:12]}): exit {res['exit']} in {res['wall_s']} s =====\n{report}", flush=True)
    sanitizer = ((res["data"].get("verdict") or {}).get("sanitizer") or {})
    return {"of_check": best["seq"], "candidate_hash": best["candidate_hash"], **_row(res), "report": report,
            "sanitizer": {k: sanitizer.get(k) for k in ("ran", "reason", "tools", "total_errors")}}


def _report(root: Path, store: Path, seq: int | None, log: Path) -> str:
    """The check's readable report, as `kernelwright check` printed it, from the history."""
    if seq is None:
        return "(not kept)"
    hist = _cli(["workspace", "history", "-C", str(root), "--store", str(store), "--json"], log)
    for r in hist["data"].get("checks", []):
        if r["seq"] == seq:
            return r["report"]
    return "(not found)"


# -- main -------------------------------------------------------------------------------------------


def provenance(a: argparse.Namespace) -> dict[str, Any]:
    from kernelwright.judge import baseline

    machine = baseline.probe_machine(a.device)
    return {**machine, "python": platform.python_version(), "commit": a.commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(sys.argv)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--commit", default="unknown")
    p.add_argument("--sections", default="concurrency,checks")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--repeats-off", type=int, default=2)
    p.add_argument("--workspace", default=None)
    p.add_argument("--store", default=None)
    p.add_argument("--candidates", nargs="*", default=[])
    p.add_argument("--sanitize-timeout-s", type=float, default=120.0, help="final: compute-sanitizer's limit per tool")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    log = a.out / "console.log"
    scratch = Path(os.environ.get("TMPDIR", "/tmp")) / "kw-workspace-bench"
    scratch.mkdir(parents=True, exist_ok=True)
    os.environ["KERNELWRIGHT_COMMIT"] = a.commit
    prov = provenance(a)
    print(f"machine: {prov.get('gpu')} driver {prov.get('driver')} torch {prov.get('torch')}", flush=True)
    result: dict[str, Any] = {"provenance": prov}
    sections = [s for s in a.sections.split(",") if s]
    for section in sections:  # in the order given; the results are written after each
        if section == "concurrency":
            result["concurrency"] = concurrency(a, scratch, log)
        elif section == "checks":
            result["checks"] = checks(a, log)
        elif section == "final":
            result["final"] = final(a, log)
        elif section == "contrast":
            result["contrast"] = contrast(a, scratch, log)
        elif section == "cuda_agent":
            result["cuda_agent"] = cuda_agent(a, scratch, log)
        else:
            raise SystemExit(f"unknown section {section!r}")
        (a.out / "workspace_bench.json").write_text(json.dumps(result, indent=2))
        if a.store and Path(a.store).is_file():
            shutil.copyfile(a.store, a.out / "store.sqlite")
    _table(result)
    return 0


def _table(result: dict[str, Any]) -> None:
    summary = (result.get("concurrency") or {}).get("summary") or {}
    if summary:
        print("\nworkspace    alone ms   together ms  ratio   lock off ms  ratio   within 3%")
        for name, r in summary.items():
            print(f"{name:12} {r['alone_median_ms'] or 0:9.4f} {r['together_median_ms'] or 0:12.4f} {r['together_ratio'] or 0:6.3f} "
                  f"{r['together_lock_off_median_ms'] or 0:12.4f} {r['together_lock_off_ratio'] or 0:6.3f}   {r['within_3pct']}")
    rows = (result.get("checks") or {}).get("rows") or []
    if rows:
        print("\ncandidate                       exit  status         ms        vs best   wall s")
        for r in rows:
            print(f"{r['candidate']:31} {r['exit']:4}  {str(r['status']):14} {r['runtime_ms'] or 0:9.4f} {r['speedup_vs_best'] or 0:8.3f} {r['wall_s']:8.1f}")


if __name__ == "__main__":
    sys.exit(main())
