"""Profiles the agent's `profile` tool shows the model, made in processes of their own.

- `reference_breakdown`: where the reference's time goes (per kernel on the GPU, per operator on
  the CPU), from the torch profiler in a reference child (judge.workers), which runs only the
  problem's code.
- `ncu_metrics`: one forward of the candidate under Nsight Compute (`ncu`), started as
  judge.sanitize starts compute-sanitizer: by judge.sandbox.run_tool, confined by the policy's
  sandbox mode, in a process group of its own with its report in a file of its own: per kernel
  duration, DRAM and SM throughput, achieved occupancy and registers. Clocks are left as they are
  (`--clock-control none`: this project never changes GPU settings). The process it runs is this
  module's `main` (python -m kernelwright.agent.profile PROBLEM CANDIDATE SIZE), which sets up the
  candidate as the sanitizer's target does (judge.sanitize_target.prepared) and brackets one warm
  forward with cudaProfilerStart/Stop so only the candidate's kernels of that forward are
  measured. `parse_ncu_csv` reads ncu's CSV and is tested without a GPU.

This module imports no torch at import time; only `main` (in its own process) does.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelwright.judge import sandbox
from kernelwright.problems import sizes
from kernelwright.problems.loader import Problem

NCU_METRICS = {
    "gpu__time_duration.sum": "duration",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers",
}
_TIME_UNITS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}
DONE = "KW_NCU_DONE"
MAX_KERNELS = 30  # kernels kept in the result


# -- the reference's breakdown ------------------------------------------------------------------


def reference_breakdown(problem: Problem, *, device: str, timeout_s: float = 120, forwards: int = 3, gpu_index: int = 0,
                        size: str = "auto") -> dict[str, Any]:
    """The reference's top 15 kernels (cuda) or operators (cpu) over a few forwards, at the size a
    verdict on `device` would use (problems.sizes):
    {"ran": True, "rows": [[name, total ms, calls, share]], "total_ms", "forwards", "unit"}, or
    {"ran": False, "reason": ...} when the child failed."""
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.gpulock import device_lock
    from kernelwright.judge.workers import Child, ChildConfig, ChildError

    workdir = Path(tempfile.mkdtemp(prefix="kw-agent-profile-"))
    child = None
    try:
        child = Child(ChildConfig(role="reference", device=device, gpu_index=gpu_index, workdir=workdir, env={"KERNELWRIGHT_CACHE": str(cache_dir())}))
        setup = {"problem_path": str(problem.path), "size": sizes.resolve(problem.source, size, device, str(problem.path)), "device": device, "precision": "fp32", "init_seed": 1, "atol": None,
                 "rtol": None, "strict": True}
        with device_lock(device, gpu_index, "shared", what="loading the problem"):
            child.call("setup", setup, timeout_s=timeout_s)
        with device_lock(device, gpu_index, "exclusive", what="profiling the reference"):
            result = child.call("breakdown", {"forwards": forwards}, timeout_s=timeout_s)
        return {"ran": True, **result}
    except ChildError as exc:
        return {"ran": False, "reason": f"the reference child failed: {exc}"[:600]}
    finally:
        if child is not None:
            child.close()
        shutil.rmtree(workdir, ignore_errors=True)


def breakdown_table(result: dict[str, Any]) -> str:
    """The breakdown as a small text table."""
    if not result.get("ran"):
        return f"reference breakdown not available: {result.get('reason', '')}"
    n = result.get("forwards", 1) or 1
    unit = result.get("unit", "kernel")
    lines = [f"reference time by {unit} ({n} forwards, {result.get('total_ms', 0.0) / n:.4g} ms per forward):",
             f"{'share':>6}  {'ms/fwd':>9}  {'calls/fwd':>9}  {unit}"]
    for name, ms, calls, share in result.get("rows", []):
        lines.append(f"{100 * share:5.1f}%  {ms / n:9.4g}  {calls / n:9.3g}  {name}")
    return "\n".join(lines)


# -- Nsight Compute -----------------------------------------------------------------------------


def find_ncu() -> str | None:
    """ncu on PATH, else under the CUDA toolkit."""
    found = shutil.which("ncu")
    if found:
        return found
    for root in filter(None, (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        path = Path(root) / "bin" / "ncu"
        if path.exists():
            return str(path)
    return None


def ncu_metrics(problem: Problem, cand_dir: Path, *, device: str, timeout_s: float = 300, gpu_index: int = 0,
                size: str = "full", sandbox_mode: str = "auto") -> dict[str, Any]:
    """One forward of the candidate under ncu, with the problem at `size` (full or cpu: the size
    its verdict used), confined as the policy's `sandbox_mode` confines the judge's tools
    (judge.sandbox.run_tool, as compute-sanitizer's): {"ran": True, "kernels": [{name,
    duration_ms, dram_pct, sm_pct, occupancy_pct, registers}]}, or {"ran": False, "reason": ...}."""
    if device != "cuda":
        return {"ran": False, "reason": "CPU backend: ncu measures CUDA kernels"}
    refused = sandbox.refusal(sandbox_mode)
    if refused:
        return {"ran": False, "reason": refused}
    exe = find_ncu()
    if exe is None:
        return {"ran": False, "reason": "ncu (Nsight Compute) was not found on PATH or under CUDA_HOME"}
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.gpulock import device_lock
    from kernelwright.judge.workers import absolute_pythonpath, physical_gpu

    env = {**absolute_pythonpath(sandbox.clean_env(os.environ)), "CUDA_VISIBLE_DEVICES": physical_gpu(gpu_index), "KERNELWRIGHT_CACHE": str(cache_dir()),
           "PYTHONUNBUFFERED": "1", **_extension_env(Path(cand_dir))}
    with device_lock(device, gpu_index, "exclusive", what="running ncu"):  # ncu measures durations
        return _run_ncu(exe, Path(problem.path), Path(cand_dir).resolve(), env, timeout_s, size, sandbox_mode)


def _extension_env(cand: Path) -> dict[str, str]:
    """For a torch-extension candidate, the extension folder the judge built it in (judge.extension),
    so the forward under ncu loads that build instead of building again."""
    from kernelwright.judge import extension
    from kernelwright.judge.candidate import CandidateSyntaxError, discover
    from kernelwright.core.records import BuildPath

    try:
        files = discover(cand)
    except (CandidateSyntaxError, ValueError, OSError):
        return {}
    if files.build_path != BuildPath.TORCH_EXTENSION:
        return {}
    return extension.env(files.hash)


def _run_ncu(exe: str, problem: Path, cand_dir: Path, env: dict[str, str], timeout_s: float, size: str, mode: str) -> dict[str, Any]:
    """Run ncu on this module's main in a temporary folder; parse the report it wrote."""
    with tempfile.TemporaryDirectory(prefix="kw-ncu-") as tmp:
        report, output = Path(tmp) / "report.csv", Path(tmp) / "output.txt"
        cmd = [exe, "--csv", "--clock-control", "none", "--profile-from-start", "off", "--metrics", ",".join(NCU_METRICS), "--log-file", str(report),
               sys.executable, "-m", "kernelwright.agent.profile", str(problem), str(cand_dir), size]
        t0 = time.perf_counter()
        try:
            read = [str(problem), str(cand_dir), env["KERNELWRIGHT_CACHE"]]
            ext = [env["TORCH_EXTENSIONS_DIR"]] if "TORCH_EXTENSIONS_DIR" in env else []
            timed_out, printed = sandbox.run_tool(cmd, mode=mode, cwd=Path(tmp), output=output, timeout_s=timeout_s, env=env, read=read,
                                                  write=ext, profiler=True)
        except OSError as exc:
            return {"ran": False, "reason": f"could not start ncu: {exc}"}
        text = sandbox.read_regular(report)  # written inside the sandbox: never through a link left there
        kernels = parse_ncu_csv(text)
        result: dict[str, Any] = {"ran": True, "kernels": kernels, "seconds": round(time.perf_counter() - t0, 1)}
        if timed_out:
            result["note"] = f"stopped after {timeout_s:g} s"
        elif DONE not in printed:
            tail = [ln for ln in printed.splitlines() if ln.strip() and not ln.startswith("==")][-3:]
            result["note"] = "the forward did not complete: " + " | ".join(tail)[-400:]
        elif not kernels:
            result["note"] = "ncu reported no kernels (" + " | ".join(text.strip().splitlines()[-2:])[-300:] + ")"
        return result


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Per kernel launch, from ncu's --csv output (one row per metric: "ID", "Kernel Name",
    "Metric Name", "Metric Unit", "Metric Value"); lines before the header (ncu's own ==PROF==
    lines) are skipped. Durations in ms, throughputs and occupancy in %."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    kernels: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[start:]))):
        metric = NCU_METRICS.get(row.get("Metric Name") or "")
        if metric is None:
            continue
        launch = kernels.setdefault(row.get("ID") or str(len(kernels)), {"name": (row.get("Kernel Name") or "?")[:200]})
        value = _number(row.get("Metric Value"))
        if metric == "duration":
            launch["duration_ms"] = None if value is None else value * _TIME_UNITS.get((row.get("Metric Unit") or "").strip(), 1e-6)
        else:
            launch[metric] = value
    return list(kernels.values())[:MAX_KERNELS]


def _number(text: str | None) -> float | None:
    """ncu's number text ('1,234.5', 'n/a') as a float, or None."""
    try:
        return float((text or "").replace(",", "").strip())
    except ValueError:
        return None


def ncu_table(result: dict[str, Any]) -> str:
    """ncu's figures as a small text table."""
    if not result.get("ran"):
        return f"ncu: not run ({result.get('reason', '')})"
    lines = ["ncu, one forward (per kernel launch):", f"{'ms':>9}  {'DRAM%':>6}  {'SM%':>6}  {'occ%':>6}  {'regs':>5}  kernel"]
    for k in result.get("kernels", []):
        lines.append(f"{_fmt(k.get('duration_ms'), '9.4g')}  {_fmt(k.get('dram_pct'), '6.1f')}  {_fmt(k.get('sm_pct'), '6.1f')}  "
                     f"{_fmt(k.get('occupancy_pct'), '6.1f')}  {_fmt(k.get('registers'), '5.0f')}  {k.get('name')}")
    if result.get("note"):
        lines.append(f"note: {result['note']}")
    return "\n".join(lines)


def _fmt(value: float | None, spec: str) -> str:
    width = int(spec.split(".")[0])
    return "n/a".rjust(width) if value is None else format(value, spec)


# -- the process ncu profiles -------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """One warm forward, then one forward between cudaProfilerStart and Stop. Runs candidate code:
    only ever in a process of its own, under ncu."""
    import torch

    from kernelwright.judge.sanitize_target import prepared

    model, values = prepared(argv, 1)  # PROBLEM CANDIDATE SIZE: the problem at the verdict's size
    with torch.no_grad():
        model(*values)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        model(*values)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print(DONE, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
