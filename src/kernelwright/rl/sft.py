"""Rejection fine-tuning data: the chat-format trajectories of good episodes (the stage of CUDA
Agent's training that fine-tunes on the episodes that earned enough reward).

Episodes come from rollout folders (`OUT/episodes.jsonl`) or the store's `rl_episodes`. An episode
is kept when it is not excluded and its reward is at least the minimum, and only from the split
asked for (train by default: the held-out problems never reach training data). Two episodes whose
conversations are the same on the same problem are one example. Each line holds the messages in the
Chat Completions form (tool calls with their arguments as JSON text), the tool schemas when the
episode used tools, and the episode's task, split, reward and id.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from kernelwright.agent.tools import TOOL_SPECS
from kernelwright.core.runs import Message
from kernelwright.llm.openai_chat import to_openai_message
from kernelwright.rl.rollout import EPISODES, read_rows
from kernelwright.rl.tasks import split_of


def read_episodes(sources: Iterable[str], *, store: Path | None = None) -> list[dict[str, Any]]:
    """Episode records from rollout folders (or their episodes.jsonl) and rollout ids in the store (`ro-...`)."""
    out: list[dict[str, Any]] = []
    for src in sources:
        path = Path(src).expanduser()
        if path.is_dir():
            path = path / EPISODES
        if path.is_file():
            out += read_rows(path)[0]  # the rollout's own reader, without cutting the file
        elif str(src).startswith("ro-"):
            from kernelwright.store import Store

            with Store.open(store) as db:
                rows = db.episodes(str(src), records=True)
            if not rows:
                raise ValueError(f"no rollout {src!r} in the store")
            out += [{"seq": r["seq"], "rollout": r["rollout"], **r["record"]} for r in rows]
        else:
            raise ValueError(f"{src}: neither a rollout folder, an episodes.jsonl nor a rollout id (ro-...)")
    return out


def example(record: dict[str, Any], *, arguments: str = "json") -> dict[str, Any]:
    """One episode as a chat-format training example; tool-call arguments as JSON text ("json", as
    Chat Completions sends them) or as objects ("object", for chat templates that encode them)."""
    messages = [to_openai_message(Message.from_dict(m), i) for i, m in enumerate(record.get("messages") or [])]
    if arguments == "object":
        for m in messages:
            for call in m.get("tool_calls") or []:
                try:
                    call["function"]["arguments"] = json.loads(call["function"]["arguments"] or "{}")
                except ValueError:
                    pass  # malformed as the model wrote it: kept as its text
    used_tools = any(m.get("tool_calls") for m in messages)
    task = record.get("task") or {}
    return {"messages": messages, "tools": [s.to_openai() for s in TOOL_SPECS] if used_tools else [],
            "task_id": task.get("id"), "problem_hash": (task.get("problem") or {}).get("hash"), "split": task.get("split"),
            "reward": (record.get("reward") or {}).get("value"), "milestone": (record.get("reward") or {}).get("milestone"),
            "episode_id": record.get("id"), "rollout": record.get("rollout")}


def export_sft(records: list[dict[str, Any]], out: Path, *, min_reward: float, split: str = "train", heldout: float | None = None,
               arguments: str = "json") -> dict[str, Any]:
    """Write the good episodes' examples to `out` (JSONL); counts of what was kept and why not.
    `heldout`: split each problem again with this fraction instead of taking the recorded split.
    One example per (rollout, seq), and one per problem and sequence of assistant turns (the tools'
    answers, whose timings vary, do not make two examples of one trajectory)."""
    kept, seen, episodes = [], set(), set()
    skipped = {"excluded": 0, "below": 0, "split": 0, "duplicate": 0, "unfinished": 0}
    for rec in records:
        reward = (rec.get("reward") or {}).get("value")
        task = rec.get("task") or {}
        problem_hash = (task.get("problem") or {}).get("hash") or ""
        its_split = split_of(problem_hash, heldout) if heldout is not None and problem_hash else task.get("split")
        ident = (rec.get("rollout"), rec.get("seq"))
        if ident[0] is not None and ident[1] is not None and ident in episodes:
            skipped["duplicate"] += 1
            continue
        episodes.add(ident)
        if "reward" not in rec or not rec.get("messages"):
            skipped["unfinished"] += 1
        elif rec.get("excluded") or reward is None:
            skipped["excluded"] += 1
        elif split != "all" and its_split != split:
            skipped["split"] += 1
        elif reward < min_reward:
            skipped["below"] += 1
        else:
            ex = example(rec, arguments=arguments)
            ex["split"] = its_split
            turns = [[m.get("content"), m.get("tool_calls")] for m in ex["messages"] if m["role"] == "assistant"]
            key = hashlib.sha256(json.dumps([ex["problem_hash"], turns], sort_keys=True).encode()).hexdigest()
            if key in seen:
                skipped["duplicate"] += 1
                continue
            seen.add(key)
            kept.append(ex)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(ex, allow_nan=False) + "\n" for ex in kept))
    tmp.replace(out)
    return {"written": len(kept), "read": len(records), "skipped": skipped, "min_reward": min_reward, "split": split, "heldout": heldout,
            "out": str(out)}
