"""Seconds per verdict with warm workers: children forked from the fork server, warm reference
children, against the old process model (every child spawned afresh), on one machine in one run.

    PYTHONPATH=src python3 benchmarks/warm_bench.py --out DIR --commit C [--device cuda] [--sections ...]

Every verdict's row carries the peak GPU memory of all processes on the GPU during it (nvidia-smi
sampled every 50 ms; the judge's processes are the only ones there), against the problem's own
data (inputs and outputs of get_inputs()).

Sections: sanity (machine; the fork server's preload loads no CUDA driver), baseline (the example's
eager and torch.compile times into the work folder's store, so verdicts can take them cached), oneshot (one
`kernelwright eval` process per verdict, spawned and forked children), sequential (verdicts one
after another in one process: spawned children; forked children without warm references or
spares; warm, with spare candidate children; warm correctness-only; the first warm verdict is the
cold reference), protocol (each verdict's
steps, cases, seeds, timed calls and stop rule, spawned against warm), serve (`kernelwright serve`
on a unix socket, verdicts through kernelwright.client.Judge: the first is the cold reference, then
warm and warm correctness-only), concurrent (ten raw candidates of each shipped CUDA example, each
judged alone, then all at once by several clients through that service), memory (each of those
examples judged alone through a service, correctness-only and timed, after `concurrent` cached its
builds and baselines: the peak of the judge's processes against the problem's footprint, with and
without their CUDA contexts, a bare context measured in the same run) and kbprotocol (against
benchmarks/kernelbench_protocol.py on the same kernel, cold and warm). Writes DIR/warm_bench.json
(provenance in it) and DIR/warm_bench.log; prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import hostinfo  # beside this file: on sys.path when run as a script, and where memory_bench and the tests load it
from verdict_phases import milestones, phase_medians

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("sanity", "baseline", "oneshot", "sequential", "protocol", "serve", "concurrent", "memory", "kbprotocol")
MODES = {  # environment of each way of judging
    "spawn": {"KERNELWRIGHT_FORKSERVER": "0", "KERNELWRIGHT_WARM_REFERENCES": "0", "KERNELWRIGHT_SPARE_CHILDREN": "off"},
    "fork": {"KERNELWRIGHT_FORKSERVER": "1", "KERNELWRIGHT_WARM_REFERENCES": "0", "KERNELWRIGHT_SPARE_CHILDREN": "off"},
    # the defaults: two idle reference children, or one per worker in `serve` (an empty value is the
    # default; "2" here, as it was until 2026-12-04, held the service to two whatever its workers)
    "warm": {"KERNELWRIGHT_FORKSERVER": "1", "KERNELWRIGHT_WARM_REFERENCES": "", "KERNELWRIGHT_SPARE_CHILDREN": "auto"},
}


def provenance(a: argparse.Namespace) -> dict[str, Any]:
    gpu = driver = None
    if a.device == "cuda":
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout
        gpu, _, driver = (smi.strip().splitlines() or [""])[0].partition(",")
    import torch

    return {"gpu": (gpu or platform.processor() or "cpu").strip(), "driver": (driver or "").strip() or None, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(), "commit": a.commit, "cpus": os.cpu_count(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv), "host": hostinfo.host()}


def log_line(a: argparse.Namespace, text: str) -> None:
    with open(a.out / "warm_bench.log", "a") as f:
        f.write(text.rstrip() + "\n")
    print(text, file=sys.stderr, flush=True)


def sec_sanity(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    from kernelwright.judge import forkpool

    os.environ.update(MODES["warm"])
    t0 = time.perf_counter()
    srv = forkpool.server()
    ready = srv.wait_ready()
    maps = Path(f"/proc/{srv.pid}/maps").read_text()
    fds = []
    for fd in os.listdir(f"/proc/{srv.pid}/fd"):
        try:
            fds.append(os.readlink(f"/proc/{srv.pid}/fd/{fd}"))
        except OSError:
            pass
    doc["sanity"] = {"fork_server_ready_s": time.perf_counter() - t0, "preload_s": ready.get("preload_s"),
                     "libcuda_mapped_in_fork_server": "libcuda.so" in maps, "torch_in_fork_server": "libtorch" in maps,
                     "nvidia_device_files_open_in_fork_server": [f for f in fds if f.startswith("/dev/nvidia")]}


def sec_baseline(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    cmd = [sys.executable, "-m", "kernelwright", "baseline", "--suite", str(a.problem), "--device", a.device, "--store", str(a.store), "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    log_line(a, f"$ {' '.join(cmd)} [{time.perf_counter() - t0:.1f} s rc={proc.returncode}]\n{proc.stderr[-3000:]}")
    doc["baseline"] = {"rc": proc.returncode, "wall_s": time.perf_counter() - t0, "stdout": proc.stdout[-2000:]}


def _prebuild(a: argparse.Namespace) -> list[dict[str, Any]]:
    """Build the candidate's raw kernels into the cache the service will use (this process's
    KERNELWRIGHT_CACHE, which the service inherits), so the first served verdict is a cold
    reference as the issue defines it (build and baselines cached). Up to e2fbfda the bench did
    not, and that verdict compiled the kernel: its 'building' step took 1.5-1.9 s on the H200."""
    from kernelwright.judge.candidate import discover, prebuild

    t0 = time.perf_counter()
    results = prebuild(discover(a.candidate))
    rows = [{"ok": r.ok, "cached": r.cached, "seconds": round(r.seconds, 3)} for r in results]
    log_line(a, f"prebuild: {len(rows)} raw source(s) in {time.perf_counter() - t0:.2f} s {rows}" if rows else
             "prebuild: no raw kernel sources (a torch extension builds inside the verdict; its first one is not a cached build)")
    if not all(r.ok for r in results):
        raise RuntimeError("the candidate's raw kernels did not build: " + " | ".join(r.log[:500] for r in results if not r.ok))
    return rows


def _seed_baselines(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Store the example's baselines first when section baseline has not run in this work folder:
    the sections below judge with baselines cached, and without them each verdict measures its own
    (a kbprotocol section run alone on the H200 at ba3a1f2 so took 2.2 s a warm verdict, not 1.3)."""
    if "baseline" not in doc:
        sec_baseline(a, doc)


def sec_oneshot(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    rows = []
    for mode in ("spawn", "warm"):
        cmd = [sys.executable, "-m", "kernelwright", "eval", str(a.problem), str(a.candidate), "--device", a.device, "--json",
               "--no-store", "--baselines", "cached", "--store", str(a.store)]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, env={**os.environ, **MODES[mode], "KERNELWRIGHT_LOG": "INFO"})
        wall = time.perf_counter() - t0
        log_line(a, f"$ [{mode}] {' '.join(cmd)} [{wall:.1f} s rc={proc.returncode}]\n{proc.stderr[-4000:]}")
        verdict = _json(proc.stdout)
        rows.append({"mode": mode, "wall_s": wall, "status": verdict.get("status"), "runtime_ms": verdict.get("runtime_ms")})
    doc["oneshot"] = rows


def _json(text: str) -> dict[str, Any]:
    try:
        return json.loads(text)
    except ValueError:
        return {}


def _policy(a: argparse.Namespace, correctness_only: bool) -> Any:
    from kernelwright.judge.policy import Policy

    return Policy(baselines="cached", time_candidate=not correctness_only)


class GpuMemory:
    """Samples the memory of every process on the GPU (nvidia-smi) in a thread: the sum, and each
    process's share named by its role (a judge child's stdout is its `reference.log` or `candidate.log`)."""

    def __init__(self, device: str) -> None:
        import threading

        self.on = device == "cuda"
        self.samples: list[tuple[float, int, dict[str, int]]] = []  # (monotonic s, MiB in all, {role:pid: MiB})
        self._roles: dict[int, str] = {}
        self._stop = threading.Event()
        self.paused = threading.Event()  # set: no nvidia-smi is started (a section that times without it, --quiet-sections)
        self._thread = threading.Thread(target=self._run, daemon=True)
        if self.on:
            self._thread.start()

    def _role(self, pid: int) -> str:
        if pid not in self._roles:
            try:
                self._roles[pid] = Path(os.readlink(f"/proc/{pid}/fd/1")).stem
            except OSError:
                self._roles[pid] = "other"
        return self._roles[pid]

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            if self.paused.is_set():
                continue
            asked = time.monotonic()
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
            except (OSError, subprocess.SubprocessError):
                continue
            each = {}
            for line in out.strip().splitlines():
                pid, _, mib = (x.strip() for x in line.partition(","))
                if pid.isdigit() and mib.isdigit():
                    each[f"{self._role(int(pid))}:{pid}"] = int(mib)
            # dated halfway through the query (tens of ms): nvidia-smi reads somewhere in between
            self.samples.append(((asked + time.monotonic()) / 2, sum(each.values()), each))

    def peak(self, t0: float, t1: float) -> int | None:
        got = [m for t, m, _ in self.samples if t0 <= t <= t1]
        return max(got) if got else None

    def at_peak(self, t0: float, t1: float) -> dict[str, int] | None:
        """Each process's MiB in the sample of the highest sum."""
        got = [(m, e) for t, m, e in self.samples if t0 <= t <= t1]
        return max(got, key=lambda x: x[0])[1] if got else None

    def peak_of(self, t0: float, t1: float, pids: set[int]) -> tuple[int | None, dict[str, int], float | None]:
        """The highest sum over the given processes alone (a verdict's own children), with each
        one's MiB in that sample and when (monotonic s) it was taken: its first sample when the sum
        stays there."""
        best: tuple[int | None, dict[str, int], float | None] = (None, {}, None)
        for t, _, each in self.samples:
            if t0 <= t <= t1:
                own = {k: v for k, v in each.items() if int(k.rsplit(":", 1)[1]) in pids}
                if own and (best[0] is None or sum(own.values()) > best[0]):
                    best = (sum(own.values()), own, t)
        return best

    def stop(self) -> None:
        self._stop.set()


def phase_at(progress_log: list[Any] | None, queued_s: float | None, offset_s: float | None) -> str | None:
    """The service's last progress message before offset_s (seconds since the request was sent):
    what the verdict was doing when a memory sample was taken. The log counts from when a worker
    took the job, so the time queued is added (the request's way there is not: milliseconds)."""
    if not progress_log or offset_s is None:
        return None
    lag = queued_s or 0.0
    before = [m for t, m in progress_log if t + lag <= offset_s]
    return before[-1] if before else "before the first progress message"


MEM: GpuMemory | None = None
T0 = time.monotonic()  # the bench's start: verdict spans (timing_diag) count from it


def clock_sampler(a: argparse.Namespace) -> subprocess.Popen | None:
    """One long-lived nvidia-smi (a single NVML session, not a process per sample) writing the SM and
    memory clocks, power, temperature and active throttle reasons every 250 ms to DIR/gpu_clocks.csv,
    with the bench's start in DIR/gpu_clocks.t0 (the CSV's timestamps are wall-clock)."""
    if a.device != "cuda":
        return None
    (a.out / "gpu_clocks.t0").write_text(time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(time.time() - (time.monotonic() - T0))) + "\n")
    return subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active",
                             "--format=csv", "-lms", "250"], stdout=open(a.out / "gpu_clocks.csv", "w"), stderr=subprocess.DEVNULL)


def _problem_mib(a: argparse.Namespace) -> float:
    """The problem's own data: get_inputs() and the reference's outputs, in MiB."""
    if not hasattr(a, "problem_mib"):
        import torch

        from kernelwright.judge import inputs

        mod = inputs.import_file(str(a.problem), "kw_bench_problem")
        values = mod.get_inputs()
        model = mod.Model(*mod.get_init_inputs())
        with torch.no_grad():
            outs = model(*values)
        a.problem_mib = (inputs.tensor_bytes(values) + inputs.tensor_bytes(outs) + inputs.tensor_bytes(list(model.parameters()))) / 2**20
    return a.problem_mib


def _row(a: argparse.Namespace, mode: str, correctness_only: bool, d: dict[str, Any], wall: float, t0: float, phases: list[Any]) -> dict[str, Any]:
    peak = MEM.peak(t0, time.monotonic()) if MEM is not None else None
    by_process = MEM.at_peak(t0, time.monotonic()) if MEM is not None else None
    return {"mode": mode, "correctness_only": correctness_only, "wall_s": wall, "status": d["status"], "runtime_ms": d["runtime_ms"],
            "eager_ms": d["eager_ms"], "compile_ms": d["compile_ms"], "baseline_source": d["baseline_source"], "build_s": d.get("build_s"),
            "timing": d["timing"],
            "steps": d["steps"], "workers": d.get("workers"), "problem_hash": (d.get("problem") or {}).get("hash"),
            "candidate_hash": (d.get("candidate") or {}).get("hash"), "memory": d.get("memory"), "phases": phases, "log": (d.get("log") or "")[:3000],
            "gpu_peak_mib": peak, "gpu_at_peak_by_process_mib": by_process, "problem_mib": _problem_mib(a), "peak_over_problem": (peak / _problem_mib(a)) if peak else None}


def judge_once(a: argparse.Namespace, mode: str, correctness_only: bool = False) -> dict[str, Any]:
    from kernelwright.judge.evaluate import evaluate

    os.environ.update(MODES[mode])
    phases: list[tuple[float, str]] = []
    t0, m0 = time.perf_counter(), time.monotonic()
    verdict = evaluate(a.problem, a.candidate, _policy(a, correctness_only), device=a.device, baseline_store=a.store,
                       progress=lambda m: phases.append((round(time.perf_counter() - t0, 3), m)))
    return _row(a, mode, correctness_only, verdict.to_dict(), time.perf_counter() - t0, m0, phases)


def _service(a: argparse.Namespace, name: str = "serve", extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    sock = a.work / name / "kw.sock"
    sock.parent.mkdir(mode=0o700, exist_ok=True)
    env = {**os.environ, **MODES["warm"], "KERNELWRIGHT_STORE": str(a.store), "PYTHONPATH": str(ROOT / "src"), **(extra_env or {})}
    path = a.out / f"{name}.log"
    # the judge's per-call record of every timed verdict goes to this log (judge.phases_pricing.SAMPLES_PREFIX), the rest stays at warnings
    with open(path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", SERVE_WITH_SAMPLES, "serve", "--socket", str(sock), "--workers", str(a.serve_workers)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    a.service_logs = {**getattr(a, "service_logs", {}), f"unix://{sock}": path}
    from kernelwright.client.judge import wait_for

    url = f"unix://{sock}"
    health, deadline = wait_for(url, timeout_s=120), time.monotonic() + 120
    while health.get("forkserver") == "starting" and time.monotonic() < deadline:  # its own start-up: not a verdict's
        time.sleep(0.05)
        health = wait_for(url, timeout_s=10)
    return proc, url


SERVE_WITH_SAMPLES = ("import logging, sys; logging.getLogger('kernelwright.judge.phases_pricing').setLevel(logging.DEBUG); "
                      "logging.getLogger('kernelwright.judge.workers.memory').setLevel(logging.DEBUG); "
                      "sys.argv[0] = 'kernelwright'; from kernelwright.cli import main; main(sys.argv[1:])")


MEMORY_LINE = re.compile(r"(reference|candidate) child (\d+) after '([^']+)': memory_mib \[reserved, peak since its last reply, staging"
                         r"(?:, allocated, allocated peak, inactive split)?\] \[(\d+), (\d+), (\d+)((?:, \d+){3})?\]")


def command_peaks(text: str) -> list[list[Any]]:
    """[role, pid, command, reserved, peak, staging] (MiB) per command, from judge.workers.memory's
    debug lines in a service log; lines written since the allocator's split figures were added
    carry three more: allocated, allocated peak, inactive split."""
    rows = []
    for m in MEMORY_LINE.finditer(text):
        extra = [int(x) for x in m[7].split(",") if x.strip()] if m[7] else []
        rows.append([m[1], int(m[2]), m[3], int(m[4]), int(m[5]), int(m[6]), *extra])
    return rows


def own_children(rows: list[list[Any]]) -> set[int]:
    """The pids of the children that answered a verdict's commands, from command_peaks' rows: a
    spare candidate child warmed meanwhile (its only command 'warm') is the service's, not the
    verdict's."""
    return {pid for _role, pid, command, *_ in rows if command != "warm"}


def top_commands(rows: list[list[Any]]) -> dict[str, Any]:
    """Per child (role:pid), the command whose allocator peak plus staging was highest, with it."""
    top: dict[str, Any] = {}
    for role, pid, command, _reserved, peak, staging, *_ in rows:
        key = f"{role}:{pid}"
        if key not in top or peak + staging > top[key][1]:
            top[key] = [command, peak + staging]
    return top


def _log_size(a: argparse.Namespace, url: str) -> int:
    path = getattr(a, "service_logs", {}).get(url)
    return path.stat().st_size if path is not None and path.exists() else 0


def _log_text(a: argparse.Namespace, url: str, since: int, until: int | None = None) -> str:
    """A service's log between two byte offsets."""
    path = getattr(a, "service_logs", {}).get(url)
    if path is None or not path.exists():
        return ""
    with open(path, "rb") as f:
        f.seek(since)
        data = f.read() if until is None else f.read(max(0, until - since))
    return data.decode("utf-8", "replace")


def attach_records(rows: list[dict[str, Any]], alone: dict[str, dict[str, Any]], alone_log: str, co_log: str) -> list[dict[str, Any]]:
    """Each compared verdict's per-call record, from the service's log of the sequential verdicts
    (alone_log) and of the concurrent ones (co_log): its replay goes beside the row's diag, and the
    records are returned, labelled with the candidate, the side and the verdict's status, for
    concurrent_samples.json. A replay that fails leaves None and says why in the row."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    from charge_replay import by_candidate, replay_summary, samples_in_log

    recs = {"alone": by_candidate(samples_in_log(alone_log)), "concurrent": by_candidate(samples_in_log(co_log))}
    kept = []
    for r in rows:
        for side, row, diag in (("concurrent", r, r["diag"]), ("alone", alone[r["candidate_path"]], r["alone_diag"])):
            rec = recs[side].get(f"{row.get('problem_hash')}:{row.get('candidate_hash')}")
            try:
                diag["replay"] = replay_summary(rec)
            except Exception as exc:  # a record the replay cannot read must not cost the section its numbers
                diag["replay"], diag["replay_error"] = None, f"{type(exc).__name__}: {exc}"
            if rec:
                kept.append({"label": f"{r['candidate']} ({side}, {row.get('status')})", "status": row.get("status"), "record": rec})
    return kept


def _remote_once(a: argparse.Namespace, url: str, problem: Path, candidate: Path, correctness_only: bool, mode: str) -> dict[str, Any]:
    from kernelwright.client import Judge

    phases: list[tuple[float, str]] = []
    t0, m0 = time.perf_counter(), time.monotonic()
    judge = Judge(url)
    verdict = judge.evaluate(problem, candidate, _policy(a, correctness_only), progress=lambda m: phases.append((round(time.perf_counter() - t0, 3), m)))
    row = _row(a, mode, correctness_only, verdict.to_dict(), time.perf_counter() - t0, m0, phases)
    row["problem"] = str(problem.relative_to(ROOT))
    job = judge.last_job or {}
    # the service's own account: seconds queued and judged (the rest of the wall is the request's way there and back)
    # and its progress messages timed from when a worker took the job
    row["service"] = {"queued_s": job.get("queued_s"), "judged_s": job.get("judged_s"), "progress_log": job.get("progress_log")}
    row["span_s"] = (round(m0 - T0, 3), round(time.monotonic() - T0, 3))  # seconds since the bench began: when it was asked, answered
    return row


def timing_diag(row: dict[str, Any]) -> dict[str, Any]:
    """What a timed verdict's median is made of, to tell a slower GPU from a charged host: the
    median before the harness overhead came off, the overhead, the profiler's kernel-time sum (one
    call, no events), the calls and their spread, the calls step device_sync charged, whether the
    reference child was warm, and when the verdict and its timing ran (seconds since the bench began)."""
    t = row.get("timing") or {}
    sync = next((s for s in row.get("steps") or () if s.get("name") == "device_sync"), {})
    detail = sync.get("reason") or ""
    charged = detail[detail.find("calls charged:"):][:200] if "calls charged:" in detail else None
    began = next((at for at, m in row.get("phases") or () if m.startswith("timing")), None)
    service = row.get("service") or {}
    if began is None and service.get("progress_log"):  # through a service: its log counts from when a worker took the job
        at = next((t for t, m in service["progress_log"] if m.startswith("timing")), None)
        began = at + (service.get("queued_s") or 0.0) if at is not None else None
    span = row.get("span_s") or (None, None)
    return {"runtime_ms": row.get("runtime_ms"), "raw_median_ms": t.get("raw_median_ms"), "overhead_ms": t.get("overhead_ms"),
            "profiler_ms": t.get("profiler_ms"), "n": t.get("n"), "iqr_ms": t.get("iqr_ms"), "charged": charged,
            "reference": (row.get("workers") or {}).get("reference"), "candidate_child": (row.get("workers") or {}).get("candidate"),
            "retimed": (row.get("workers") or {}).get("retimed"),
            "span_s": span,
            "timing_began_s": round(span[0] + began, 3) if span[0] is not None and began is not None else None}


def sec_serve(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Sequential verdicts through `kernelwright serve`: cold reference, warm, warm correctness-only.
    This process's own warm reference children and spare candidate children (section sequential)
    are closed first, so the GPU holds only the service's."""
    from kernelwright.judge import refpool, spares

    _seed_baselines(a, doc)
    refpool.POOL.close()
    spares.POOL.close()
    doc["serve_prebuild"] = _prebuild(a)
    proc, url = _service(a)
    a.service_proc, a.service_url = proc, url
    rows = []
    for co, n in ((False, 1 + a.n_serve), (True, a.n_serve_co)):
        for i in range(n):
            row = _remote_once(a, url, a.problem, a.candidate, co, "serve")
            row["index"] = i
            rows.append(row)
            log_line(a, f"serve{' correctness-only' if co else ''} #{i}: {row['wall_s']:.2f} s {row['status']} runtime {row['runtime_ms']} "
                        f"gpu peak {row['gpu_peak_mib']} MiB ({row['peak_over_problem'] and round(row['peak_over_problem'], 2)}x the problem); "
                        f"judged in the service {row['service']['judged_s'] and round(row['service']['judged_s'], 3)} s")
            if i == n - 1:  # the last of each kind: where the service's time went
                log_line(a, "  service progress: " + "; ".join(f"{t:.3f} {m[:120]}" for t, m in row["service"]["progress_log"] or []))
            if row["status"] != "correct":
                log_line(a, "  log: " + row["log"][:1500])
    doc["serve"] = rows
    walls = [r["wall_s"] for r in rows if not r["correctness_only"]]
    cos = [r["wall_s"] for r in rows if r["correctness_only"]]
    doc["serve_summary"] = {"cold_reference_s": walls[0] if walls else None, "warm_p50_s": statistics.median(walls[1:]) if len(walls) > 1 else None,
                            "warm_p90_s": statistics.quantiles(walls[1:], n=10)[8] if len(walls) > 2 else None,
                            "correctness_only_p50_s": statistics.median(cos[1:] or cos) if cos else None}
    if a.n_serve_co_torch:
        _serve_torch_digest(a, doc)


def _serve_torch_digest(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """The same correctness-only verdicts through a second service whose candidate children digest
    the inputs with torch operators (KERNELWRIGHT_DIGEST=torch, the fallback of the judge's digest
    kernel): the input check's two ways in one run. The first verdict is that service's cold
    reference and is left out of the p50, as above; the service is stopped after."""
    proc, url = _service(a, "serve_torch_digest", {"KERNELWRIGHT_DIGEST": "torch"})
    rows = []
    try:
        for i in range(1 + a.n_serve_co_torch):
            row = _remote_once(a, url, a.problem, a.candidate, True, "serve-torch-digest")
            row["index"] = i
            rows.append(row)
            log_line(a, f"serve correctness-only, torch digest #{i}: {row['wall_s']:.2f} s {row['status']}")
            if i == a.n_serve_co_torch:
                log_line(a, "  service progress: " + "; ".join(f"{t:.3f} {m[:120]}" for t, m in row["service"]["progress_log"] or []))
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    doc["serve_torch_digest"] = rows
    cos = [r["wall_s"] for r in rows[1:]]
    doc["serve_summary"]["correctness_only_torch_digest_p50_s"] = statistics.median(cos) if cos else None


def _variants(a: argparse.Namespace, name: str, n: int) -> list[Path]:
    """n raw candidates of one example: copies of its folder that differ by a comment in model_new.py,
    so each is a candidate of its own (its own hash and verdict) with the build already cached."""
    out = []
    for k in range(n):
        d = a.work / "variants" / name / f"v{k}"
        if not d.exists():
            shutil.copytree(ROOT / "examples" / a.device / name, d)
            with open(d / "model_new.py", "a") as f:
                f.write(f"\n# raw candidate {k} of the concurrent section (benchmarks/warm_bench.py)\n")
        out.append(d)
    return out


def sec_concurrent(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Throughput: N raw candidates of each shipped CUDA example (cached builds, cached baselines),
    each judged once alone (sequential, which also builds and sets up), then all at once by CLIENTS
    clients through the service; each candidate's median against its sequential verdict."""
    url, own = getattr(a, "service_url", None), None
    if url is None:
        own, url = _service(a, "serve-concurrent")
    quiet = "concurrent" in a.quiet_sections.split(",") and MEM is not None
    if quiet:
        MEM.paused.set()  # no nvidia-smi started every 50 ms while these verdicts time (their rows carry no memory peak)
        log_line(a, "concurrent: the memory sampler is paused for this section (--quiet-sections)")
    try:
        _concurrent(a, doc, url)
    finally:
        if quiet:
            MEM.paused.clear()
        if own is not None:  # the GPU is left to the next section's own service
            own.terminate()
            own.wait(timeout=60)


def _concurrent(a: argparse.Namespace, doc: dict[str, Any], url: str) -> None:
    import concurrent.futures

    names = [n for n in a.concurrent_examples.split(",") if n]
    for n in names:  # baselines cached for every problem, as the throughput target assumes
        subprocess.run([sys.executable, "-m", "kernelwright", "baseline", "--suite", str(ROOT / "examples" / a.device / n / "problem.py"),
                        "--device", a.device, "--store", str(a.store), "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    per = {n: _variants(a, n, a.n_concurrent) for n in names}
    jobs = [(ROOT / "examples" / a.device / n / "problem.py", per[n][k], n) for k in range(a.n_concurrent) for n in names]  # problems interleaved
    alone: dict[str, dict[str, Any]] = {}
    t_seq, log_at = time.perf_counter(), _log_size(a, url)
    for p, c, n in jobs:
        alone[str(c)] = _remote_once(a, url, p, c, False, "concurrent-alone")
    seq_wall, log_mid = time.perf_counter() - t_seq, _log_size(a, url)
    log_line(a, f"concurrent: {len(jobs)} candidates judged one at a time in {seq_wall:.1f} s (builds, cold references included); "
                f"statuses {sorted({r['status'] for r in alone.values()})}")
    t0, cpu0 = time.perf_counter(), hostinfo.cpu_seconds()
    with concurrent.futures.ThreadPoolExecutor(a.clients) as pool:
        rows = list(pool.map(lambda j: _remote_once(a, url, j[0], j[1], False, "concurrent"), jobs))
    wall, cpu_shares = time.perf_counter() - t0, hostinfo.shares(cpu0, hostinfo.cpu_seconds())
    log_line(a, f"concurrent: the host's CPU time by kind while they ran (steal is the hypervisor's): {json.dumps(cpu_shares)}")
    ratios = []
    for (p, c, n), r in zip(jobs, rows):
        r["candidate"], r["example"] = str(c.relative_to(a.work)), n
        base = alone[str(c)].get("runtime_ms")
        r["alone_runtime_ms"], r["alone_wall_s"] = base, alone[str(c)]["wall_s"]
        r["ratio_to_alone"] = r["runtime_ms"] / base if r.get("runtime_ms") and base else None
        r["diag"], r["alone_diag"], r["candidate_path"] = timing_diag(r), timing_diag(alone[str(c)]), str(c)
    # each verdict's per-call record from the service's log (written before its verdict is sent): the sequential ones before log_mid
    kept = attach_records(rows, alone, _log_text(a, url, log_at, log_mid), _log_text(a, url, log_mid))
    (a.out / "concurrent_samples.json").write_text(json.dumps({"provenance": provenance(a), "samples_by_verdict": kept}))
    log_line(a, f"concurrent: per-call records kept for {len(kept)} of {2 * len(rows)} verdicts (concurrent_samples.json, for charge_replay.py)")
    for r in rows:
        if r["ratio_to_alone"]:
            ratios.append(r["ratio_to_alone"])
            if abs(r["ratio_to_alone"] - 1) > 0.02:
                log_line(a, f"  outside 2 %: {r['candidate']} ratio {r['ratio_to_alone']:.4f}\n    concurrent {json.dumps(r['diag'])}"
                            f"\n    alone      {json.dumps(r['alone_diag'])}")
    within = sum(abs(x - 1) <= 0.02 for x in ratios)
    # a new reference child costs its verdict about 3 s (the pool's size decides how many: judge.refpool)
    new_refs = sum((r["diag"] or {}).get("reference") == "new" for r in rows)
    retimed = sum(bool((r["diag"] or {}).get("retimed")) for r in rows), sum(bool((r["alone_diag"] or {}).get("retimed")) for r in rows)
    phases = {side: phase_medians([{"status": r.get("status"), "service": milestones(r.get("service") or {})} for r in side_rows])
              for side, side_rows in (("concurrent", rows), ("alone", [alone[r["candidate_path"]] for r in rows]))}
    log_line(a, f"concurrent: where a verdict's time went (medians, s; the service's progress log): {json.dumps(phases)}")
    log_line(a, f"concurrent: {len(rows)} verdicts by {a.clients} clients in {wall:.1f} s = {60 * len(rows) / wall:.1f} per minute; "
                f"statuses {sorted({r['status'] for r in rows})}; {within} of {len(ratios)} medians within 2 % of the same candidate alone "
                f"(ratios {min(ratios, default=0):.4f}-{max(ratios, default=0):.4f}); new reference children {new_refs} of {len(rows)}; "
                f"windows timed again {retimed[0]} concurrent, {retimed[1]} alone")
    doc["concurrent"] = {"verdicts": len(rows), "clients": a.clients, "wall_s": wall, "per_minute": 60 * len(rows) / wall,
                         "sequential_wall_s": seq_wall, "within_2pct": within, "compared": len(ratios), "cpu_shares": cpu_shares,
                         "new_references": new_refs, "retimed": {"concurrent": retimed[0], "alone": retimed[1]}, "phases": phases,
                         "rows": [{**{k: r.get(k) for k in ("example", "candidate", "status", "wall_s", "runtime_ms", "alone_runtime_ms", "ratio_to_alone",
                                                            "alone_wall_s", "gpu_peak_mib", "diag", "alone_diag", "service")},
                                   "alone_service": alone[r["candidate_path"]].get("service")} for r in rows]}


def _smi_mib(pid: int) -> int | None:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=10).stdout
    for line in out.strip().splitlines():
        got, _, mib = (x.strip() for x in line.partition(","))
        if got == str(pid) and mib.isdigit():
            return int(mib)
    return None


def bare_context_mib() -> int | None:
    """What a process holds on the GPU with a CUDA context and one small tensor (nvidia-smi): the
    fixed cost of each of the judge's processes, whatever the problem."""
    code = "import sys, time, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); print('ready', flush=True); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        time.sleep(0.5)
        return _smi_mib(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def flush_buffer_mib() -> float | None:
    """The size of the timing protocol's L2 flush buffer (judge.timing.flush_l2: twice the L2, as
    int32), read from the device in a process of its own; None without a GPU."""
    code = "import torch; print(2 * int(torch.cuda.get_device_properties(0).L2_cache_size) // 4 * 4)"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        return int(out.stdout.strip().splitlines()[-1]) / 2**20
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def flush_buffers_at(correctness_only: bool, phase: str | None) -> int:
    """How many of a verdict's own children held a flush buffer at its peak: none in a
    correctness-only verdict (counted so, its reference child's, if it holds one, stays in); in a
    timed one the reference child's (made before candidate code runs), and the candidate child's
    once its timing set-up began (the progress message 'warming up the candidate' or later)."""
    if correctness_only:
        return 0
    with_candidate = ("warming up the candidate", "timed ", "profiled", "the candidate child's own calls")
    return 2 if (phase or "").startswith(with_candidate) else 1


LOADED_CONTEXT = """
import sys, time, torch
from kernelwright.judge import inputs
mod = inputs.import_file(sys.argv[1], "kw_loaded_context")
with torch.no_grad():
    model = mod.Model(*mod.get_init_inputs()).cuda()
    values = [v.cuda() if isinstance(v, torch.Tensor) else v for v in mod.get_inputs()]
    model(*values)
del model, values
torch.cuda.synchronize()
clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
if clear is not None:
    clear()
torch.cuda.empty_cache()
print("ready", torch.cuda.memory_reserved(), flush=True)
time.sleep(60)
"""


def loaded_context_mib(problem: Path) -> int | None:
    """What a process holds on the GPU after running the problem's own forward once and giving
    every tensor and cuBLAS workspace back (nvidia-smi): its context plus the code of the
    libraries that forward loads (cuBLAS's kernels, for a matmul), the fixed cost any process
    running the problem pays whatever the data."""
    proc = subprocess.Popen([sys.executable, "-c", LOADED_CONTEXT, str(problem)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        line = proc.stdout.readline().split()
        if not line or line[0] != "ready" or line[1] != "0":  # the allocator still held something: not a context alone
            return None
        time.sleep(0.5)
        return _smi_mib(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def sec_memory(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """GPU memory per shipped example: one correctness-only and one timed verdict of each (its first
    raw candidate, build and baselines cached by `concurrent`) through a service of its own, alone
    on the GPU. The judge's peak is the highest sum over its processes (nvidia-smi every 50 ms);
    "without contexts" takes a bare context (measured here) off each process that held memory at
    that peak. The footprint is the verdict's own `memory.problem.footprint_bytes`. "Without
    loaded contexts" takes off instead, from each of the verdict's own children, what a process
    holds after running the problem's forward once with every tensor given back
    (loaded_context_mib): the context and the libraries' code, which no data of the problem's or
    the judge's is. Each row also says when the peak of the verdict's own children was sampled and
    the service's progress message then (own_peak_phase): the 50 ms samples alone do not say whether a
    timed verdict's peak fell in its correctness cases or its timing (memory_h200.md, at 2475e8d)."""
    if getattr(a, "service_proc", None) is not None:  # its idle warm children would count in the peaks below
        a.service_proc.terminate()
        a.service_proc.wait(timeout=60)
        a.service_proc = a.service_url = None
    ctx = bare_context_mib() if a.device == "cuda" else None
    flush = flush_buffer_mib() if a.device == "cuda" else None
    log_line(a, f"memory: a bare CUDA context holds {ctx} MiB; the timing protocol's L2 flush buffer is {flush} MiB")
    proc, url = _service(a, "serve-memory")
    rows = []
    try:
        for name in [n for n in a.concurrent_examples.split(",") if n]:
            problem, cand = ROOT / "examples" / a.device / name / "problem.py", _variants(a, name, 1)[0]
            _remote_once(a, url, problem, cand, True, "memory-warmup")  # the reference child made: the rows below are warm
            loaded = loaded_context_mib(problem) if a.device == "cuda" else None
            log_line(a, f"memory {name}: a process that ran the problem's forward once and gave every tensor back holds {loaded} MiB")
            for co in (True, False):
                since, m0 = _log_size(a, url), time.monotonic()
                row = _remote_once(a, url, problem, cand, co, "memory")
                commands = command_peaks(_log_text(a, url, since))
                fp = ((row.get("memory") or {}).get("problem") or {}).get("footprint_bytes")
                by = row.get("gpu_at_peak_by_process_mib") or {}
                peak = row.get("gpu_peak_mib")
                held = [m for m in by.values() if m > 0]
                ex = peak - sum(min(ctx, m) for m in held) if peak is not None and ctx is not None else None  # a spare child holds less than a bare context
                fp_mib = fp / 2**20 if fp else None
                # its own processes: the children that answered this verdict's commands (not a spare
                # candidate child made ready meanwhile, whose only command is 'warm', nor another
                # problem's idle reference child)
                # and which phase the peak fell in (the 50 ms samples against the service's progress log)
                own_peak, own_by, t_peak = MEM.peak_of(m0, time.monotonic(), own_children(commands)) if MEM is not None else (None, {}, None)
                service = row.get("service") or {}
                peak_phase = phase_at(service.get("progress_log"), service.get("queued_s"), t_peak - m0 if t_peak is not None else None)
                own_ex = own_peak - sum(min(ctx, m) for m in own_by.values()) if own_peak is not None and ctx is not None else None
                own_lx = own_peak - sum(min(loaded, m) for m in own_by.values()) if own_peak is not None and loaded is not None else None
                n_flush = flush_buffers_at(co, peak_phase)
                own_fx = own_ex - n_flush * flush if own_ex is not None and flush is not None else None
                r = {"example": name, "correctness_only": co, "status": row["status"], "wall_s": row["wall_s"], "footprint_mib": fp_mib,
                     "peak_mib": peak, "by_process_mib": by, "processes": len(held), "context_mib": ctx, "peak_without_contexts_mib": ex,
                     "ratio": peak / fp_mib if peak and fp_mib else None, "ratio_without_contexts": ex / fp_mib if ex is not None and fp_mib else None,
                     "own_peak_mib": own_peak, "own_by_process_mib": own_by, "own_without_contexts_mib": own_ex,
                     "own_ratio_without_contexts": own_ex / fp_mib if own_ex is not None and fp_mib else None,
                     "loaded_context_mib": loaded, "own_without_loaded_contexts_mib": own_lx,
                     "own_ratio_without_loaded_contexts": own_lx / fp_mib if own_lx is not None and fp_mib else None,
                     "flush_buffer_mib": flush, "flush_buffers_at_peak": n_flush, "own_without_contexts_and_flush_mib": own_fx,
                     "own_ratio_without_contexts_and_flush": own_fx / fp_mib if own_fx is not None and fp_mib else None,
                     "estimate_bytes": (row.get("memory") or {}).get("estimate_bytes"), "command_peaks_mib": commands,
                     "own_peak_at_s": round(t_peak - m0, 3) if t_peak is not None else None, "own_peak_phase": peak_phase,
                     "progress_log": service.get("progress_log")}
                rows.append(r)
                log_line(a, f"memory {name}{' correctness-only' if co else ''}: {row['status']}, footprint {fp_mib and round(fp_mib)} MiB, "
                            f"peak {peak} MiB over {len(held)} processes {by} = {r['ratio'] and round(r['ratio'], 2)}x, "
                            f"without contexts {ex} MiB = {r['ratio_without_contexts'] and round(r['ratio_without_contexts'], 2)}x; "
                            f"its own children {own_by}: without contexts {own_ex} MiB = "
                            f"{r['own_ratio_without_contexts'] and round(r['own_ratio_without_contexts'], 2)}x, without loaded contexts "
                            f"{own_lx} MiB = {r['own_ratio_without_loaded_contexts'] and round(r['own_ratio_without_loaded_contexts'], 2)}x; "
                            f"without contexts and {n_flush} flush buffer(s) {own_fx} MiB = "
                            f"{r['own_ratio_without_contexts_and_flush'] and round(r['own_ratio_without_contexts_and_flush'], 3)}x; "
                            f"each child's highest command (allocator peak + staging, MiB): {top_commands(commands)}; "
                            f"its own peak at {r['own_peak_at_s']} s, in: {(peak_phase or '?')[:100]}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    doc["memory"] = {"context_mib": ctx, "flush_buffer_mib": flush, "rows": rows}


def sec_kbprotocol(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """Against benchmarks/kernelbench_protocol.py in the same run: its protocol on the load_inline
    softmax, ours through a new service on the same kernel through the raw build path. Cold: empty
    build caches (and, for ours, a new service: its start-up counts); warm: caches kept (ours: the
    warm p50 of three more verdicts through that service). Baselines cached for ours, as KernelBench
    precomputes its own."""
    prob, li = ROOT / "examples" / a.device / "softmax" / "problem.py", ROOT / "examples" / a.device / "softmax_load_inline" / "model_new.py"
    if a.problem == prob:  # the store's baselines are the --example's
        _seed_baselines(a, doc)
    with tempfile.TemporaryDirectory() as d:
        env = {**os.environ, "TORCH_EXTENSIONS_DIR": f"{d}/kb", "PYTHONPATH": str(ROOT / "src")}
        kb = {}
        for phase in ("cold", "warm"):
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernelbench_protocol.py"), str(prob), str(li)],
                                  capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
            kb[phase] = {"wall_s": time.perf_counter() - t0, "rc": proc.returncode, "reply": _json(proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "")}
            log_line(a, f"kbprotocol: KernelBench-style {phase} {kb[phase]['wall_s']:.1f} s {kb[phase]['reply']}")
        t0 = time.perf_counter()
        proc, url = _service(a, "serve-cold", {"KERNELWRIGHT_CACHE": f"{d}/kw"})
        ready = time.perf_counter() - t0
        try:
            first = _remote_once(a, url, prob, ROOT / "examples" / a.device / "softmax", False, "kbprotocol-cold")
            cold = time.perf_counter() - t0
            warm = [_remote_once(a, url, prob, ROOT / "examples" / a.device / "softmax", False, "kbprotocol-warm") for _ in range(3)]
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    ours_warm = statistics.median(r["wall_s"] for r in warm)
    kb_ok = all(kb[p]["rc"] == 0 and kb[p]["reply"].get("status") == "correct" for p in kb)
    ours_ok = first["status"] == "correct" and all(r["status"] == "correct" for r in warm)
    doc["kbprotocol"] = {"kernelbench": kb, "ours_cold_s": cold, "ours_service_ready_s": ready, "ours_cold_status": first["status"],
                         "ours_warm_s": [r["wall_s"] for r in warm], "ours_warm_statuses": [r["status"] for r in warm],
                         "both_correct": kb_ok and ours_ok,  # a ratio against a run that failed means nothing
                         "ratio_cold": kb["cold"]["wall_s"] / cold if kb_ok and ours_ok else None,
                         "ratio_warm": kb["warm"]["wall_s"] / ours_warm if kb_ok and ours_ok else None,
                         "note": "cold: KernelBench-style on the load_inline build of the kernel, ours on its raw nvcc build (as judge_bench's "
                                 "throughput section); ours cold counts the new service's start"}
    log_line(a, f"kbprotocol: ours cold {cold:.1f} s (service ready after {ready:.1f} s) {first['status']}, warm p50 {ours_warm:.2f} s; "
                f"ratios cold {doc['kbprotocol']['ratio_cold']}, warm {doc['kbprotocol']['ratio_warm']} (both correct: {kb_ok and ours_ok})")


def sec_sequential(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    from kernelwright.judge import refpool

    rows = []
    plan = [("spawn", False, a.n_spawn), ("fork", False, a.n_fork), ("warm", False, a.n_warm), ("warm", True, a.n_co)]
    for mode, co, n in plan:
        refpool.POOL.close()  # each mode's first verdict sets a reference child up (the cold reference)
        for i in range(n):
            row = judge_once(a, mode, co)
            row["index"] = i
            rows.append(row)
            log_line(a, f"{mode}{' correctness-only' if co else ''} #{i}: {row['wall_s']:.2f} s {row['status']} runtime {row['runtime_ms']} "
                        f"gpu peak {row['gpu_peak_mib']} MiB; phases {row['phases']}")
            if row["status"] != "correct":
                log_line(a, "  log: " + row["log"][:1500])
    doc["sequential"] = rows
    doc["sequential_summary"] = summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for mode, co in (("spawn", False), ("fork", False), ("warm", False), ("warm", True)):
        walls = [r["wall_s"] for r in rows if r["mode"] == mode and r["correctness_only"] == co]
        if not walls:
            continue
        later = walls[1:] or walls
        q = statistics.quantiles(later, n=10) if len(later) >= 2 else [later[0]] * 9
        times = [r["runtime_ms"] for r in rows if r["mode"] == mode and r["correctness_only"] == co and r["runtime_ms"]]
        out.append({"mode": mode + (" correctness-only" if co else ""), "n": len(walls), "first_s": walls[0], "p50_s": statistics.median(later),
                    "p90_s": q[8], "runtime_ms_median": statistics.median(times) if times else None})
    return out


def sec_protocol(a: argparse.Namespace, doc: dict[str, Any]) -> None:
    """What each verdict did, spawned against warm: the same steps ran, the same cases and seeds."""
    rows = doc.get("sequential") or []
    def shape(r: dict[str, Any]) -> dict[str, Any]:
        return {"steps_ran": sorted(s["name"] for s in r["steps"] if s["ran"]), "steps_not_ran": sorted(s["name"] for s in r["steps"] if not s["ran"]),
                "details": {s["name"]: s.get("reason", "") for s in r["steps"] if s["name"] in ("seeds", "distributions", "extra_shapes", "near_duplicate")},
                "timed_calls": (r.get("timing") or {}).get("n")}
    pick = {m: next((r for r in rows if r["mode"] == m and not r["correctness_only"]), None) for m in ("spawn", "warm")}
    doc["protocol"] = {m: shape(r) for m, r in pick.items() if r}
    if all(pick.values()):
        s, w = doc["protocol"]["spawn"], doc["protocol"]["warm"]
        doc["protocol"]["same_steps"] = s["steps_ran"] == w["steps_ran"] and s["details"] == w["details"]


def run_sections(a: argparse.Namespace, doc: dict[str, Any], scope: dict[str, Any], path: Path, log: Any) -> None:
    """Run each section of a.sections (scope's sec_NAME) in turn, writing doc to path after each;
    a section that fails is recorded under "errors" and the others still run."""
    for name in a.sections.split(","):
        t0 = time.perf_counter()
        try:
            scope[f"sec_{name}"](a, doc)
        except Exception as exc:  # noqa: BLE001 - one broken section must not lose the others
            doc.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
        log(a, f"section {name}: {time.perf_counter() - t0:.1f} s")
        path.write_text(json.dumps(doc, indent=1, default=str))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--example", default="softmax", help="examples/DEVICE/NAME: the problem and its candidate")
    p.add_argument("--n-spawn", type=int, default=2)
    p.add_argument("--n-fork", type=int, default=3)
    p.add_argument("--n-warm", type=int, default=12)
    p.add_argument("--n-co", type=int, default=6, help="warm correctness-only verdicts")
    p.add_argument("--n-serve", type=int, default=20, help="warm verdicts through the service (after its cold-reference one)")
    p.add_argument("--n-serve-co", type=int, default=6, help="warm correctness-only verdicts through the service")
    p.add_argument("--n-serve-co-torch", type=int, default=0, help="after those, correctness-only verdicts through a second service whose "
                   "input check uses the torch digest (KERNELWRIGHT_DIGEST=torch): the digest kernel's gain in the same run")
    p.add_argument("--serve-workers", type=int, default=4)
    p.add_argument("--concurrent-examples", default="softmax,layernorm,elementwise_chain,matmul")
    p.add_argument("--quiet-sections", default="", help="sections run with the memory sampler paused (no nvidia-smi every 50 ms): concurrent")
    p.add_argument("--n-concurrent", type=int, default=10, help="raw candidates per example in section concurrent")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--work", type=Path, default=None, help="variants, build cache, store and sockets (default: a new temporary folder, "
                   "so that DIR holds only what should come back from the GPU machine)")
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    a.work = a.work or Path(tempfile.mkdtemp(prefix="kw-warm-bench-"))
    a.work.mkdir(parents=True, exist_ok=True)
    ex = ROOT / "examples" / a.device / a.example
    a.problem, a.candidate, a.store = ex / "problem.py", ex, a.work / "store.sqlite"
    os.environ.setdefault("KERNELWRIGHT_CACHE", str(a.work / "cache"))
    doc: dict[str, Any] = {"provenance": provenance(a)}
    global MEM
    MEM = GpuMemory(a.device)
    clocks = clock_sampler(a)
    try:
        run_sections(a, doc, globals(), a.out / "warm_bench.json", log_line)
    finally:
        if clocks is not None:
            clocks.terminate()
    if getattr(a, "service_proc", None) is not None:
        a.service_proc.terminate()
        a.service_proc.wait(timeout=30)
    MEM.stop()
    print(json.dumps({"sanity": doc.get("sanity"), "oneshot": doc.get("oneshot"), "serve": doc.get("serve_summary"),
                      "concurrent": {k: v for k, v in (doc.get("concurrent") or {}).items() if k != "rows"}, "errors": doc.get("errors")}, default=str))
    for r in doc.get("sequential_summary", []):
        print(f"{r['mode']:<26} n={r['n']:<3} first {r['first_s']:6.2f} s  p50 {r['p50_s']:6.2f} s  p90 {r['p90_s']:6.2f} s  runtime {r['runtime_ms_median']}")
    print("same steps spawned and warm:", (doc.get("protocol") or {}).get("same_steps"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
