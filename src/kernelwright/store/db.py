"""The SQLite store: problems, candidates by content hash, and verdicts, in one file.

One connection per `Store`; WAL journal and a busy timeout let several processes write at once.
Every write runs in a `BEGIN IMMEDIATE` transaction, so a crash mid-write leaves the file as it was.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from kernelwright.core.records import Verdict
from kernelwright.store import migrations
from kernelwright.store.episodes import EpisodesMixin
from kernelwright.store.runs import RunsMixin
from kernelwright.store.workspaces import WorkspacesMixin

logger = logging.getLogger(__name__)

STORE_ENV = "KERNELWRIGHT_STORE"
BUSY_TIMEOUT_MS = 10_000

_FILTER_COLUMNS = ("problem_hash", "candidate_hash", "status")


def default_store_path() -> Path:
    """`$KERNELWRIGHT_STORE`, else `$XDG_DATA_HOME/kernelwright/store.sqlite` (or ~/.local/share/...)."""
    explicit = os.environ.get(STORE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser() / "kernelwright" / "store.sqlite"


def _now() -> str:
    """The current time, ISO-8601 UTC."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _new_verdict_id() -> str:
    """A fresh verdict id like `v-1a2b3c4d5e6f`."""
    return f"v-{uuid.uuid4().hex[:12]}"


def _connect(path: Path) -> sqlite3.Connection:
    """Open `path` in autocommit mode with WAL, a busy timeout and foreign keys on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    mode = _enable_wal(conn)
    if str(mode).lower() != "wal":
        logger.warning("store %s: journal mode is %s, not wal", path, mode)
    return conn


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL, retrying while another process holds the lock: SQLite answers this pragma
    with 'database is locked' at once, without waiting on the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)


class Store(RunsMixin, WorkspacesMixin, EpisodesMixin):
    """Problems, candidates and verdicts in one SQLite file. Use as a context manager."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        """Wrap an open, migrated connection; use `Store.open` instead."""
        self._conn = conn  # autocommit connection; transactions are explicit
        self.path = path  # the database file

    @classmethod
    def open(cls, path: str | Path | None = None) -> "Store":
        """Open (creating if needed) the store at `path` or `default_store_path()`, and migrate it."""
        resolved = Path(path).expanduser() if path is not None else default_store_path()
        conn = _connect(resolved)
        try:
            migrations.apply_pending(conn, resolved)
        except BaseException:
            conn.close()
            raise
        return cls(conn, resolved)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        return migrations.read_version(self._conn)

    @property
    def journal_mode(self) -> str:
        """The SQLite journal mode in effect (`wal` normally)."""
        return str(self._conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: committed on success, rolled back on any error."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- problems -----------------------------------------------------------------------------

    def put_problem(self, hash: str, name: str, path: str | Path | None, source: str) -> None:
        """Record a problem by content hash; a second put of the same hash changes nothing."""
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO problems (hash, name, path, source, created_at) VALUES (?, ?, ?, ?, ?)",
                (hash, name, None if path is None else str(path), source, _now()),
            )

    def get_problem(self, hash: str) -> dict[str, Any]:
        """The problem row {hash, name, path, source, created_at}; KeyError when unknown."""
        row = self._conn.execute("SELECT * FROM problems WHERE hash = ?", (hash,)).fetchone()
        if row is None:
            raise KeyError(f"no problem with hash {hash!r} in store {self.path}")
        return dict(row)

    # -- candidates ---------------------------------------------------------------------------

    def put_candidate(self, hash: str, build_path: str | None, files: dict[str, str], main: str | None = None) -> None:
        """Record a candidate's files by content hash, and its main file (the .py file judged:
        model_new.py, or a single file's own name, which the hash covers); a second put of the same
        hash changes nothing but a main file the first did not name."""
        files_json = json.dumps(dict(files), sort_keys=True)
        build = getattr(build_path, "value", build_path)
        if main is not None and main not in files:
            raise ValueError(f"main file {main!r} is not among the candidate's files {sorted(files)}")
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO candidates (hash, build_path, files_json, main, created_at) VALUES (?, ?, ?, ?, ?)",
                (hash, build, files_json, main, _now()),
            )
            if main is not None:
                conn.execute("UPDATE candidates SET main = ? WHERE hash = ? AND main IS NULL", (main, hash))

    def get_candidate_files(self, hash: str) -> dict[str, str]:
        """The candidate's files {relative_name: text}; KeyError when unknown."""
        return self.get_candidate(hash)["files"]

    def get_candidate(self, hash: str) -> dict[str, Any]:
        """The candidate {hash, build_path, main, files, created_at}; main is None where it was
        not recorded (rows stored before schema version 5). KeyError when unknown."""
        row = self._conn.execute("SELECT hash, build_path, main, files_json, created_at FROM candidates WHERE hash = ?", (hash,)).fetchone()
        if row is None:
            raise KeyError(f"no candidate with hash {hash!r} in store {self.path}")
        record = dict(row)
        record["files"] = json.loads(record.pop("files_json"))
        return record

    # -- baselines ----------------------------------------------------------------------------

    def put_baseline(self, record: dict[str, Any]) -> None:
        """Record (or replace) one problem's baseline times under its machine key, precision and
        compile mode (judge.baseline.BaselineRecord.to_dict())."""
        fields = ("problem_hash", "machine_key", "precision", "compile_mode")
        missing = [f for f in fields if not record.get(f)]
        if missing:
            raise ValueError(f"a baseline record needs {', '.join(missing)}")
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO baselines (problem_hash, machine_key, precision, compile_mode, problem_name, eager_ms, "
                "compile_ms, record_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*(record[f] for f in fields), record.get("problem"), record.get("eager_ms"), record.get("compile_ms"),
                 json.dumps(record, sort_keys=True), _now()),
            )

    def get_baseline(self, problem_hash: str, machine_key: str, precision: str, compile_mode: str) -> dict[str, Any] | None:
        """The stored baseline record for that key, or None."""
        row = self._conn.execute(
            "SELECT record_json, created_at FROM baselines WHERE problem_hash = ? AND machine_key = ? AND precision = ? AND compile_mode = ?",
            (problem_hash, machine_key, precision, compile_mode)).fetchone()
        if row is None:
            return None
        return {**json.loads(row["record_json"]), "stored_at": row["created_at"]}

    def baselines(self, machine_key: str | None = None) -> list[dict[str, Any]]:
        """Every stored baseline record (of one machine key if given), oldest first."""
        sql, args = "SELECT record_json, created_at FROM baselines", []
        if machine_key is not None:
            sql, args = sql + " WHERE machine_key = ?", [machine_key]
        rows = self._conn.execute(sql + " ORDER BY created_at, rowid", args).fetchall()
        return [{**json.loads(r["record_json"]), "stored_at": r["created_at"]} for r in rows]

    # -- verdicts -----------------------------------------------------------------------------

    def keep_verdict(self, problem: Any, files: dict[str, str], verdict: Verdict, main: str | None = None) -> str | None:
        """Record the problem, the candidate's files (and its main file) and the verdict; the verdict
        id, or None when the verdict names no candidate (nothing was built to keep)."""
        self.put_problem(problem.hash, problem.name, str(problem.path), problem.source)
        if not verdict.candidate.get("hash"):
            return None
        self.put_candidate(verdict.candidate["hash"], verdict.candidate["build_path"], files, main)
        return self.put_verdict(verdict)

    def put_verdict(self, verdict: Verdict) -> str:
        """Record a verdict and return its new id; its problem and candidate must be stored first."""
        problem_hash = _required_hash(verdict.problem, "problem")
        candidate_hash = _required_hash(verdict.candidate, "candidate")
        verdict_id = _new_verdict_id()
        with self._transaction() as conn:
            self._require_row(conn, "problems", problem_hash, "put_problem")
            self._require_row(conn, "candidates", candidate_hash, "put_candidate")
            conn.execute(
                "INSERT INTO verdicts (id, problem_hash, candidate_hash, status, runtime_ms, "
                "speedup_vs_best, verdict_json, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (verdict_id, problem_hash, candidate_hash, verdict.status.value, verdict.runtime_ms,
                 verdict.speedup_vs_best, verdict.to_json(indent=None), _now()),
            )
        return verdict_id

    def _require_row(self, conn: sqlite3.Connection, table: str, hash: str, putter: str) -> None:
        """Raise a clear ValueError when `hash` is missing from `table`."""
        if conn.execute(f"SELECT 1 FROM {table} WHERE hash = ?", (hash,)).fetchone() is None:
            raise ValueError(f"{table[:-1]} {hash!r} is not in store {self.path}; call Store.{putter} first")

    def get_verdict(self, id: str) -> Verdict:
        """The verdict stored under `id`; KeyError when unknown."""
        row = self._conn.execute("SELECT verdict_json FROM verdicts WHERE id = ?", (id,)).fetchone()
        if row is None:
            raise KeyError(f"no verdict with id {id!r} in store {self.path}")
        return Verdict.from_dict(json.loads(row["verdict_json"]))

    def verdicts_for(
        self,
        problem_hash: str | None = None,
        candidate_hash: str | None = None,
        status: str | None = None,
        limit: int = 100,
    ) -> list[tuple[str, Verdict]]:
        """(id, verdict) pairs matching every given filter, newest stored first, at most `limit`."""
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        values = (problem_hash, candidate_hash, getattr(status, "value", status))
        where = [(f"{col} = ?", v) for col, v in zip(_FILTER_COLUMNS, values) if v is not None]
        sql = "SELECT id, verdict_json FROM verdicts"
        if where:
            sql += " WHERE " + " AND ".join(clause for clause, _ in where)
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        rows = self._conn.execute(sql, [v for _, v in where] + [limit]).fetchall()
        return [(r["id"], Verdict.from_dict(json.loads(r["verdict_json"]))) for r in rows]


def _required_hash(record: dict[str, Any], what: str) -> str:
    """The `hash` field of a verdict's problem or candidate part; ValueError when absent."""
    value = (record or {}).get("hash")
    if not value:
        raise ValueError(f"verdict {what} has no hash, got {record!r}")
    return str(value)
