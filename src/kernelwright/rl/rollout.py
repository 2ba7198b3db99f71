"""Rollouts without a trainer: episodes of a model against the environment, many at once, each
recorded as it finishes in `OUT/episodes.jsonl` and in the store.

Episode `seq` works on task `seq mod len(tasks)`. A finished episode is appended to the jsonl (one
line, flushed and synced) and put in the store under (rollout, seq) before it counts as done, so a
crash loses only the episodes still running; `resume` reads the jsonl back, drops a line the crash
cut short, and runs only the episodes missing. The store keeps the first record of a (rollout, seq),
so an episode is never recorded twice.

A model request that fails (the server is down, the script ran out) ends its episode without a
reward (`KernelEnv.abort`), as the judge's own failure does: excluded, never -1.
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


def _read_done(path: Path) -> dict[int, dict[str, Any]]:
    """The episodes a jsonl holds, by seq; a last line a crash cut short is cut off the file."""
    done: dict[int, dict[str, Any]] = {}
    if not path.exists():
        return done
    data = path.read_bytes()
    good = 0
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        try:
            row = json.loads(line)
        except ValueError:
            break
        done.setdefault(int(row["seq"]), row)
        good += len(line)
    if good < len(data):
        with open(path, "r+b") as f:
            f.truncate(good)
    return done


def _plan(out: Path, tasks: list[Task], model: str, episodes: int, resume: bool) -> Plan:
    manifest = out / MANIFEST
    ids = [t.id for t in tasks]
    if manifest.exists():
        if not resume:
            raise ValueError(f"{out} already holds a rollout: pass --resume to continue it, or choose another --out")
        plan = Plan(**json.loads(manifest.read_text()))
        if plan.tasks != ids:
            raise ValueError(f"{out}: the tasks differ from the rollout's ({len(plan.tasks)} then, {len(ids)} now): resume with the same --tasks")
        if episodes < plan.episodes:
            raise ValueError(f"{out}: the rollout was planned with {plan.episodes} episodes; --episodes may grow, not shrink")
        return replace(plan, episodes=episodes, model=model)
    if resume:
        raise ValueError(f"{out}: no rollout to resume ({MANIFEST} is missing)")
    out.mkdir(parents=True, exist_ok=True)
    return Plan(f"ro-{uuid.uuid4().hex[:8]}", model, ids, episodes, datetime.now(timezone.utc).isoformat(timespec="seconds"))


def run_episode(env: KernelEnv, task: Task, backend: Any, key: str) -> dict[str, Any]:
    """One episode of `backend` on `task`; the environment's record."""
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


def run_rollout(tasks: list[Task], backend: Any, config: EnvConfig, *, episodes: int, concurrency: int, out: Path,
                resume: bool = False, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the rollout's missing episodes, `concurrency` at a time; its summary."""
    if episodes < 1 or concurrency < 1:
        raise ValueError(f"--episodes and --concurrency must be at least 1, got {episodes} and {concurrency}")
    if not tasks:
        raise ValueError("no tasks")
    out = Path(out)
    plan = _plan(out, tasks, str(getattr(backend, "name", "")), episodes, resume)
    (out / MANIFEST).write_text(json.dumps(asdict(plan), indent=1))
    config = replace(config, tools=config.tools and bool(getattr(backend, "supports_tools", False)))
    jsonl = out / EPISODES
    done = _read_done(jsonl)
    from kernelwright.store import Store

    with Store.open(config.store) as db:
        for seq, row in done.items():  # a crash between the jsonl and the store: the store catches up
            db.put_episode(plan.rollout, seq, row)
    todo = [s for s in range(episodes) if s not in done]
    lock, t0, new = threading.Lock(), time.monotonic(), 0

    def one(seq: int) -> dict[str, Any]:
        task = tasks[seq % len(tasks)]
        with KernelEnv(config) as env:
            try:
                record = run_episode(env, task, backend, f"{plan.rollout}/{seq}")
            except Exception as exc:  # noqa: BLE001 - the environment's own failure: excluded, and the rollout goes on
                if not env.done and getattr(env, "_episode", None) is not None:
                    env.abort(f"{type(exc).__name__}: {str(exc)[:300]}")
                    record = env.record
                else:
                    raise
        return {"seq": seq, "rollout": plan.rollout, **record}

    def keep(row: dict[str, Any]) -> None:
        nonlocal new
        line = json.dumps(row, allow_nan=False, default=str) + "\n"
        with lock:
            with open(jsonl, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            with Store.open(config.store) as db:
                db.put_episode(plan.rollout, row["seq"], row)
            done[row["seq"]] = row
            new += 1
        if progress:
            progress(row)

    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for fut in concurrent.futures.as_completed([pool.submit(one, s) for s in todo]):
            keep(fut.result())
    return summary(plan, done, new=new, wall_s=time.monotonic() - t0)


def summary(plan: Plan, done: dict[int, dict[str, Any]], *, new: int, wall_s: float) -> dict[str, Any]:
    rows = [done[s] for s in sorted(done)]
    paid = [r["reward"]["value"] for r in rows if not r.get("excluded") and r.get("reward", {}).get("value") is not None]
    milestones: dict[str, int] = {}
    for r in rows:
        key = "excluded" if r.get("excluded") else str((r.get("reward") or {}).get("milestone"))
        milestones[key] = milestones.get(key, 0) + 1
    return {"rollout": plan.rollout, "model": plan.model, "episodes": plan.episodes, "recorded": len(rows), "new": new,
            "excluded": sum(1 for r in rows if r.get("excluded")), "mean_reward": sum(paid) / len(paid) if paid else None,
            "milestones": milestones, "wall_s": round(wall_s, 2),
            "episodes_per_hour": round(new * 3600 / wall_s, 1) if wall_s > 0 and new else None}
