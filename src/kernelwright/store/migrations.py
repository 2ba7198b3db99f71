"""The store's schema history: an ordered list of migrations, applied atomically on open.

The schema version lives in `PRAGMA user_version`. To change the schema, append a `Migration` with
the next version number; never edit one that has shipped.
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from typing import Callable, Union

logger = logging.getLogger(__name__)

MigrationStep = Union[str, Callable[[sqlite3.Connection], None]]


@dataclass(frozen=True)
class Migration:
    """One step of the schema history."""

    version: int  # the schema version after this step; 1, 2, 3... with no gaps
    step: MigrationStep  # an SQL script, or a callable run inside the open transaction (must not commit)
    description: str = ""  # one line on what the step changes


V1_SQL = """
CREATE TABLE problems (
    hash TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    path TEXT,
    source TEXT NOT NULL,
    created_at TEXT
);
CREATE TABLE candidates (
    hash TEXT PRIMARY KEY,
    build_path TEXT,
    files_json TEXT NOT NULL,
    created_at TEXT
);
CREATE TABLE verdicts (
    id TEXT PRIMARY KEY,
    problem_hash TEXT REFERENCES problems(hash),
    candidate_hash TEXT REFERENCES candidates(hash),
    status TEXT NOT NULL,
    runtime_ms REAL,
    speedup_vs_best REAL,
    verdict_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX verdicts_problem_hash ON verdicts(problem_hash);
CREATE INDEX verdicts_candidate_hash ON verdicts(candidate_hash);
CREATE INDEX verdicts_status ON verdicts(status);
"""

V2_SQL = """
CREATE TABLE baselines (
    problem_hash TEXT NOT NULL,
    machine_key TEXT NOT NULL,
    precision TEXT NOT NULL,
    compile_mode TEXT NOT NULL,
    problem_name TEXT,
    eager_ms REAL,
    compile_ms REAL,
    record_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (problem_hash, machine_key, precision, compile_mode)
);
"""

V3_SQL = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    problem_hash TEXT NOT NULL,
    problem_name TEXT NOT NULL,
    problem_spec TEXT NOT NULL,
    model TEXT NOT NULL,
    strategy TEXT NOT NULL,
    status TEXT NOT NULL,
    objective_json TEXT NOT NULL,
    state_json TEXT,
    best_json TEXT,
    out_dir TEXT,
    summary TEXT,
    approved INTEGER,
    review_note TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX runs_status ON runs(status);
CREATE TABLE run_steps (
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    branch TEXT NOT NULL DEFAULT '',
    payload_json TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""

V4_SQL = """
CREATE TABLE workspaces (
    id TEXT PRIMARY KEY,
    root TEXT NOT NULL,
    problem_hash TEXT NOT NULL,
    problem_name TEXT NOT NULL,
    config_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE TABLE workspace_checks (
    workspace_id TEXT NOT NULL REFERENCES workspaces(id),
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    source TEXT NOT NULL,
    candidate_hash TEXT,
    status TEXT NOT NULL,
    exit_code INTEGER,
    runtime_ms REAL,
    speedup_vs_best REAL,
    verdict_id TEXT,
    report TEXT NOT NULL,
    payload_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, seq)
);
"""

V5_SQL = """
ALTER TABLE candidates ADD COLUMN main TEXT;
"""

V6_SQL = """
CREATE TABLE rl_episodes (
    rollout TEXT NOT NULL,
    seq INTEGER NOT NULL,
    episode_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    split TEXT NOT NULL,
    problem_hash TEXT NOT NULL,
    status TEXT,
    reward REAL,
    milestone INTEGER,
    excluded INTEGER NOT NULL,
    end_reason TEXT NOT NULL,
    turns INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    wall_s REAL NOT NULL,
    record_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (rollout, seq)
);
"""

MIGRATIONS: list[Migration] = [
    Migration(1, V1_SQL, "problems, candidates and verdicts"),
    Migration(2, V2_SQL, "baselines: eager and torch.compile times by problem, machine, precision and compile mode"),
    Migration(3, V3_SQL, "runs and run_steps: optimisation runs, their resumable state, best candidate, review and history"),
    Migration(4, V4_SQL, "workspaces and workspace_checks: an engineer's or coding agent's workspace and its history of checks"),
    Migration(5, V5_SQL, "candidates.main: the candidate's main file (model_new.py, or the single .py file judged); null in older rows"),
    Migration(6, V6_SQL, "rl_episodes: RL rollouts' episodes (task, final verdict's status, reward and the whole record), once per (rollout, seq)"),
]


def latest_version() -> int:
    """The schema version this code writes (the last migration's)."""
    return MIGRATIONS[-1].version if MIGRATIONS else 0


def read_version(conn: sqlite3.Connection) -> int:
    """The schema version recorded in the database file."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def check_not_newer(found: int, path: object) -> None:
    """Refuse a store written by newer code than this."""
    code = latest_version()
    if found > code:
        raise ValueError(
            f"store {path} has schema version {found}, newer than this kernelwright's "
            f"version {code}; upgrade kernelwright to open it"
        )


def pending(found: int) -> list[Migration]:
    """The migrations a store at version `found` still needs, in order."""
    versions = [m.version for m in MIGRATIONS]
    assert versions == list(range(1, len(versions) + 1)), f"migration versions must be 1..n, got {versions}"
    return [m for m in MIGRATIONS if m.version > found]


def apply_pending(conn: sqlite3.Connection, path: object) -> int:
    """Bring the store up to date in one transaction; returns the resulting version.

    `conn` must be in autocommit mode (isolation_level=None). The version is re-read under the
    write lock, so concurrent openers apply each migration exactly once.
    """
    found = read_version(conn)
    check_not_newer(found, path)
    if not pending(found):
        return found
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = read_version(conn)
        check_not_newer(found, path)
        for migration in pending(found):
            _apply_one(conn, migration)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return read_version(conn)


def _apply_one(conn: sqlite3.Connection, migration: Migration) -> None:
    """Run one migration's step and record its version (inside the caller's transaction)."""
    logger.info("store: applying migration %d (%s)", migration.version, migration.description)
    if isinstance(migration.step, str):
        for statement in split_statements(migration.step):
            conn.execute(statement)
    else:
        migration.step(conn)
    conn.execute(f"PRAGMA user_version = {int(migration.version)}")


def split_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements (trigger bodies stay whole).

    `executescript` would commit the open transaction first, so scripts are run statement by statement.
    """
    statements: list[str] = []
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \t\r\n;"):
                statements.append(buffer.strip())
            buffer = ""
    assert not buffer.strip(" \t\r\n;"), f"incomplete SQL statement at the end of a migration: {buffer!r}"
    return statements
