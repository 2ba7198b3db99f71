"""Workspaces in the store: one `workspaces` row per workspace and its numbered `workspace_checks`
(schema 4), the history of every check, MCP tool call and submission made in it.

`WorkspacesMixin` holds the methods; `Store` inherits them and supplies the connection, the path
and the `BEGIN IMMEDIATE` transaction. Payloads are strict JSON (store.runs.strict_json).
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelwright.store.runs import _decode, _now, strict_json

WORKSPACE_ID_PREFIX = "ws-"
_CHECK_COLUMNS = ("seq, kind, source, candidate_hash, status, exit_code, runtime_ms, speedup_vs_best, verdict_id, report, "
                  "payload_json, created_at")


def new_workspace_id() -> str:
    """A fresh workspace id like `ws-1a2b3c4d`."""
    return f"{WORKSPACE_ID_PREFIX}{uuid.uuid4().hex[:8]}"


def _real(value: Any) -> float | None:
    """A REAL column's value: None when missing or not finite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _check_dict(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["payload"] = _decode(d.pop("payload_json"))
    return d


class WorkspacesMixin:
    """Workspace methods of `Store` (see the module docstring)."""

    if TYPE_CHECKING:
        _conn: sqlite3.Connection
        path: Path

        def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    def register_workspace(self, workspace_id: str, *, root: str | Path, problem_hash: str, problem_name: str,
                           config: dict[str, Any]) -> None:
        """Record a workspace. Its problem hash and settings are kept as first recorded (a later
        call only updates where it lives), so a check can compare the workspace's file with them."""
        if not workspace_id.startswith(WORKSPACE_ID_PREFIX) or len(workspace_id) <= len(WORKSPACE_ID_PREFIX):
            raise ValueError(f"workspace id must look like {WORKSPACE_ID_PREFIX}1a2b3c4d, got {workspace_id!r}")
        now = _now()
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO workspaces (id, root, problem_hash, problem_name, config_json, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET root = excluded.root, updated_at = excluded.updated_at",
                (workspace_id, str(root), problem_hash, problem_name, strict_json(config), now, now))

    def add_check(self, workspace_id: str, *, kind: str, source: str, status: str, report: str, payload: dict[str, Any],
                  candidate_hash: str | None = None, exit_code: int | None = None, runtime_ms: float | None = None,
                  speedup_vs_best: float | None = None, verdict_id: str | None = None) -> int:
        """Append one check to a workspace's history; returns its number (1, 2, ...)."""
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM workspaces WHERE id = ?", (workspace_id,)).fetchone() is None:
                raise KeyError(f"no workspace {workspace_id!r} in store {self.path}")
            seq = int(conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM workspace_checks WHERE workspace_id = ?",
                                   (workspace_id,)).fetchone()[0])
            conn.execute(
                f"INSERT INTO workspace_checks (workspace_id, {_CHECK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (workspace_id, seq, kind, source, candidate_hash, status, exit_code, _real(runtime_ms), _real(speedup_vs_best),
                 verdict_id, report, strict_json(payload), _now()))
            conn.execute("UPDATE workspaces SET updated_at = ? WHERE id = ?", (_now(), workspace_id))
        return seq

    def get_workspace(self, workspace_id: str) -> dict[str, Any]:
        """One workspace's row with its config decoded; KeyError when unknown."""
        row = self._conn.execute("SELECT * FROM workspaces WHERE id = ?", (workspace_id,)).fetchone()
        if row is None:
            raise KeyError(f"no workspace {workspace_id!r} in store {self.path}")
        d = dict(row)
        d["config"] = _decode(d.pop("config_json"))
        return d

    def workspace_checks(self, workspace_id: str, *, since: int = 0) -> list[dict[str, Any]]:
        """A workspace's checks after number `since`, oldest first."""
        rows = self._conn.execute(f"SELECT {_CHECK_COLUMNS} FROM workspace_checks WHERE workspace_id = ? AND seq > ? ORDER BY seq",
                                  (workspace_id, since)).fetchall()
        return [_check_dict(r) for r in rows]

    def best_check(self, workspace_id: str) -> dict[str, Any] | None:
        """The fastest correct, timed check of a workspace that exited 0 (not one with sanitizer errors):
        highest speedup_vs_best, then lowest runtime; None when there is none."""
        row = self._conn.execute(
            f"SELECT {_CHECK_COLUMNS} FROM workspace_checks WHERE workspace_id = ? AND status = 'correct' AND runtime_ms IS NOT NULL "
            "AND coalesce(exit_code, 0) = 0 "
            "ORDER BY speedup_vs_best IS NULL, speedup_vs_best DESC, runtime_ms ASC LIMIT 1", (workspace_id,)).fetchone()
        return None if row is None else _check_dict(row)
