"""Optimisation runs in the store: one `runs` row per run and its numbered `run_steps` (schema 3).

`RunsMixin` holds the methods; `Store` inherits them and supplies the connection, the path and the
`BEGIN IMMEDIATE` transaction. Payloads are kept as strict JSON: non-finite floats become null.
Read methods and `review_run` take a run id or a unique prefix of one (`run-1a2b`, or `1a2b`);
the loop's writes (`add_step`, `update_run`) take the exact id.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import json
import math
import os
import sqlite3
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelwright.core.runs import RunStatus, StepKind, Usage

RUN_ID_PREFIX = "run-"
_RUN_STATUSES = tuple(s.value for s in RunStatus)
_STEP_KINDS = tuple(k.value for k in StepKind)
_LIST_COLUMNS = ("id, problem_hash, problem_name, problem_spec, model, strategy, status, objective_json, best_json, "
                 "out_dir, summary, approved, review_note, created_at, updated_at")


def new_run_id() -> str:
    """A fresh run id like `run-1a2b3c4d`."""
    return f"{RUN_ID_PREFIX}{uuid.uuid4().hex[:8]}"


def json_ready(value: Any) -> Any:
    """`value` with enums as their values, tuples as lists, dataclasses as dicts, paths as text and
    non-finite floats as None, recursively: what strict JSON can hold."""
    if isinstance(value, enum.Enum):
        return json_ready(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_ready(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k.value if isinstance(k, enum.Enum) else k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def strict_json(value: Any, *, indent: int | None = None) -> str:
    """`value` as strict JSON text (no NaN or Infinity; see json_ready)."""
    return json.dumps(json_ready(value), allow_nan=False, indent=indent)


def _now() -> str:
    """The current time, ISO-8601 UTC (the same form as the rest of the store)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _enum_value(value: Any, allowed: tuple[str, ...], what: str) -> str:
    """The string value of an enum member or string, checked against `allowed`."""
    text = str(getattr(value, "value", value))
    if text not in allowed:
        raise ValueError(f"{what} must be one of {list(allowed)}, got {value!r}")
    return text


def _finite_cost(cost: float | None) -> float | None:
    """A cost for the REAL column: None when unknown or not finite."""
    if cost is None:
        return None
    cost = float(cost)
    return cost if math.isfinite(cost) else None


def _decode(text: str | None) -> Any:
    """A JSON column's value (None stays None)."""
    return None if text is None else json.loads(text)


def _approved(value: int | None) -> bool | None:
    """The approved column as True / False / None (not reviewed)."""
    return None if value is None else bool(value)


def _run_dict(row: sqlite3.Row) -> dict[str, Any]:
    """A runs row with its JSON columns decoded (objective, state when selected, best)."""
    d = dict(row)
    for key in ("objective", "state", "best"):
        if f"{key}_json" in d:
            d[key] = _decode(d.pop(f"{key}_json"))
    d["approved"] = _approved(d["approved"])
    return d


def _step_dict(row: sqlite3.Row) -> dict[str, Any]:
    """A run_steps row as {seq, kind, branch, payload, prompt_tokens, completion_tokens, cost_usd, created_at}."""
    return {"seq": row["seq"], "kind": row["kind"], "branch": row["branch"], "payload": _decode(row["payload_json"]),
            "prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"],
            "cost_usd": row["cost_usd"], "created_at": row["created_at"]}


def _totals(row: sqlite3.Row | tuple[Any, ...]) -> dict[str, Any]:
    """{steps, prompt_tokens, completion_tokens, cost_usd} from (count, sum, sum, sum-or-NULL)."""
    steps, prompt, completion, cost = tuple(row)
    return {"steps": int(steps or 0), "prompt_tokens": int(prompt or 0), "completion_tokens": int(completion or 0),
            "cost_usd": None if cost is None else float(cost)}


_TOTALS_SQL = ("SELECT count(*), sum(prompt_tokens), sum(completion_tokens), sum(cost_usd) "
               "FROM run_steps WHERE run_id = ?")
# Replies counted as no tokens: before replays counted their recorded tokens, a replayed reply was
# stored with 0 in its columns and the recording's usage in its payload only.
_UNCOUNTED_SQL = ("SELECT payload_json FROM run_steps WHERE run_id = ? AND kind = ? AND prompt_tokens = 0 "
                  "AND completion_tokens = 0")


def _recorded_usage(payload_text: str) -> Usage:
    """The usage a reply step's payload records ({"reply": {"usage": ...}}); none when unreadable."""
    try:
        usage = ((json.loads(payload_text) or {}).get("reply") or {}).get("usage") or {}
        return Usage.from_dict(usage)
    except (AttributeError, TypeError, ValueError):
        return Usage()


class RunsMixin:
    """Run methods of `Store` (see the module docstring)."""

    if TYPE_CHECKING:
        _conn: sqlite3.Connection
        path: Path

        def _transaction(self) -> contextlib.AbstractContextManager[sqlite3.Connection]: ...

    # -- writing ------------------------------------------------------------------------------

    def create_run(self, run_id: str, *, problem_hash: str, problem_name: str, problem_spec: str, model: str,
                   strategy: str, objective: dict[str, Any]) -> None:
        """Record a new run, status `running`; ValueError when the id is malformed or taken."""
        if not run_id.startswith(RUN_ID_PREFIX) or len(run_id) <= len(RUN_ID_PREFIX):
            raise ValueError(f"run id must look like {RUN_ID_PREFIX}1a2b3c4d, got {run_id!r}")
        objective = objective.to_dict() if hasattr(objective, "to_dict") else dict(objective)
        now = _now()
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None:
                raise ValueError(f"run {run_id!r} already exists in store {self.path}")
            conn.execute(
                "INSERT INTO runs (id, problem_hash, problem_name, problem_spec, model, strategy, status, objective_json, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, problem_hash, problem_name, problem_spec, model, strategy, RunStatus.RUNNING.value,
                 strict_json(objective), now, now),
            )

    def add_step(self, run_id: str, kind: StepKind | str, payload: dict[str, Any], *, branch: str = "",
                 usage: Usage | None = None) -> int:
        """Append one step to a run's history and return its seq (0, 1, 2... per run).

        The seq is taken as max + 1 inside the write transaction, so writers on other connections
        or in other processes never get the same one."""
        kind_value = _enum_value(kind, _STEP_KINDS, "step kind")
        payload_text = strict_json(payload)
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            return self._insert_step(conn, run_id, kind_value, payload_text, branch, usage or Usage())

    def update_run(self, run_id: str, *, status: RunStatus | str | None = None, state: dict[str, Any] | None = None,
                   best: dict[str, Any] | None = None, out_dir: str | os.PathLike[str] | None = None,
                   summary: str | None = None) -> None:
        """Change the given fields of a run (None leaves a field as it is); updated_at always moves."""
        changes: dict[str, Any] = {}
        if status is not None:
            changes["status"] = _enum_value(status, _RUN_STATUSES, "run status")
        if state is not None:
            changes["state_json"] = strict_json(state)
        if best is not None:
            changes["best_json"] = strict_json(best)
        if out_dir is not None:
            changes["out_dir"] = os.fspath(out_dir)
        if summary is not None:
            changes["summary"] = str(summary)
        changes["updated_at"] = _now()
        assignments = ", ".join(f"{column} = ?" for column in changes)
        with self._transaction() as conn:
            self._require_run(conn, run_id)
            conn.execute(f"UPDATE runs SET {assignments} WHERE id = ?", (*changes.values(), run_id))

    def review_run(self, run_id: str, *, approved: bool, note: str) -> None:
        """Record an engineer's approval or rejection, and a `review` step {approved, note}."""
        payload = strict_json({"approved": bool(approved), "note": str(note)})
        with self._transaction() as conn:
            full_id = self._resolve(conn, run_id)
            conn.execute("UPDATE runs SET approved = ?, review_note = ?, updated_at = ? WHERE id = ?",
                         (int(bool(approved)), str(note), _now(), full_id))
            self._insert_step(conn, full_id, StepKind.REVIEW.value, payload, "", Usage())

    def clear_review(self, run_id: str) -> None:
        """Forget the run's review (a new export replaced the one reviewed); the review step stays in the history."""
        with self._transaction() as conn:
            full_id = self._resolve(conn, run_id)
            conn.execute("UPDATE runs SET approved = NULL, review_note = NULL, updated_at = ? WHERE id = ?", (_now(), full_id))

    # -- reading ------------------------------------------------------------------------------

    def resolve_run_id(self, run_id: str) -> str:
        """The full id of the run `run_id` names (itself, or a unique prefix, with or without `run-`)."""
        return self._resolve(self._conn, run_id)

    def get_run(self, run_id: str) -> dict[str, Any]:
        """Every column of a run, the JSON ones decoded (objective, state, best), plus "totals"."""
        full_id = self._resolve(self._conn, run_id)
        row = self._conn.execute("SELECT * FROM runs WHERE id = ?", (full_id,)).fetchone()
        run = _run_dict(row)
        run["totals"] = self._totals(full_id)
        return run

    def list_runs(self, *, status: RunStatus | str | None = None, limit: int = 50) -> list[dict[str, Any]]:
        """Runs newest first (without their state), each with "totals"; only those of `status` if given."""
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        sql, args = f"SELECT {_LIST_COLUMNS} FROM runs", []
        if status is not None:
            sql, args = sql + " WHERE status = ?", [_enum_value(status, _RUN_STATUSES, "run status")]
        rows = self._conn.execute(sql + " ORDER BY created_at DESC, rowid DESC LIMIT ?", (*args, limit)).fetchall()
        runs = [_run_dict(r) for r in rows]
        for run in runs:
            run["totals"] = self._totals(run["id"])
        return runs

    def run_steps(self, run_id: str, *, kinds: Sequence[StepKind | str] | None = None) -> list[dict[str, Any]]:
        """A run's steps in seq order, payloads decoded; only those of `kinds` if given."""
        full_id = self._resolve(self._conn, run_id)
        sql, args = "SELECT * FROM run_steps WHERE run_id = ?", [full_id]
        if kinds is not None:
            if isinstance(kinds, str):
                raise TypeError(f"kinds must be a sequence of step kinds, got the string {kinds!r}")
            values = [_enum_value(k, _STEP_KINDS, "step kind") for k in kinds]
            if not values:
                return []
            sql += f" AND kind IN ({', '.join('?' for _ in values)})"
            args += values
        rows = self._conn.execute(sql + " ORDER BY seq", args).fetchall()
        return [_step_dict(r) for r in rows]

    def run_totals(self, run_id: str) -> dict[str, Any]:
        """{steps, prompt_tokens, completion_tokens, cost_usd}; cost_usd is None when no step had a cost."""
        return self._totals(self._resolve(self._conn, run_id))

    def _totals(self, full_id: str) -> dict[str, Any]:
        """The run's totals. A reply stored with no tokens counted (a replay stored before replays
        counted their recorded tokens) counts the tokens its payload records, at read time: the
        stored rows stay as they are. Never a cost: a replay spends nothing."""
        totals = _totals(self._conn.execute(_TOTALS_SQL, (full_id,)).fetchone())
        for (payload,) in self._conn.execute(_UNCOUNTED_SQL, (full_id, StepKind.RESPONSE.value)):
            usage = _recorded_usage(payload)
            totals["prompt_tokens"] += usage.prompt_tokens
            totals["completion_tokens"] += usage.completion_tokens
        return totals

    # -- helpers ------------------------------------------------------------------------------

    def _insert_step(self, conn: sqlite3.Connection, run_id: str, kind: str, payload_text: str, branch: str,
                     usage: Usage) -> int:
        """Insert a step at max(seq) + 1 (inside the caller's transaction) and touch the run."""
        row = conn.execute("SELECT max(seq) FROM run_steps WHERE run_id = ?", (run_id,)).fetchone()
        seq = 0 if row[0] is None else int(row[0]) + 1
        now = _now()
        conn.execute(
            "INSERT INTO run_steps (run_id, seq, kind, branch, payload_json, prompt_tokens, completion_tokens, cost_usd, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, seq, kind, str(branch or ""), payload_text, int(usage.prompt_tokens), int(usage.completion_tokens),
             _finite_cost(usage.cost_usd), now),
        )
        conn.execute("UPDATE runs SET updated_at = ? WHERE id = ?", (now, run_id))
        return seq

    def _require_run(self, conn: sqlite3.Connection, run_id: str) -> None:
        """KeyError naming the id and the store when no run has exactly this id."""
        if conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
            raise KeyError(f"no run with id {run_id!r} in store {self.path}")

    def _resolve(self, conn: sqlite3.Connection, run_id: str) -> str:
        """The full id for an exact id or a unique prefix; KeyError when none, ValueError when several."""
        ref = str(run_id).strip()
        if ref and conn.execute("SELECT 1 FROM runs WHERE id = ?", (ref,)).fetchone() is not None:
            return ref
        matches = self._prefix_matches(conn, ref) if ref else []
        if not matches:
            raise KeyError(f"no run with id {run_id!r} in store {self.path}")
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (", ..." if len(matches) > 5 else "")
            raise ValueError(f"run id prefix {run_id!r} is ambiguous in store {self.path}: {len(matches)} runs match ({shown})")
        return matches[0]

    def _prefix_matches(self, conn: sqlite3.Connection, ref: str) -> list[str]:
        """Ids starting with `ref` (or with `run-` + ref), sorted."""
        prefixes = {ref} if ref.startswith(RUN_ID_PREFIX) else {ref, RUN_ID_PREFIX + ref}
        found: set[str] = set()
        for prefix in prefixes:
            pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = conn.execute("SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\'", (pattern,)).fetchall()
            found.update(r[0] for r in rows if r[0].startswith(prefix))
        return sorted(found)
