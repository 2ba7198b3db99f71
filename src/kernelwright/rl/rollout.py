"""Rollouts without a trainer: episodes of a model against the environment, many at once, each
recorded as it finishes in `OUT/episodes.jsonl` and in the store.

Episode `seq` works on task `seq mod len(tasks)`. A finished episode is appended to the jsonl (one
line, flushed and synced) and put in the store under (rollout, seq) before it counts as done, so a
crash loses only the episodes still running; `resume` reads the jsonl back, drops a line the crash
cut short, and runs only the episodes missing. The store keeps the first record of a (rollout, seq),
so an episode is never recorded twice.

A model request that fails (the server is down, the script ran out) ends its episode unrecorded, so
that `--resume` runs it again; three such episodes in a row stop the rollout. One process at a time
may use an OUT folder (its `.lock`); resume takes the model, the reward and the tasks of
`rollout.json` and refuses others.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kernelwright.agent.tools import TOOL_SPECS
from kernelwright.core.runs import LLMError
from kernelwright.rl.env import EnvConfig, KernelEnv
from kernelwright.rl.tasks import Task

EPISODES = "episodes.jsonl"
MANIFEST = "rollout.json"


@dataclass(frozen=True)
class Plan:
    """What a rollout runs: kept in OUT/rollout.json, checked again on resume."""

    rollout: str  # its id in the store
    model: str
    tasks: list[str]  # task ids, in order
    episodes: int
    created_at: str
    reward: str = "milestone"  # the reward's kind
    source: str = ""  # the --tasks spec, for the record
    language: str = "cuda"  # what the prompts ask the kernels to be written in (the objective's)


MAX_MODEL_FAILURES = 3  # model requests failing in a row (episodes ended by them) before the rollout stops


class ModelDown(RuntimeError):
    """The model's server failed several episodes in a row: the rollout stops; --resume reruns them."""


def read_rows(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The episode records of a jsonl, in file order, and how many bytes they fill. A last line
    without its newline (a crash cut it short) is left out; a bad line anywhere else is an error,
    never silently dropped. The file is only read."""
    if not path.exists():
        return [], 0
    rows, good = [], 0
    lines = path.read_bytes().splitlines(keepends=True)
    for n, line in enumerate(lines, 1):
        if not line.endswith(b"\n") and n == len(lines):
            break
        try:
            row = json.loads(line)
            int(row["seq"])
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}:{n}: not an episode record; the file was changed by hand or by another program") from None
        rows.append(row)
        good += len(line)
    return rows, good


def _read_done(path: Path) -> dict[int, dict[str, Any]]:
    """The episodes a rollout's jsonl holds, by seq (the first of each); a last line a crash cut
    short is cut off the file, so the next append starts on a line of its own."""
    rows, good = read_rows(path)
    if path.exists() and good < path.stat().st_size:
        with open(path, "r+b") as f:
            f.truncate(good)
    done: dict[int, dict[str, Any]] = {}
    for row in rows:
        done.setdefault(int(row["seq"]), row)
    return done


def _plan(out: Path, tasks: list[Task], model: str, episodes: int | None, resume: bool, reward: str, source: str,
          language: str = "cuda") -> Plan:
    manifest = out / MANIFEST
    ids = [t.id for t in tasks]
    if manifest.exists():
        if not resume:
            raise ValueError(f"{out} already holds a rollout: pass --resume to continue it, or choose another --out")
        plan = Plan(**json.loads(manifest.read_text()))
        if plan.tasks != ids:
            raise ValueError(f"{out}: the tasks differ from the rollout's ({len(plan.tasks)} then, {len(ids)} now): resume with the same --tasks")
        if model != plan.model or reward != plan.reward:
            raise ValueError(f"{out}: the rollout ran model {plan.model} with the {plan.reward} reward; resume it with the same")
        if language != plan.language:
            raise ValueError(f"{out}: the rollout's prompts asked for {plan.language} kernels; resume it with --language {plan.language}")
        if episodes is not None and episodes < plan.episodes:
            raise ValueError(f"{out}: the rollout was planned with {plan.episodes} episodes; --episodes may grow, not shrink")
        return replace(plan, episodes=episodes or plan.episodes)
    if resume:
        raise ValueError(f"{out}: no rollout to resume ({MANIFEST} is missing)")
    out.mkdir(parents=True, exist_ok=True)
    return Plan(f"ro-{uuid.uuid4().hex[:8]}", model, ids, episodes or len(ids), datetime.now(timezone.utc).isoformat(timespec="seconds"),
                reward, source, language)


def _lock(out: Path) -> Any:
    """OUT's lock, held for the whole rollout: a second process on the same folder is refused."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    f = open(out / ".lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise ValueError(f"{out} is in use by another rollout (its .lock is held)") from None
    return f


def run_episode(env: KernelEnv, task: Task, backend: Any, key: str) -> dict[str, Any]:
    """One episode of `backend` on `task`; the environment's record (its end says when the model failed)."""
    env.reset(task)
    specs = TOOL_SPECS if env.config.tools else ()
    while not env.done:
        try:
            reply = backend.complete(env.messages, specs, key=f"{key}/t{env.turns}")
        except LLMError as exc:
            env.abort(f"the model's request failed ({exc.kind}): {str(exc)[:300]}")
            break
        env.step(reply)
    return env.record


def run_rollout(tasks: list[Task], backend: Any, config: EnvConfig, *, episodes: int | None, concurrency: int, out: Path,
                resume: bool = False, progress: Callable[[dict[str, Any]], None] | None = None, source: str = "",
                start_within_s: float | None = None) -> dict[str, Any]:
    """Run the rollout's missing episodes, `concurrency` at a time; its summary. `episodes` None: the
    plan's on resume, one per task otherwise. `start_within_s`: no episode starts later than this
    after the call began (those running finish); the rest are `not_started`, for --resume."""
    if (episodes is not None and episodes < 1) or concurrency < 1:
        raise ValueError(f"--episodes and --concurrency must be at least 1, got {episodes} and {concurrency}")
    if start_within_s is not None and not start_within_s > 0:
        raise ValueError(f"the time to start episodes in must be positive, got {start_within_s}")
    if not tasks:
        raise ValueError("no tasks")
    out = Path(out)
    held = _lock(out)
    try:
        return _run(tasks, backend, config, episodes, concurrency, out, resume, progress, source, start_within_s)
    finally:
        held.close()


def _run(tasks: list[Task], backend: Any, config: EnvConfig, episodes: int | None, concurrency: int, out: Path, resume: bool,
         progress: Callable[[dict[str, Any]], None] | None, source: str, start_within_s: float | None) -> dict[str, Any]:
    from kernelwright.store import Store
    from kernelwright.store.runs import json_ready

    model = str(getattr(backend, "name", ""))
    plan = _plan(out, tasks, model, episodes, resume, config.reward.kind, source, config.objective.language)
    (out / MANIFEST).write_text(json.dumps(asdict(plan), indent=1))
    config = replace(config, tools=config.tools and bool(getattr(backend, "supports_tools", False)))
    jsonl = out / EPISODES
    done = _read_done(jsonl)
    with Store.open(config.store) as db:
        for seq, row in done.items():  # a crash between the jsonl and the store: the store catches up
            db.put_episode(plan.rollout, seq, row)
    todo = [s for s in range(plan.episodes) if s not in done]
    lock, t0 = threading.Lock(), time.monotonic()
    state = {"new": 0, "failures": 0, "not_started": 0}
    stop = threading.Event()
    late = None if start_within_s is None else t0 + start_within_s

    def keep(row: dict[str, Any]) -> None:  # under the lock, in the worker that ran the episode
        line = json.dumps(json_ready(row), allow_nan=False, default=str) + "\n"  # a NaN the model sent is null here
        with open(jsonl, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        with Store.open(config.store) as db:
            db.put_episode(plan.rollout, row["seq"], row)
        done[row["seq"]] = row
        state["new"] += 1

    def one(seq: int) -> None:
        if stop.is_set():
            return
        if late is not None and time.monotonic() > late:
            with lock:
                state["not_started"] += 1
            return
        task = tasks[seq % len(tasks)]
        with KernelEnv(config) as env:
            try:
                record = run_episode(env, task, backend, f"{seq}")  # keys a replay recording can name: SEQ/tTURN
            except Exception as exc:  # noqa: BLE001 - the environment's own failure: the episode is excluded, the rollout goes on
                why = f"{type(exc).__name__}: {str(exc)[:300]}"
                if getattr(env, "_episode", None) is not None and not env.done:
                    env.abort(why)
                    record = env.record
                else:  # the task did not start
                    record = {"id": None, "task": task.to_dict(), "end": f"aborted: the task did not start: {why}", "turns": 0, "tokens": 0,
                              "wall_s": 0.0, "final": {"verdict": None}, "excluded": True, "messages": [],
                              "reward": {"value": None, "kind": config.reward.kind, "reason": why, "milestone": None, "excluded": True}}
        row = {"seq": seq, "rollout": plan.rollout, "model": plan.model, **record}
        model_failed = str(row.get("end", "")).startswith("aborted: the model's request failed")
        with lock:
            if model_failed:  # not the policy's episode: left unrecorded, so --resume runs it again
                state["failures"] += 1
                if state["failures"] >= MAX_MODEL_FAILURES:
                    stop.set()
                return
            state["failures"] = 0
            keep(row)
        if progress:
            progress(row)

    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        futures = [pool.submit(one, s) for s in todo]
        try:
            for fut in concurrent.futures.as_completed(futures):
                fut.result()
        except BaseException:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    if stop.is_set():
        raise ModelDown(f"the model's requests failed in {MAX_MODEL_FAILURES} episodes in a row; {len(done)} of {plan.episodes} "
                        f"episodes are recorded in {jsonl}: --resume runs the rest once the server answers")
    return summary(plan, done, new=state["new"], wall_s=time.monotonic() - t0, not_started=state["not_started"])


def summary(plan: Plan, done: dict[int, dict[str, Any]], *, new: int, wall_s: float, not_started: int = 0) -> dict[str, Any]:
    rows = [done[s] for s in sorted(done)]
    paid = [r["reward"]["value"] for r in rows if not r.get("excluded") and r.get("reward", {}).get("value") is not None]
    milestones: dict[str, int] = {}
    for r in rows:
        key = "excluded" if r.get("excluded") else str((r.get("reward") or {}).get("milestone"))
        milestones[key] = milestones.get(key, 0) + 1
    return {"rollout": plan.rollout, "model": plan.model, "episodes": plan.episodes, "recorded": len(rows), "new": new,
            "excluded": sum(1 for r in rows if r.get("excluded")), "mean_reward": sum(paid) / len(paid) if paid else None,
            "milestones": milestones, "wall_s": round(wall_s, 2), "not_started": not_started,
            "episodes_per_hour": round(new * 3600 / wall_s, 1) if wall_s > 0 and new else None}
