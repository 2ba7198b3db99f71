"""Baselines: eager PyTorch and torch.compile times for a suite's problems, measured once and cached.

Two phases, so that compiling never disturbs a measurement:
1. compile, in parallel: one reference child per problem (`jobs` at a time) builds the torch.compile
   baseline once; its seconds are the problem's cold compile time (while other compiles ran beside
   it), and what inductor builds lands in its on-disk caches;
2. time, one problem at a time: a fresh reference child compiles again (from those caches) and times
   eager and compiled calls in interleaved rounds with the judge's own timing (`measure.run_timing`
   without a candidate child: the same L2 flush, events, lead spin, empty calls and held calls, and
   the same stopping rule), and prices them as a verdict prices its baselines (`price`).
The next problem's child starts while one is timed; it only imports torch until its turn. A single
problem left to measure on the CPU backend skips phase 1: its timing child's compile is the run's first and gives
its compile time (a failed one is timed again eagerly only, as after a failed phase 1).
Across processes, compiling holds the device's lock shared and timing holds it exclusive
(judge.gpulock), so no other kernelwright process runs device work while a baseline is timed.

Records go to the store as soon as each is made, keyed by problem hash and by the machine (device,
GPU name, driver, torch and CUDA versions), the precision allowance and the compile mode, so an
evaluation with `baselines="cached"` takes them from there (`lookup`). The size the problem ran at
(problems.sizes) is part of the record's timing key: a CPU-size time never stands in for a
full-size one, nor the reverse (the two share the store's row, so the last one measured is kept).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kernelwright.judge import lead, measure, memory, samples
from kernelwright.judge.build import cache_dir
from kernelwright.judge.gpulock import device_lock
from kernelwright.judge.policy import Policy
from kernelwright.judge import pricing
from kernelwright.judge.workers import Child, ChildConfig, ChildError, physical_gpu

COMPILE_WARMUP_MS = 20.0  # the compile phase only needs the compiled baseline built and run once

_PROBE = r"""
import json, torch
from kernelwright.judge.child_reference import _driver_version
out = {"torch": torch.__version__, "cuda": torch.version.cuda}
if torch.cuda.is_available():
    out["gpu"], out["driver"] = torch.cuda.get_device_name(), _driver_version()
print(json.dumps(out))
"""  # the same calls the reference child's setup makes, so the keys match


def cpu_name() -> str:
    """The CPU's model name (the machine key's "gpu" on the CPU backend), as the build cache reads it."""
    from kernelwright.judge.build import cpu_identity

    return json.loads(cpu_identity()).get("model name") or platform.machine() or "cpu"


def machine_from_meta(meta: dict[str, Any], device: str) -> dict[str, Any]:
    """The machine a reference child reported at setup (gpu, driver, torch, cuda), as a key's parts."""
    if device == "cuda":
        return {"device": "cuda", "gpu": meta.get("gpu"), "driver": meta.get("driver"), "torch": meta.get("torch"), "cuda": meta.get("cuda")}
    return {"device": "cpu", "gpu": cpu_name(), "driver": None, "torch": meta.get("torch"), "cuda": None}


def machine_key(machine: dict[str, Any]) -> str:
    """The cache key's machine part: every field, in one canonical string."""
    return json.dumps({k: machine.get(k) for k in ("device", "gpu", "driver", "torch", "cuda")}, sort_keys=True)


# The L2 flush as timing.flush_l2 does it, named in the timing key: a change to the flush is a
# change to what a stored time means.
FLUSH_RULE = "a read of twice the L2 as int32, summed as int32"
TIMING_STEPS = ("l2_flush", "cuda_events", "device_sync", "harness_overhead", "fresh_inputs", "warmup", "interleave", "adaptive_stop")


def timing_key(policy: Policy, size: str = "full") -> str:
    """What about the timing protocol must match for a stored time to stand in for a measured one:
    the timing steps switched on, the lead spin asked for, the preset, the timing pool's rule
    (memory.pool_slots) and the L2 flush's (FLUSH_RULE, with the flush on): a record timed with
    another pool or another flush does not match.
    A verdict under another protocol (the kernelbench preset's no-flush timing, an ablation) finds
    no cached baselines. A size other than full (the CPU size) is named in it; full is not, so
    records made before sizes existed, all at full size, still match a full-size verdict. The pricing's
    version (judge.pricing.VERSION) is in it: a record priced under another rule does not match; so is
    the lead spin's rule (lead.RULE), and the lead a record was timed behind is in its detail, for
    the candidate that is timed against it."""
    key = {"steps": [s for s in TIMING_STEPS if policy.enabled(s)], "lead_us": policy.timing.lead_us, "preset": policy.preset,
           "pricing": pricing.VERSION, "lead_rule": lead.RULE,
           "pool": ["one set, refreshed in place" if policy.enabled("fresh_inputs") else memory.POOL_SLOTS, memory.POOL_BYTES]}
    if policy.enabled("l2_flush"):
        key["flush"] = FLUSH_RULE
    if size != "full":
        key["size"] = size
    return json.dumps(key, sort_keys=True)


def torch_versions_unimported() -> dict[str, Any] | None:
    """{"torch", "cuda"} as `torch.__version__` and `torch.version.cuda` would give them in a child
    of this interpreter, read from the installed torch/version.py without importing torch (2.7 s of
    a CPU baseline run); None when that file cannot be found or read."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.origin is None:
            return None
        file = Path(spec.origin).with_name("version.py")
        vspec = importlib.util.spec_from_file_location("kernelwright_torch_version", file)
        module = importlib.util.module_from_spec(vspec)  # type: ignore[arg-type]
        vspec.loader.exec_module(module)  # type: ignore[union-attr]
        return {"torch": str(module.__version__), "cuda": module.cuda}
    except Exception:  # noqa: BLE001 - the throwaway process answers instead
        return None


def probe_machine(device: str, gpu_index: int = 0, timeout_s: float = 120.0) -> dict[str, Any]:
    """The machine as a reference child would report it. On the CPU backend only torch's version
    counts, read without importing torch; on CUDA a throwaway process answers (the judge's own
    process never creates a CUDA context). `run` checks each timing child's report against it."""
    if device != "cuda" and (versions := torch_versions_unimported()) is not None:
        return machine_from_meta(versions, device)
    env = dict(os.environ)
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu_index)
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"probing the machine failed: {proc.stderr[-1000:]}")
    return machine_from_meta(json.loads(proc.stdout.strip().splitlines()[-1]), device)


@dataclass
class BaselineRecord:
    """One problem's baseline times on one machine, precision and compile mode."""

    problem: str
    problem_hash: str
    machine: dict[str, Any]
    precision: str
    compile_mode: str
    eager_ms: float | None = None  # the verdict's eager_ms rule: median per call less the harness overhead
    compile_ms: float | None = None  # the same for the torch.compile baseline
    detail: dict[str, Any] = field(default_factory=dict)  # n, iqr, raw medians, calls charged, overhead, stop reason
    compile_s: float | None = None  # the run's first torch.compile of it: the compile phase's (others compiling beside it), or the timing child's where one CPU problem skips the phase
    compile_s_cached: float | None = None  # the timing child's compile (from inductor's caches after a compile phase)
    flops: int | None = None
    bytes: int | None = None
    floor_ms: float | None = None
    error: str = ""  # why a time is missing
    created_at: str = ""
    timing_key: str = ""  # timing_key(policy, size) of the run that made it
    size: str = "full"  # the size the problem ran at (problems.sizes)
    sandbox: dict[str, Any] = field(default_factory=dict)  # how it was written (written_under); without it, measured again

    @property
    def machine_key(self) -> str:
        return machine_key(self.machine)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["machine_key"] = self.machine_key
        return d


SANDBOX_VERSION = 1  # records written since generated code runs sandboxed (judge.sandbox)


def written_under() -> dict[str, Any]:
    """What a record made now says of how it was written: the sandbox version and the layers a
    candidate child gets on this machine (no candidate runs in a baseline run; others on the
    machine may)."""
    from kernelwright.judge import sandbox

    return {"version": SANDBOX_VERSION, "layers": list(sandbox.support().layers("auto"))}


def trusted(record: dict[str, Any]) -> bool:
    """Whether a cached record may be used: written since the sandbox, on a machine where a
    candidate could not write the store (its own uid, or Landlock), and this machine is one too.
    The record's own claim is not enough: a candidate that could write the store (on a machine
    without either layer) could write the claim with it. A record from before the sandbox (a
    candidate then could multiply the cached times, issue 25) is measured again."""
    from kernelwright.judge import sandbox

    how = record.get("sandbox")
    if not isinstance(how, dict) or how.get("version") != SANDBOX_VERSION:
        return False
    layers = how.get("layers") or []
    here = sandbox.support().layers("auto")
    return ("uid" in layers or "landlock" in layers) and ("uid" in here or "landlock" in here)


def well_formed(record: dict[str, Any], device: str, compile_baseline: bool, policy_lead_us: float) -> str:
    """Why a cached record's figures cannot be used as they are ('' when they can): times that are
    not finite positive numbers, or a lead outside what lead.lead_for gives (the policy's lead up to
    lead.MAX_US; a record is read by the verdict that uses it, so nothing in it is taken on trust)."""
    import math

    from kernelwright.judge import lead

    def ms(x: Any) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0

    if not ms(record.get("eager_ms")) or (compile_baseline and not ms(record.get("compile_ms"))):
        return "its times are not finite positive numbers"
    rec_lead = (record.get("detail") or {}).get("lead_us")
    if device == "cuda" and policy_lead_us > 0:
        top = max(policy_lead_us, lead.MAX_US)  # lead_for never cuts a policy's longer lead
        if not ms(rec_lead) or not policy_lead_us <= rec_lead <= top:
            return f"its lead spin ({rec_lead!r} us) is not one the judge gives (the policy's {policy_lead_us:g} us to {top:g} us)"
    return ""


def price(outcome: samples.TimingOutcome, meta: dict[str, Any], device: str, policy: Policy) -> tuple[dict[str, float], dict[str, Any]]:
    """({contender: ms}, detail) for the baselines of a timing outcome, by the verdict's rules
    (judge.pricing): each baseline's median stream time, less the reference child's empty call
    (capped at the one timed before anything else ran). Step device_sync charges no baseline."""
    names = [c for c in ("eager", "compile") if outcome.samples.get(c) is not None and outcome.samples[c].times_ms]
    overhead = outcome.overheads(meta.get("null_before_ms")) if device == "cuda" and policy.enabled("harness_overhead") else None
    out, detail = {}, {"stop_reason": outcome.stop_reason, "pricing_version": pricing.VERSION, "lead_us": outcome.lead_us}
    for c in names:
        times = list(outcome.samples[c].times_ms)
        o = (overhead or {}).get(c, 0.0)
        out[c] = pricing.median_price(times, o)
        med = statistics.median(times)
        q = statistics.quantiles(times, n=4) if len(times) >= 2 else [med, med, med]
        detail[c] = {"n": len(times), "raw_median_ms": med, "iqr_ms": q[2] - q[0], "overhead_ms": o}
    return out, detail


def _size(problem: Any, device: str, policy: Policy) -> str:
    from kernelwright.problems import sizes

    return sizes.resolve(problem.source, policy.size, device, str(problem.path))


def _setup_args(problem: Any, device: str, policy: Policy, timing: bool) -> dict[str, Any]:
    args = {"problem_path": str(problem.path), "size": _size(problem, device, policy), "device": device, "precision": policy.precision, "init_seed": 1,
            "atol": policy.atol, "rtol": policy.rtol, "strict": policy.enabled("output_checks")}
    if timing and device == "cuda" and policy.enabled("harness_overhead"):
        args["null_switches"] = measure.policy_switches(policy, policy.timing.lead_us)
    return args


class _Children:
    """Reference children made on demand, each in its own work folder, all closed at the end."""

    def __init__(self, device: str, policy: Policy) -> None:
        self.device, self.policy = device, policy
        self.root = Path(tempfile.mkdtemp(prefix="kw-baseline-"))
        self.lock = threading.Lock()
        self.n = 0
        self.live: list[Child] = []  # every child started, so close() can end them whatever happened

    def new(self) -> Child:
        with self.lock:
            self.n += 1
            workdir = self.root / f"c{self.n}"
        workdir.mkdir()
        child = Child(ChildConfig(role="reference", device=self.device, gpu_index=self.policy.gpu_index, workdir=workdir,
                                  env={"KERNELWRIGHT_CACHE": str(cache_dir())}))
        with self.lock:
            self.live.append(child)
        return child

    def close(self) -> None:
        """End every child still running (an interrupt or an unexpected error included), then
        remove their folders."""
        for child in self.live:
            _close(child)
        shutil.rmtree(self.root, ignore_errors=True)


def _close(child: Child | None) -> None:
    if child is not None:
        child.request_exit()
        child.close()


LATE = "not reached before the deadline"


def compile_one(problem: Any, device: str, policy: Policy, children: _Children, deadline: float | None = None) -> tuple[float | None, str]:
    """(cold torch.compile seconds, error) for one problem, in its own reference child."""
    if deadline is not None and time.monotonic() > deadline:
        return None, LATE
    child = children.new()
    try:
        with device_lock(device, policy.gpu_index, "shared", what=f"compiling {problem.name}"):  # untimed device work
            child.call("setup", _setup_args(problem, device, policy, timing=False), timeout_s=policy.build_timeout_s)
            reply = child.call("setup_timing", {"pool_seeds": [1], "compile": True, "compile_mode": policy.compile_mode,
                                                "warmup_ms": COMPILE_WARMUP_MS, "rehearse": None}, timeout_s=policy.build_timeout_s)
        return reply.get("compile_s"), ""
    except ChildError as exc:
        return None, f"torch.compile failed: {exc}"[:1000]
    finally:
        _close(child)


def time_one(problem: Any, device: str, policy: Policy, child: Child, workdir: Path,
             machine: dict[str, Any] | None = None) -> tuple[dict[str, Any], samples.TimingOutcome]:
    """(setup meta, timing outcome) for one problem in a fresh reference child; the timing (with
    the torch.compile that starts it, from inductor's caches after a compile phase) holds the device
    alone (judge.gpulock).
    RuntimeError when the child reports another machine than `machine` (the record's key)."""
    args = _setup_args(problem, device, policy, timing=True)
    with device_lock(device, policy.gpu_index, "exclusive" if "null_switches" in args else "shared", what=f"loading {problem.name}"):
        meta = child.call("setup", args, timeout_s=policy.build_timeout_s)  # with null_switches it times the empty call
    if meta.get("source_hash") != problem.hash:
        raise RuntimeError(f"the problem file changed on disk since it was loaded: {problem.path}")
    if machine is not None and (seen := machine_from_meta(meta, device)) != machine:
        raise RuntimeError(f"the timing child runs on {machine_key(seen)}, not on the probed {machine_key(machine)}")
    lead_us = policy.timing.lead_us if device == "cuda" and meta.get("lead_ok") else 0.0
    null_calls = measure.NULL_CALLS if device == "cuda" and policy.enabled("harness_overhead") else 0
    with device_lock(device, policy.gpu_index, "exclusive", what=f"timing the baselines of {problem.name}"):
        try:
            outcome = measure.run_timing(policy, child, None, workdir, baselines=True, lead_us=lead_us, null_calls=null_calls, cuda=device == "cuda",
                                         held=(device == "cuda" and meta.get("lead_ok") is True, False),
                                         pool_size=memory.pool_slots_for(meta, policy.enabled("fresh_inputs")))
        finally:
            _close(child)  # the child's teardown before the next timing may start
    return meta, outcome


def run(problems: list[Any], *, device: str, policy: Policy, jobs: int = 1, store: Any = None, refresh: bool = False,
        on_event: Callable[[str, Any, Any], None] | None = None, deadline: float | None = None) -> list[BaselineRecord]:
    """Baselines for the problems (loaded Problem objects, in order); records are stored (when a
    store is given) as each is made. Problems with a stored record for this machine, precision,
    compile mode and timing protocol are skipped unless `refresh`. on_event(kind, problem, value) reports progress:
    "cached", "compiled", "timed" (value: the record) and "phase" (problem None, value: text).
    Past `deadline` (a time.monotonic() value) no new compile or timing starts; those problems
    come back with an error saying so, and nothing is stored for them (a later run does them)."""
    say = on_event or (lambda *_a: None)
    machine = probe_machine(device, policy.gpu_index)
    key = machine_key(machine)
    records: dict[str, BaselineRecord] = {}
    todo = []
    for p in problems:
        hit = None if refresh or store is None else store.get_baseline(p.hash, key, policy.precision, policy.compile_mode)
        if hit is not None and hit.get("eager_ms") is not None and (hit.get("compile_ms") is not None or not policy.compile_baseline) \
                and hit.get("timing_key") == timing_key(policy, _size(p, device, policy)) and trusted(hit):
            rec = BaselineRecord(**{k: hit.get(k) for k in BaselineRecord.__dataclass_fields__ if k in hit})
            records[p.hash] = rec
            say("cached", p, rec)
        elif all(q.hash != p.hash for q in todo):  # the same text twice is timed once
            todo.append(p)
    children = _Children(device, policy)
    # One problem on the CPU backend: its timing child's compile is the run's first, as the phase's
    # would be, so that compile stands for it (one child and one compile fewer: 4-8 s). On a GPU the
    # phase stays: it keeps compiling (autotuning included) out of the device's exclusive lock.
    fused = device != "cuda" and len(todo) == 1 and policy.compile_baseline
    try:
        compiled: dict[str, tuple[float | None, str]] = {}
        if todo and policy.compile_baseline and not fused:
            say("phase", None, f"compiling {len(todo)} problem(s) with torch.compile ({policy.compile_mode}), {jobs} at a time")
            with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                futures = {p.hash: pool.submit(compile_one, p, device, policy, children, deadline) for p in todo}
                for p in todo:
                    compiled[p.hash] = futures[p.hash].result()
                    say("compiled", p, compiled[p.hash])
        if todo:
            say("phase", None, f"timing {len(todo)} problem(s), one at a time")
        # On the GPU the next problem's child imports torch while one is timed (host work only); on
        # the CPU backend that import would compete with the timing for the cores, so it waits.
        ahead = device == "cuda"
        nxt = children.new() if todo and ahead else None
        for i, p in enumerate(todo):
            child = nxt or children.new()
            nxt = children.new() if ahead and i + 1 < len(todo) else None
            rec = BaselineRecord(problem=p.name, problem_hash=p.hash, machine=machine, precision=policy.precision,
                                 compile_mode=policy.compile_mode, timing_key=timing_key(policy, _size(p, device, policy)),
                                 size=_size(p, device, policy), sandbox=written_under())
            cold, cerr = compiled.get(p.hash, (None, ""))
            rec.compile_s = cold
            if cerr == LATE or (deadline is not None and time.monotonic() > deadline):
                rec.error = LATE
                _close(child)
                records[p.hash] = rec
                say("timed", p, rec)
                continue
            # a problem whose compile failed is timed eagerly only
            pol = policy if not cerr else _without_compile(policy)
            try:
                try:
                    meta, outcome = time_one(p, device, pol, child, child.config.workdir, machine)
                except ChildError as exc:
                    if not fused or (deadline is not None and time.monotonic() > deadline):
                        raise
                    _close(child)
                    pol, child = _without_compile(policy), children.new()  # eagerly only, as after a failed phase
                    meta, outcome = time_one(p, device, pol, child, child.config.workdir, machine)  # failing too: a timing failure
                    cerr = f"torch.compile failed: {exc}"[:1000]
                if fused and not cerr:
                    rec.compile_s = outcome.compile_s
                times, detail = price(outcome, meta, device, pol)
                rec.eager_ms, rec.compile_ms, rec.detail = times.get("eager"), times.get("compile"), detail
                rec.compile_s_cached = outcome.compile_s
                rec.flops, rec.bytes = meta.get("flops"), meta.get("bytes")
                from kernelwright.judge import roofline

                if rec.flops is not None and rec.bytes is not None:
                    rec.floor_ms = roofline.floor_ms(rec.bytes, rec.flops)
                if cerr:
                    rec.error = cerr
            except (ChildError, RuntimeError) as exc:
                rec.error = (f"{cerr}; " if cerr else "") + f"timing failed: {exc}"[:1000]
            finally:
                _close(child)
            rec.created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
            if store is not None and rec.eager_ms is not None:
                store.put_baseline(rec.to_dict())
            records[p.hash] = rec
            say("timed", p, rec)
    finally:
        children.close()
    return [records[p.hash] for p in problems]


def _without_compile(policy: Policy) -> Policy:
    import dataclasses

    return dataclasses.replace(policy, compile_baseline=False)


def lookup(store_path: str | Path | None, problem_hash: str, meta: dict[str, Any], device: str, policy: Policy,
           size: str = "full") -> dict[str, Any] | None:
    """The stored baseline record for this problem on the machine a reference child reported
    (its setup meta), under the policy's precision, compile mode and timing protocol, at this size;
    None when there is none or the store cannot be read."""
    from kernelwright.store import Store, default_store_path

    path = Path(store_path).expanduser() if store_path is not None else default_store_path()
    if not path.is_file():
        return None  # nothing to read, and nothing is created
    try:
        with Store.open(path) as db:
            rec = db.get_baseline(problem_hash, machine_key(machine_from_meta(meta, device)), policy.precision, policy.compile_mode)
    except Exception:  # noqa: BLE001 - no cache is a miss, never a failed verdict
        return None
    if rec is not None and rec.get("timing_key") != timing_key(policy, size):
        return None  # timed under another protocol or at another size: not comparable with this candidate's time
    if rec is not None and not trusted(rec):
        return None  # written before the sandbox, or where a candidate could write the store: measured again
    return rec


def ratio_summary(records: list[BaselineRecord], levels: dict[str, int | None]) -> dict[Any, dict[str, Any]]:
    """Per level: the geometric mean, min and max of eager_ms / compile_ms (above 1: compile faster)
    over the problems with both times, and how many had both."""
    import math

    by: dict[Any, list[float]] = {}
    for r in records:
        if r.eager_ms and r.compile_ms:
            by.setdefault(levels.get(r.problem_hash), []).append(r.eager_ms / r.compile_ms)
    out = {}
    for level, ratios in by.items():
        out[level] = {"n": len(ratios), "geomean": math.exp(sum(math.log(x) for x in ratios) / len(ratios)),
                      "min": min(ratios), "max": max(ratios)}
    return out

