"""The synthesis run: candidates through the filters in worker processes, duplicates removed in order,
the accepted tasks exported, and a report of what each filter cost and kept.

Candidate i is a pure function of (seed, i), and the parent takes candidates in index order however
the workers finish, so a seed gives the same task set on any number of workers. Every worker result is
appended to `candidates.jsonl` as it arrives; a run started again with `resume=True` reads it back
and examines only what is missing. With `source` set, the candidates are an exported set's tasks
(`tasks.jsonl`) filtered again, for example on a GPU.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kernelwright.synth.filters import STAGES

KIND = "kernelwright.synth"
SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class SynthConfig:
    """One synthesis run."""

    n: int  # tasks to accept
    out: Path  # the run's folder
    seed: int = 0  # candidate i is compose(seed, i)
    device: str = "cpu"  # cpu (small-scale checks, runtime proxy) or cuda (full size, inductor, measured eager time)
    workers: int = 2  # worker processes
    window_ms: tuple[float, float] = (1.0, 100.0)  # eager runtime window on the H200
    against: tuple[str, ...] = ("builtin",)  # suites or folders to decontaminate against
    threshold: float = 0.9  # AST similarity at or above which a task is contaminated
    dedup_threshold: float = 1.0  # similarity at or above which two tasks are duplicates (1.0: same program up to numbers and names)
    weights: dict[int, float] | None = None  # operator-count weights (compose.OP_COUNT_WEIGHTS when None)
    backend: str | None = None  # torch.compile backend (aot_eager on cpu, inductor on cuda when None)
    timeout_s: float = 300.0  # per candidate
    max_candidates: int | None = None  # stop after this many (default 20 n + 100)
    source: Path | None = None  # re-filter this exported set (its tasks.jsonl) instead of composing
    composer: str = "rules"  # "rules", or the backend spec (PROVIDER:MODEL) of the LLM composer
    resume: bool = False
    timed: bool | None = None  # measure the eager time in a phase of its own (default: on cuda); else the proxy decides
    sandbox: str = "auto"  # the workers that run the composed task code: auto, strict or off (judge.sandbox)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, got {self.device!r}")
        lo, hi = self.window_ms
        if not 0 < lo < hi:
            raise ValueError(f"the runtime window must satisfy 0 < low < high, got {lo}, {hi}")
        if not 0 < self.threshold <= 1 or not 0 < self.dedup_threshold <= 1:
            raise ValueError(f"thresholds must be in (0, 1], got {self.threshold}, {self.dedup_threshold}")
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        if self.sandbox not in ("auto", "strict", "off"):
            raise ValueError(f"sandbox must be auto, strict or off, got {self.sandbox!r}")
        if self.weights is not None and (not self.weights or any(k not in range(1, 6) or v < 0 for k, v in self.weights.items())):
            raise ValueError(f"weights must map operator counts 1-5 to non-negative numbers, got {self.weights}")

    @property
    def measures_runtime(self) -> bool:
        return self.device == "cuda" if self.timed is None else self.timed

    @property
    def own_code(self) -> bool:
        """Whether every task's code is the rule composer's (ours): its workers then examine many
        jobs each. A model's programs, or a set read back with --from (made anywhere), get a fresh
        worker per job (synth.pool)."""
        return self.composer == "rules" and self.source is None

    @property
    def compile_backend(self) -> str:
        return self.backend or ("inductor" if self.device == "cuda" else "aot_eager")

    def identity(self) -> dict[str, Any]:
        """What must match for a resume: everything that changes which tasks come out (torch's version
        too, since the registry's functionals are introspected from it, and the calibration that sizes them)."""
        import hashlib

        import torch

        from kernelwright.synth.cost import CALIBRATION

        calibration = hashlib.sha256(CALIBRATION.read_bytes()).hexdigest()[:16] if CALIBRATION.exists() else None
        return {"seed": self.seed, "torch": torch.__version__, "calibration": calibration, "device": self.device,
                "window_ms": list(self.window_ms), "against": list(self.against),
                "threshold": self.threshold, "dedup_threshold": self.dedup_threshold, "weights": self.weights, "timed": self.measures_runtime,
                "backend": self.compile_backend, "source": str(self.source) if self.source else None, "composer": self.composer}


@dataclass
class _State:
    results: dict[int, dict[str, Any]] = field(default_factory=dict)  # final results by index
    checked: dict[int, dict[str, Any]] = field(default_factory=dict)  # GPU: passed the checks, waiting to be timed
    accepted: list[dict[str, Any]] = field(default_factory=list)
    frontier: int = 0  # indices below it went through selection
    keys: dict[str, str] = field(default_factory=dict)  # token stream of each accepted task -> its id
    tokens: list[list[str]] = field(default_factory=list)
    duplicates: list[dict[str, Any]] = field(default_factory=list)
    first_errors: dict[int, str] = field(default_factory=dict)  # machine errors on a first try (each tried once more)
    retrying: set[int] = field(default_factory=set)  # handed out again, no result back yet

    def take(self, result: dict[str, Any]) -> None:
        """File one worker result: a GPU check that passed waits for its timing; anything else is final
        (a timing result carries the seconds its checks took)."""
        i = result["index"]
        self.retrying.discard(i)
        if result.get("stage") == "error" and not result.get("retry"):
            self.first_errors[i] = result.get("reason", "")
        if result.get("phase") == "check" and result["status"] == "accepted":
            self.checked[i] = result
            self.results.pop(i, None)  # a check retried after a machine error: that error is over
            return
        if result.get("phase") == "time" and i in self.checked:
            seconds = dict(self.checked[i].get("seconds", {}))
            for k, v in result.get("seconds", {}).items():
                seconds[k] = seconds.get(k, 0.0) + v
            result = dict(result, seconds=seconds)
        self.results[i] = result


def run_synth(config: SynthConfig, progress: Callable[[dict[str, Any]], None] | None = None, composer: Any = None) -> dict[str, Any]:
    """Run (or resume) a synthesis; returns the report (also written to out/report.json and report.md).
    `composer` (synth.llm_composer.LLMComposer) writes each candidate's source instead of the rules."""
    from kernelwright.synth.cost import load_calibration
    from kernelwright.synth.export import export_or_skip, load_jsonl

    out = Path(config.out)
    given = load_jsonl(Path(config.source) / "tasks.jsonl") if config.source else None
    state = _open(config, out)
    context = {"device": config.device, "calibration": load_calibration(), "against": _references(config.against),
               "threshold": config.threshold, "atol": 1e-4, "rtol": 1e-4, "backend": config.compile_backend, "timed": config.measures_runtime}
    limit = len(given) if given is not None else (config.max_candidates or 20 * config.n + 100)
    fresh = not config.own_code or composer is not None  # a worker per job unless every task's code is the rule composer's
    t0 = time.monotonic()
    _advance(state, config, limit)
    with (out / "candidates.jsonl").open("a") as log:
        def sink(result: dict[str, Any]) -> bool:
            log.write(json.dumps(result) + "\n")
            log.flush()
            state.take(result)
            _advance(state, config, limit)
            if progress:
                progress({"accepted": len(state.accepted), "n": config.n, "examined": len(state.results.keys() | state.checked.keys()), "frontier": state.frontier})
            return _done(state, config, limit)

        if not config.measures_runtime:
            _drain(config.workers, context, config, _jobs(state, config, given, limit, composer, "all"), sink, fresh)
            _drain(1, context, config, _retries(state, config, given, composer, "all"), sink, fresh)  # errors that came back last
        else:
            while not _done(state, config, limit):
                before = (len(state.results), len(state.checked))
                _drain(config.workers, context, config, _jobs(state, config, given, limit, composer, "check"), sink, fresh)
                _drain(1, context, config, _retries(state, config, given, composer, "check"), sink, fresh)  # out of memory beside others: again, alone
                _drain(1, context, config, _time_jobs(state, config), sink, fresh)  # the GPU alone for each timing
                if (len(state.results), len(state.checked)) == before:
                    break
    wall = time.monotonic() - t0
    export = export_or_skip(state.accepted, out, device="cuda")  # no pyarrow: the files that need none, and `skipped` says why
    report = build_report(config, state, wall, export, context)
    _write_json(out / "report.json", report)
    (out / "report.md").write_text(render_markdown(report))
    return report


def _drain(workers: int, context: dict[str, Any], config: SynthConfig, jobs: Iterator[dict[str, Any]],
           sink: Callable[[dict[str, Any]], bool], fresh: bool) -> None:
    """Run jobs on a pool of workers until they run out or the sink says the run is done."""
    from kernelwright.synth.pool import Pool

    first = next(jobs, None)
    if first is None:
        return
    pool = Pool(workers, context, timeout_s=config.timeout_s, sandbox_mode=config.sandbox, fresh=fresh)
    try:
        for result in pool.run(_chain(first, jobs)):
            if sink(result):
                break
    finally:
        pool.close()


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


def _open(config: SynthConfig, out: Path) -> _State:
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.json"
    state = _State()
    if manifest.exists() and (out / "candidates.jsonl").exists():
        old = json.loads(manifest.read_text())
        if not config.resume:
            raise ValueError(f"{out} already holds a synthesis run; pass --resume to continue it or choose another --out")
        if old.get("identity") != config.identity():
            raise ValueError(f"{out} was made with other settings ({old.get('identity')}); a resume needs the same ones")
        for line in (out / "candidates.jsonl").read_text().splitlines():
            try:
                result = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash: that candidate runs again
            if isinstance(result.get("index"), int):
                state.take(result)
    _write_json(manifest, {"kind": KIND, "schema_version": SCHEMA_VERSION, "identity": config.identity()})
    return state


def _jobs(state: _State, config: SynthConfig, given: list[dict[str, Any]] | None, limit: int, composer: Any,
          phase: str) -> Iterator[dict[str, Any]]:
    """Candidates in index order, skipping those with a result. On a CPU, a candidate whose worker hit
    a machine error (out of memory) goes again first. On a GPU the checking phase stops once enough
    candidates wait for timing to likely fill the set (the timing phase then runs, and the loop comes
    back for more if it fell short); its machine errors are retried alone afterwards (_retries)."""
    i = 0
    while i < limit and not _done(state, config, limit):
        if phase == "all":
            yield from _retries(state, config, given, composer, phase)
        if phase == "check":
            missing = config.n - len(state.accepted)
            if len([k for k in state.checked if k not in state.results]) >= missing + missing // 2 + 2:
                return
        if i not in state.results and i not in state.checked and i not in state.retrying:
            yield _job(i, state, config, given, composer, phase)
        i += 1


def _job(i: int, state: _State, config: SynthConfig, given: list[dict[str, Any]] | None, composer: Any, phase: str,
         retry: bool = False) -> dict[str, Any]:
    job: dict[str, Any] = {"index": i, "seed": config.seed, "window": list(config.window_ms), "weights": config.weights, "phase": phase}
    if retry:
        job["retry"] = True
    earlier = (state.results.get(i) or {}).get("task") or {}
    if given is not None:
        job.update(source=given[i]["source"], task=given[i])
    elif composer is not None and earlier.get("source"):
        job.update(source=earlier["source"], task=earlier)  # a retry does not ask the model again
    elif composer is not None:
        job.update(composer.job(config.seed, i, config.weights))
    return job


def _retries(state: _State, config: SynthConfig, given: list[dict[str, Any]] | None, composer: Any, phase: str) -> Iterator[dict[str, Any]]:
    """Candidates whose first try ended in a machine error, once more each: a timing that failed is
    timed again (its checks passed), anything else goes through its checks again."""
    for i in sorted(k for k, r in state.results.items() if r.get("stage") == "error" and not r.get("retry")):
        timing = state.results[i].get("phase") == "time" and i in state.checked
        job = dict(_time_job(i, state, config), retry=True) if timing else _job(i, state, config, given, composer, phase, retry=True)
        del state.results[i]
        state.retrying.add(i)
        yield job


def _time_job(i: int, state: _State, config: SynthConfig) -> dict[str, Any]:
    task = state.checked[i]["task"]
    return {"index": i, "seed": config.seed, "window": list(config.window_ms), "phase": "time", "source": task["source"], "task": task}


def _time_jobs(state: _State, config: SynthConfig) -> Iterator[dict[str, Any]]:
    for i in sorted(state.checked):
        if i not in state.results and i not in state.retrying:
            yield _time_job(i, state, config)


def _done(state: _State, config: SynthConfig, limit: int) -> bool:
    return len(state.accepted) >= config.n or state.frontier >= limit


def _advance(state: _State, config: SynthConfig, limit: int) -> None:
    """Selection in index order: each finished candidate at the frontier is kept unless it duplicates
    one kept before it."""
    while state.frontier < limit and state.frontier in state.results and len(state.accepted) < config.n:
        result = state.results[state.frontier]
        if result.get("stage") == "error" and not result.get("retry"):
            break  # it will be tried again; selection waits for it
        state.frontier += 1
        if result["status"] != "accepted":
            continue
        dup = _duplicate_of(state, result["task"], config.dedup_threshold)
        if dup is not None:
            result.update(status="rejected", stage="duplicate", reason=f"duplicates {dup}")
            state.duplicates.append({"task": result["task"]["id"], "of": dup})
            continue
        state.accepted.append(result["task"])


def _duplicate_of(state: _State, task: dict[str, Any], threshold: float) -> str | None:
    """The id of an accepted task this one duplicates: the same token stream (the program up to names,
    numbers and docstrings; exact copies included), or, under a threshold below 1, a similarity at or
    above it. None keeps the task (and records its tokens)."""
    from kernelwright.problems.similarity import bounded_ratio, tokens

    toks = tokens(task["source"])
    key = "\x1f".join(toks)
    if key in state.keys:
        return state.keys[key]
    if threshold < 1.0:
        for other, theirs in zip(state.accepted, state.tokens):
            r = bounded_ratio(toks, theirs, threshold)
            if r is not None and r >= threshold:
                return other["id"]
    state.keys[key] = task["id"]
    state.tokens.append(toks)
    return None


def _references(specs: tuple[str, ...]) -> dict[str, list[str]]:
    """Token streams of every program to decontaminate against: a suite spec (builtin,
    kernelbench:PATH) or a folder of .py files."""
    from kernelwright.problems.similarity import tokens
    from kernelwright.problems.suite import load_suite

    found: dict[str, list[str]] = {}
    for spec in specs:
        folder = Path(spec)
        if ":" not in spec and spec != "builtin" and folder.is_dir():
            for path in sorted(folder.rglob("*.py")):
                try:
                    found[f"{spec}/{path.relative_to(folder)}"] = tokens(path.read_text())
                except (SyntaxError, UnicodeDecodeError):
                    continue
            continue
        for entry in load_suite(spec):
            found[f"{spec}/{entry.problem.name}" if spec != "builtin" else entry.problem.name] = tokens(entry.problem.source)
    return found


def build_report(config: SynthConfig, state: _State, wall_s: float, export: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    considered = [state.results[i] for i in range(state.frontier) if i in state.results]
    infra_stages = ("error", "timeout", "crash")  # the machine failed, not the task: outside the funnel
    infra = [r for r in considered if r.get("stage") in infra_stages]
    order = [s for s in STAGES if s != "runtime"]
    order.insert(order.index("duplicate") if config.measures_runtime else order.index("contaminated"), "runtime")
    stages = []
    entered = len(considered) - len(infra)
    for stage in order:
        failed = sum(1 for r in considered if r.get("stage") == stage)
        seconds = sum(r.get("seconds", {}).get(stage, 0.0) for r in considered)
        ran = any(stage in r.get("seconds", {}) for r in considered)
        if not failed and not ran and stage != "duplicate":
            continue  # a stage that never ran here (the composer's, when the sources were given)
        stages.append({"stage": stage, "entered": entered, "passed": entered - failed, "rejected": failed,
                       "acceptance": round((entered - failed) / entered, 4) if entered else None, "worker_seconds": round(seconds, 2)})
        entered -= failed
    infrastructure = {"counts": {k: sum(1 for r in infra if r["stage"] == k) for k in infra_stages},
                      "retried": sum(1 for i in state.first_errors if i < state.frontier),
                      "first_try_errors": [{"index": i, "reason": r[:160]} for i, r in sorted(state.first_errors.items())[:5]],
                      "examples": [{"index": r["index"], "stage": r["stage"], "reason": r["reason"][:200]} for r in infra[:5]]}
    hist: dict[str, int] = {}
    for t in state.accepted:
        hist[str(t["n_ops"])] = hist.get(str(t["n_ops"]), 0) + 1
    contaminated = [{"task": r["task"]["id"], "name": r["task"]["name"], "matches": r["task"].get("contamination", [])}
                    for r in considered if r.get("stage") == "contaminated" and r.get("task")]
    times = sorted(t.get("measured_ms") if config.measures_runtime else t.get("proxy_ms") for t in state.accepted)
    return {
        "kind": KIND, "schema_version": SCHEMA_VERSION, "config": {**config.identity(), "n": config.n, "workers": config.workers},
        "provenance": _provenance(context), "wall_s": round(wall_s, 1), "n_accepted": len(state.accepted), "n_requested": config.n,
        "n_candidates": len(considered), "acceptance": round(len(state.accepted) / len(considered), 4) if considered else None,
        "stages": stages, "infrastructure": infrastructure, "n_ops_histogram": dict(sorted(hist.items())), "ops": _op_counts(state.accepted),
        "runtime_ms": {"source": f"measured eager on {config.device}" if config.measures_runtime else "calibrated proxy",
                       "quantiles": {q: times[min(len(times) - 1, int(q * len(times)))] for q in (0.0, 0.1, 0.5, 0.9, 1.0)} if times else {}},
        "decontamination": {"against": list(config.against), "n_references": len(context["against"]), "threshold": config.threshold,
                            "n_contaminated": len(contaminated), "pairs": contaminated},
        "duplicates": state.duplicates, "export": export,
    }


def _op_counts(tasks: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in tasks:
        for name in t["ops"]:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _provenance(context: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kernelwright.report.bench import _commit  # $KERNELWRIGHT_COMMIT, else the checkout's (-dirty with local changes)

    commit = _commit()
    gpu = torch.cuda.get_device_name() if context["device"] == "cuda" and torch.cuda.is_available() else None
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit, "torch": torch.__version__,
            "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(), "gpu": gpu,
            "calibration": {k: context["calibration"].get(k) for k in ("intercept", "slope", "fitted_on", "spearman")}}


def render_markdown(report: dict[str, Any]) -> str:
    cfg, prov = report["config"], report["provenance"]
    lines = [f"# Synthesis: {report['n_accepted']} of {report['n_requested']} tasks", "",
             f"- seed {cfg['seed']}, device {cfg['device']}, {cfg['workers']} workers, compile backend {cfg['backend']}, window {cfg['window_ms']} ms",
             f"- wall time {report['wall_s']} s; {report['n_candidates']} candidates, {report['acceptance']} accepted overall",
             f"- torch {prov['torch']}, commit {prov['commit']}, {prov['cpus']} CPUs, GPU {prov['gpu']}, {prov['date']}", "",
             "| stage | entered | passed | acceptance | worker seconds |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {s['stage']} | {s['entered']} | {s['passed']} | {s['acceptance']} | {s['worker_seconds']} |" for s in report["stages"]]
    infra = report["infrastructure"]
    lines += ["", f"Machine errors (out of memory beside other workers, say) on a first try: {infra['retried']}, each tried once more (alone on a GPU); "
              f"failures left after that, outside the funnel: {infra['counts']}"]
    lines += [f"- {e['index']} {e['stage']}: {e['reason']}" for e in infra["examples"]]
    lines += ["", "Operators per task: " + ", ".join(f"{k}: {v}" for k, v in report["n_ops_histogram"].items()), "",
              f"Runtime ({report['runtime_ms']['source']}), quantiles in ms: {report['runtime_ms']['quantiles']}", ""]
    d = report["decontamination"]
    lines += [f"Decontamination against {d['against']} ({d['n_references']} programs) at {d['threshold']}: {d['n_contaminated']} rejected"]
    lines += [f"- {p['task']} {p['name']}: " + ", ".join(f"{m['reference']} {m['similarity']}" for m in p["matches"]) for p in d["pairs"]]
    lines += ["", *(f"- {line}" for line in written_lines(report, "this folder"))]
    return "\n".join(lines) + "\n"


RUN_FILES = ("report.json", "report.md", "candidates.jsonl", "manifest.json")  # what every run writes beside the export


def written_lines(report: dict[str, Any], where: str | Path) -> list[str]:
    """What the run wrote in its folder (named `where`), and each file it skipped with why (from the
    export summary)."""
    from kernelwright import written

    export = report["export"]
    files = export["files"]
    wrote = [f"{files['kernelbench']}/ ({export['n']} task file(s))" if k == "kernelbench" else name for k, name in files.items()]
    return [written.wrote_in(where, [*wrote, *RUN_FILES]), *(written.skipped(name, why) for name, why in export.get("skipped", {}).items())]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


__all__ = ["SynthConfig", "run_synth", "build_report", "render_markdown", "asdict"]
