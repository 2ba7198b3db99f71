"""RL episodes in the store: one `rl_episodes` row per (rollout, seq) (schema 6), holding the
episode's whole record (rl.env.KernelEnv.record) beside the columns a query needs.

`EpisodesMixin` holds the methods; `Store` inherits them and supplies the connection and the
`BEGIN IMMEDIATE` transaction. A second put of one (rollout, seq) keeps the first: a resumed
rollout never records an episode twice.
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING, Any

from kernelwright.store.runs import _decode, _now, strict_json


class EpisodesMixin:
    """Episode methods of `Store` (see the module docstring)."""

    if TYPE_CHECKING:
        _conn: sqlite3.Connection

        def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def put_episode(self, rollout: str, seq: int, record: dict[str, Any]) -> bool:
        """Record one finished episode; False when (rollout, seq) was already recorded (kept as it was)."""
        task = record.get("task") or {}
        reward = record.get("reward") or {}
        final = (record.get("final") or {}).get("verdict") or {}
        row = (rollout, int(seq), str(record.get("id") or ""), str(task.get("id") or ""), str(task.get("split") or ""),
               str((task.get("problem") or {}).get("hash") or ""), final.get("status"), reward.get("value"), reward.get("milestone"),
               int(bool(record.get("excluded"))), str(record.get("end") or ""), int(record.get("turns") or 0),
               int(record.get("tokens") or 0), float(record.get("wall_s") or 0.0), strict_json(record), _now())
        with self._transaction() as conn:
            cur = conn.execute("INSERT INTO rl_episodes (rollout, seq, episode_id, task_id, split, problem_hash, status, reward, milestone, "
                               "excluded, end_reason, turns, tokens, wall_s, record_json, created_at) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(rollout, seq) DO NOTHING", row)
            return cur.rowcount == 1

    def episodes(self, rollout: str | None = None, *, records: bool = False) -> list[dict[str, Any]]:
        """A rollout's episodes (every rollout's when None), in order; `records`: with each whole record."""
        cols = "rollout, seq, episode_id, task_id, split, problem_hash, status, reward, milestone, excluded, end_reason, turns, tokens, wall_s"
        cols += ", record_json" if records else ""
        where, args = ("WHERE rollout = ?", (rollout,)) if rollout is not None else ("", ())
        out = []
        for r in self._conn.execute(f"SELECT {cols} FROM rl_episodes {where} ORDER BY rollout, seq", args).fetchall():
            d = dict(r)
            d["excluded"] = bool(d["excluded"])
            if records:
                d["record"] = _decode(d.pop("record_json"))
            out.append(d)
        return out
