"""A workspace opened for work: its judge, its tools, and its history in the store.

`kernelwright check` and `kernelwright mcp` both work through a Session, so a check from the
command line and a tool call from a coding agent are judged alike and kept alike: every compile,
verify, profile, check and submission is a row of the workspace's history (store.workspaces).

Generated code never runs in this process: the Session judges through agent.judging.Judge, which
builds with the compilers and runs candidates in the judge's children.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelwright.agent import feedback
from kernelwright.agent.judging import BuildReport, Judge, Judged
from kernelwright.core.runs import ToolCall, ToolResult, ToolSpec
from kernelwright.agent.tools import TOOL_SPECS, Tools
from kernelwright.agent.workspace import Workspace
from kernelwright.judge.snapshot import main_name
from kernelwright.workspace.exits import Exit, for_status
from kernelwright.workspace.layout import MAIN, PROTECTED, WorkspaceConfig, find_root, load_reference, read_config

log = logging.getLogger(__name__)

JUDGED_TOOLS = ("compile", "verify", "profile", "submit")  # tool calls kept in the history
MODES = ("quick", "full", "final")
_KIND = {"quick": "check --quick", "full": "check", "final": "check --final"}


@dataclass(frozen=True)
class CheckResult:
    """One check (or judged tool call), as reported and as kept in the history."""

    seq: int | None  # its number in the workspace's history (None when the store could not keep it)
    exit_code: Exit  # what the check's exit code says (workspace.exits)
    status: str  # the verdict's status, or build_ok / compile_error for a build alone
    text: str  # the compact report
    data: dict[str, Any] = field(default_factory=dict)  # everything for --json: verdict, build, ncu, best, ...


def open_session(root: str | Path, *, device: str = "auto", store: str | Path | None = None,
                 progress: Callable[[str], None] | None = None) -> "Session":
    """Open the workspace holding `root`; ValueError when there is none or its reference changed."""
    found = find_root(root)
    config = read_config(found)
    return Session(found, config, device=device, store=Path(store).expanduser() if store is not None else None, progress=progress)


class Session:
    """One open workspace. `call` and `check` are thread-safe: one at a time per Session."""

    def __init__(self, root: Path, config: WorkspaceConfig, *, device: str, store: Path | None,
                 progress: Callable[[str], None] | None) -> None:
        from kernelwright.judge.evaluate import resolve_device
        from kernelwright.store import default_store_path

        self.root, self.config = root, config
        self.problem = load_reference(root, config)
        self.objective = config.objective_obj()
        self.device = resolve_device(config.device if device == "auto" else device)
        self.store = store if store is not None else default_store_path()
        self.progress = progress
        self.judge = Judge(self.problem, self.objective, device=self.device, store=self.store, progress=progress)
        self.workspace = Workspace(root, judged_as_file=True, protected=PROTECTED)
        self.tools = Tools(self.workspace, self.judge, target_speedup=self.objective.target_speedup)
        self._lock = threading.Lock()
        self._registered = False
        self._pin()

    def set_sanitize_timeout(self, seconds: float) -> None:
        """compute-sanitizer's limit per tool in final judgements (check --final, submit)."""
        import dataclasses

        self.objective = dataclasses.replace(self.objective, sanitize_timeout_s=float(seconds))  # validated there
        self.judge.objective = self.objective

    @property
    def specs(self) -> tuple[ToolSpec, ...]:
        return TOOL_SPECS

    # -- tool calls (MCP) ---------------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any], *, source: str) -> ToolResult:
        """Run one tool; the caller's mistakes come back as ToolResult(ok=False). Judged tools are
        kept in the history; `submit` is the final judgement (as `check --final`)."""
        with self._lock:
            why = self._reference_problem()
            if why:
                return ToolResult(text=why, ok=False)
            if name == "submit":
                return self._submit(arguments, source)
            result = self.tools.run(ToolCall(id=f"{source}-{time.time_ns()}", name=name, arguments=arguments))
            if name in JUDGED_TOOLS and ("mode" in result.data or "build_ok" in result.data):
                self._record_tool(name, source, result)
            return result

    def _submit(self, arguments: dict[str, Any], source: str) -> ToolResult:
        if not self.workspace.has_candidate():
            return ToolResult(text=f"the workspace has no {MAIN}; write it first", ok=False)
        checked = self._check_locked("final", ncu=False, breakdown=False, source=source, kind="submit",
                                     note=str(arguments.get("note") or ""))
        return ToolResult(text=checked.text, ok=checked.exit_code == Exit.OK, verdict=checked.data.get("verdict"),
                          candidate_hash=checked.data.get("candidate_hash"), submitted=checked.exit_code == Exit.OK,
                          data={"status": checked.status, "exit_code": int(checked.exit_code), "check": checked.seq})

    def _record_tool(self, name: str, source: str, result: ToolResult) -> None:
        verdict = result.verdict or {}
        status = str(result.data.get("status") or ("build_ok" if result.data.get("build_ok") else "compile_error"))
        code = Exit.OK if status == "build_ok" else Exit.COMPILE_ERROR if status == "compile_error" else for_status(status)
        payload = {k: v for k, v in result.data.items() if k in ("mode", "seconds", "resources", "ncu", "build_ok")}
        self._keep(kind=name, source=source, status=status, code=code, text=result.text, payload=payload,
                   candidate_hash=result.candidate_hash or self._hash(), verdict=verdict, verdict_id=result.data.get("verdict_id"))

    # -- checks (CLI) -------------------------------------------------------------------------

    def check(self, mode: str, *, ncu: bool = True, breakdown: bool = False, source: str = "cli") -> CheckResult:
        """compile, then verify (quick), full judgement (full) or the final judgement (final)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        with self._lock:
            why = self._reference_problem()
            if why:
                raise ValueError(why)
            if not self.workspace.has_candidate():
                raise ValueError(f"{self.root / MAIN} is missing: the candidate is model_new.py (class ModelNew)")
            return self._check_locked(mode, ncu=ncu, breakdown=breakdown, source=source, kind=_KIND[mode])

    def _check_locked(self, mode: str, *, ncu: bool, breakdown: bool, source: str, kind: str, note: str = "") -> CheckResult:
        from kernelwright.workspace import report

        t0 = time.perf_counter()
        path = self.workspace.candidate_path
        files, digest = self.workspace.files(), self._hash()  # what is kept for a build that fails
        self._say(f"compiling {MAIN} and kernels/")
        build = self.judge.compile(path)
        if not build.ok:
            text = report.compose(self, kind=kind, digest=digest, build=build, judged=None, extra={})
            return self._keep(kind=kind, source=source, status="compile_error", code=Exit.COMPILE_ERROR, text=text,
                              payload=_payload(mode, build, {}, t0, note), candidate_hash=digest, build=build, files=files)
        judged = {"quick": self.judge.verify, "full": self.judge.full, "final": self.judge.final}[mode](path)
        extra = self._extras(judged, ncu=ncu and mode == "full", breakdown=breakdown and mode == "full")
        code = report.exit_code(judged, final=mode == "final")
        text = report.compose(self, kind=kind, digest=digest, build=build, judged=judged, extra=extra)
        return self._keep(kind=kind, source=source, status=judged.verdict.status.value, code=code, text=text,
                          payload=_payload(mode, build, extra, t0, note), candidate_hash=judged.candidate_hash,
                          verdict=judged.verdict.to_dict(), verdict_id=judged.verdict_id, build=build, files=judged.files)

    def _extras(self, judged: Judged, *, ncu: bool, breakdown: bool) -> dict[str, Any]:
        """ncu per kernel (a correct candidate on the GPU) and the reference's breakdown, when asked."""
        extra: dict[str, Any] = {}
        correct = judged.verdict.status.value == "correct"
        if ncu and correct and self.device == "cuda":
            self._say("profiling the candidate's kernels with ncu")
            extra["ncu"] = self.tools._ncu_for(judged)
        if breakdown:
            self._say("profiling the reference (torch profiler)")
            extra["breakdown"] = self.tools._reference_breakdown()
        return extra

    # -- history ------------------------------------------------------------------------------

    def _keep(self, *, kind: str, source: str, status: str, code: Exit, text: str, payload: dict[str, Any],
              candidate_hash: str | None, verdict: dict[str, Any] | None = None, verdict_id: str | None = None,
              build: BuildReport | None = None, files: dict[str, str] | None = None) -> CheckResult:
        """Record the check in the store (a store failure is logged, never a lost report). `files`:
        the candidate's files as judged (else read now)."""
        from kernelwright.store import Store

        verdict = verdict or {}
        seq = None
        try:
            with Store.open(self.store) as db:
                self._register(db)
                files = files if files is not None else (self.workspace.files() if self.workspace.has_candidate() else None)
                if candidate_hash and files:
                    db.put_candidate(candidate_hash, (build.build_path if build else None), files, main_name(self.workspace.candidate_path))
                seq = db.add_check(self.config.id, kind=kind, source=source, status=status, report=text, payload=payload,
                                   candidate_hash=candidate_hash, exit_code=int(code), runtime_ms=verdict.get("runtime_ms"),
                                   speedup_vs_best=verdict.get("speedup_vs_best"), verdict_id=verdict_id)
        except Exception as exc:  # noqa: BLE001
            log.warning("the check was not kept in the store %s: %s: %s", self.store, type(exc).__name__, exc)
        data = {"workspace": self.config.id, "check": seq, "kind": kind, "status": status, "exit_code": int(code),
                "candidate_hash": candidate_hash, "verdict_id": verdict_id, "verdict": verdict or None, **payload}
        return CheckResult(seq, code, status, text, data)

    def _register(self, db: Any) -> None:
        if not self._registered:
            db.register_workspace(self.config.id, root=self.root, problem_hash=self.problem.hash,
                                  problem_name=self.config.problem_name, config=self.config.to_dict())
            self._registered = True

    def _pin(self) -> None:
        """Register the workspace in the store, or compare it with its first record there: the
        problem and the policy are fixed for a workspace's life, so an edit of workspace.json that
        changes them (to loosen a tolerance, allow torch compute, or point at another reference)
        stops the work. ValueError names what changed; a store that cannot be opened is logged."""
        from kernelwright.store import Store

        try:
            with Store.open(self.store) as db:
                try:
                    first = db.get_workspace(self.config.id)
                except KeyError:
                    self._register(db)
                    return
                self._register(db)  # where it lives now
        except Exception as exc:  # noqa: BLE001 - the history is a record, not the judge
            log.warning("the workspace could not be compared with its record in %s: %s: %s", self.store, type(exc).__name__, exc)
            return
        why = pinned_difference(first, self.config)
        if why:
            raise ValueError(f"{self.root / '.kernelwright' / 'workspace.json'} no longer matches this workspace's record in the store "
                             f"{self.store} (made {first['created_at'][:19]}): {why}. A workspace's problem and policy are fixed; "
                             f"make a new workspace for another policy")

    def policy_digest(self) -> str:
        """A short hash of the workspace's objective, shown in every report."""
        return policy_digest(self.config.objective)

    def history(self, since: int = 0) -> list[dict[str, Any]]:
        """The workspace's checks from the store, oldest first ([] before the first check)."""
        from kernelwright.store import Store

        with Store.open(self.store) as db:
            try:
                db.get_workspace(self.config.id)
            except KeyError:
                return []
            return db.workspace_checks(self.config.id, since=since)

    def best(self) -> dict[str, Any] | None:
        """The fastest correct timed check so far, or None."""
        from kernelwright.store import Store

        try:
            with Store.open(self.store) as db:
                return db.best_check(self.config.id)
        except Exception as exc:  # noqa: BLE001 - the best line is a courtesy
            log.warning("could not read the best check: %s", exc)
            return None

    # -- helpers ------------------------------------------------------------------------------

    def _reference_problem(self) -> str:
        """Why the workspace cannot be judged now ('' when it can): its reference changed."""
        try:
            load_reference(self.root, self.config)
        except (ValueError, OSError) as exc:
            return str(exc)
        return ""

    def _hash(self) -> str | None:
        try:
            return self.workspace.hash()
        except ValueError:
            return None

    def _say(self, msg: str) -> None:
        log.info("%s", msg)
        if self.progress is not None:
            self.progress(msg)


def policy_digest(objective: dict[str, Any]) -> str:
    """The first 8 hex digits of the sha256 of the objective's settings (sorted JSON)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(objective, sort_keys=True).encode()).hexdigest()[:8]


def pinned_difference(first: dict[str, Any], config: WorkspaceConfig) -> str:
    """How the workspace's settings differ from its first record in the store ('' when they do not)."""
    if first.get("problem_hash") != config.problem_hash:
        return f"the reference's hash is now {config.problem_hash[:12]}, recorded {str(first.get('problem_hash'))[:12]}"
    from kernelwright.agent.objective import Objective

    defaults = Objective().to_dict()  # a setting a newer kernelwright added counts as its default in older records
    recorded = {**defaults, **((first.get("config") or {}).get("objective") or {})}
    now = {**defaults, **config.objective}
    changed = sorted(k for k in set(recorded) | set(now) if recorded.get(k) != now.get(k))
    if changed:
        return "the policy changed: " + ", ".join(f"{k} {recorded.get(k)!r} -> {now.get(k)!r}" for k in changed)
    return ""


def _payload(mode: str, build: BuildReport, extra: dict[str, Any], t0: float, note: str) -> dict[str, Any]:
    """What the history keeps beside the report: the build, ncu and breakdown figures, the seconds."""
    payload: dict[str, Any] = {"mode": mode, "seconds": round(time.perf_counter() - t0, 2),
                               "build": {"ok": build.ok, "build_path": build.build_path, "seconds": round(build.seconds, 2),
                                         "resources": build.resources, "log": feedback.head(build.log, 2000) if not build.ok else ""}}
    payload.update(extra)
    if note:
        payload["note"] = note
    return payload
