"""The SQLite store: round trips, idempotence, filters, migrations, concurrency, location."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest

from kernelwright.core.records import (
    BaselineSource,
    Guard,
    Status,
    Step,
    SystemInfo,
    Timing,
    Verdict,
)
from kernelwright.store import Migration, Store, default_store_path, latest_version
from kernelwright.store import migrations

pytestmark = pytest.mark.timeout(60)


def make_verdict(status: Status = Status.CORRECT, problem: str = "h", candidate: str = "c", **extra) -> Verdict:
    """A verdict with a spread of fields set."""
    fields = dict(
        runtime_ms=1.5,
        eager_ms=3.0,
        baseline_source=BaselineSource.MEASURED,
        speedup_vs_best=2.0,
        guards=(Guard("physics_floor", False, "ok"),),
        steps=(Step("l2_flush", False, "cpu backend"),),
        static_findings=({"rule": "sync", "line": 3},),
        timing=Timing(n=10, median_ms=1.5, iqr_ms=0.1, wall_ms=None),
        system=SystemInfo(gpu=None, driver=None, cuda=None, torch="2.13", python="3.11", kernelwright="0.1.0"),
        log="built",
        created_at="2025-01-01T00:00:00+00:00",
    )
    fields.update(extra)
    return Verdict(
        status=status,
        problem={"name": "p", "hash": problem},
        candidate={"hash": candidate, "build_path": "raw"},
        policy={},
        **fields,
    )


def seed(store: Store, problem: str = "h", candidate: str = "c") -> None:
    """Store the problem and candidate rows a verdict refers to."""
    store.put_problem(problem, "p", "/tmp/p.py", "class Model: ...")
    store.put_candidate(candidate, "raw", {"model_new.py": "class ModelNew: ...", "kernels/k.cu": "//"})


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "s.sqlite") as s:
        yield s


def test_verdict_round_trip(store: Store) -> None:
    seed(store)
    verdict = make_verdict()
    vid = store.put_verdict(verdict)
    assert vid.startswith("v-") and len(vid) == 14
    assert store.get_verdict(vid) == verdict
    assert store.get_verdict(vid) == Verdict.from_dict(verdict.to_dict())


def test_wal_and_foreign_keys(store: Store) -> None:
    assert store.journal_mode == "wal"
    assert store.schema_version == latest_version() == 6
    assert store._conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1


def test_parent_dirs_created(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a" / "b" / "s.sqlite") as s:
        assert s.path.exists()


def test_idempotent_puts(store: Store) -> None:
    seed(store)
    store.put_problem("h", "other-name", None, "changed")
    store.put_candidate("c", "torch_extension", {"x.py": "changed"})
    assert store.get_problem("h")["name"] == "p"
    assert store.get_problem("h")["source"] == "class Model: ..."
    assert store.get_candidate_files("c") == {"model_new.py": "class ModelNew: ...", "kernels/k.cu": "//"}
    assert store._conn.execute("SELECT count(*) FROM problems").fetchone()[0] == 1
    assert store._conn.execute("SELECT count(*) FROM candidates").fetchone()[0] == 1


def test_unknown_lookups_raise(store: Store) -> None:
    with pytest.raises(KeyError, match="nope"):
        store.get_verdict("nope")
    with pytest.raises(KeyError, match="nope"):
        store.get_problem("nope")
    with pytest.raises(KeyError, match="nope"):
        store.get_candidate_files("nope")


def test_verdict_requires_problem_and_candidate(store: Store) -> None:
    with pytest.raises(ValueError, match="problem 'h'.*put_problem"):
        store.put_verdict(make_verdict())
    store.put_problem("h", "p", None, "src")
    with pytest.raises(ValueError, match="candidate 'c'.*put_candidate"):
        store.put_verdict(make_verdict())
    assert store.verdicts_for() == []


def test_filtering_newest_first(store: Store) -> None:
    seed(store, "h1", "c1")
    seed(store, "h2", "c2")
    a = store.put_verdict(make_verdict(Status.CORRECT, "h1", "c1"))
    b = store.put_verdict(make_verdict(Status.INCORRECT, "h1", "c2"))
    c = store.put_verdict(make_verdict(Status.CORRECT, "h2", "c2"))
    ids = lambda rows: [vid for vid, _ in rows]  # noqa: E731
    assert ids(store.verdicts_for()) == [c, b, a]
    assert ids(store.verdicts_for(problem_hash="h1")) == [b, a]
    assert ids(store.verdicts_for(candidate_hash="c2")) == [c, b]
    assert ids(store.verdicts_for(status="correct")) == [c, a]
    assert ids(store.verdicts_for(status=Status.INCORRECT)) == [b]
    assert ids(store.verdicts_for(problem_hash="h1", status="correct")) == [a]
    assert ids(store.verdicts_for(limit=2)) == [c, b]
    assert store.verdicts_for(problem_hash="h3") == []
    with pytest.raises(ValueError, match="got 0"):
        store.verdicts_for(limit=0)


def _v1_db(path: Path) -> None:
    """A store at version 1 made by hand, holding one problem."""
    conn = sqlite3.connect(str(path))
    conn.executescript(migrations.V1_SQL)
    conn.execute("INSERT INTO problems (hash, name, source) VALUES ('h', 'p', 'src')")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()


def test_migration_applies_once_and_data_survive(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "old.sqlite"
    _v1_db(path)
    calls: list[int] = []

    def add_column(conn: sqlite3.Connection) -> None:
        calls.append(1)
        conn.execute("UPDATE problems SET note = 'migrated'")

    fake = [
        migrations.MIGRATIONS[0],
        Migration(2, "ALTER TABLE problems ADD COLUMN note TEXT; CREATE TABLE runs (id TEXT PRIMARY KEY);"),
        Migration(3, add_column, "fill note"),
    ]
    monkeypatch.setattr(migrations, "MIGRATIONS", fake)
    with Store.open(path) as s:
        assert s.schema_version == 3
        assert s.get_problem("h") == {"hash": "h", "name": "p", "path": None, "source": "src",
                                      "created_at": None, "note": "migrated"}
    with Store.open(path) as s:
        assert s.schema_version == 3
    assert calls == [1]


def test_failed_migration_rolls_back(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "old.sqlite"
    _v1_db(path)

    def crash(conn: sqlite3.Connection) -> None:
        raise RuntimeError("boom")

    fake = [migrations.MIGRATIONS[0], Migration(2, "CREATE TABLE runs (id TEXT);"), Migration(3, crash)]
    monkeypatch.setattr(migrations, "MIGRATIONS", fake)
    with pytest.raises(RuntimeError, match="boom"):
        Store.open(path)
    conn = sqlite3.connect(str(path))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "runs" not in tables and "problems" in tables
    conn.close()


def test_newer_store_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.sqlite"
    conn = sqlite3.connect(str(path))
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ValueError, match=rf"schema version 99.*version {latest_version()}\b"):
        Store.open(path)


def test_split_statements_keeps_trigger_bodies() -> None:
    script = "CREATE TABLE t (x TEXT);\nCREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE t SET x = ';'; END;\n"
    assert len(migrations.split_statements(script)) == 2


def _write_many(path: str, tag: str, n: int) -> None:
    """Child process: store n verdicts under one problem and a candidate of its own."""
    with Store.open(path) as s:
        seed(s, "shared", f"c-{tag}")
        for i in range(n):
            s.put_verdict(make_verdict(problem="shared", candidate=f"c-{tag}", runtime_ms=float(i)))


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_many, args=(path, tag, 50)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=50)
    assert [p.exitcode for p in procs] == [0, 0]
    with Store.open(path) as s:
        assert len(s.verdicts_for(problem_hash="shared", limit=1000)) == 100
        assert len(s.verdicts_for(candidate_hash="c-a", limit=1000)) == 50


def test_env_var_respected(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "env" / "store.sqlite"
    monkeypatch.setenv("KERNELWRIGHT_STORE", str(target))
    assert default_store_path() == target
    with Store.open() as s:
        assert s.path == target
    assert target.exists()


def test_xdg_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KERNELWRIGHT_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_store_path() == tmp_path / "kernelwright" / "store.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_store_path() == tmp_path / "home" / ".local" / "share" / "kernelwright" / "store.sqlite"


def test_v1_store_gains_the_baselines_table(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    _v1_db(path)
    with Store.open(path) as s:
        assert s.schema_version == latest_version()
        assert s.get_problem("h")["name"] == "p"  # the v1 rows survive
        rec = {"problem_hash": "h", "machine_key": "m", "precision": "fp32", "compile_mode": "default", "problem": "p",
               "eager_ms": 1.5, "compile_ms": 1.0}
        s.put_baseline(rec)
        s.put_baseline({**rec, "eager_ms": 2.0})  # a re-measure replaces the row
        got = s.get_baseline("h", "m", "fp32", "default")
        assert got["eager_ms"] == 2.0 and got["compile_ms"] == 1.0 and got["stored_at"]
        assert s.get_baseline("h", "other machine", "fp32", "default") is None
        assert [b["eager_ms"] for b in s.baselines()] == [2.0]
        with pytest.raises(ValueError, match="machine_key"):
            s.put_baseline({**rec, "machine_key": ""})


def test_a_candidate_records_its_main_file(store: Store) -> None:
    store.put_candidate("c1", "raw", {"model_new.py": "a"}, main="model_new.py")
    store.put_candidate("c2", "raw", {"fast_sum.py": "b", "helper.py": "c"}, main="fast_sum.py")
    assert store.get_candidate("c1")["main"] == "model_new.py"
    got = store.get_candidate("c2")
    assert got["main"] == "fast_sum.py" and got["files"] == {"fast_sum.py": "b", "helper.py": "c"} and got["build_path"] == "raw"
    with pytest.raises(ValueError, match="'other.py' is not among"):
        store.put_candidate("c3", "raw", {"model_new.py": "a"}, main="other.py")


def test_a_v4_store_gains_the_main_column_and_its_old_candidates_say_unknown(tmp_path: Path) -> None:
    path = tmp_path / "v4.sqlite"
    conn = sqlite3.connect(str(path))
    for m in migrations.MIGRATIONS[:4]:
        for statement in migrations.split_statements(m.step):
            conn.execute(statement)
    conn.execute("INSERT INTO candidates (hash, build_path, files_json) VALUES ('old', 'raw', '{\"a.py\": \"x\"}')")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()
    with Store.open(path) as s:
        assert s.schema_version == latest_version()
        assert s.get_candidate("old")["main"] is None  # not recorded then: never guessed
        assert s.get_candidate_files("old") == {"a.py": "x"}
        s.put_candidate("old", "raw", {"a.py": "x"}, main="a.py")  # judged again: the main file is filled in
        assert s.get_candidate("old")["main"] == "a.py"


def test_an_episode_is_recorded_once_per_rollout_and_seq(store: Store) -> None:
    rec = {"id": "ep-1", "task": {"id": "builtin:relu", "split": "train", "problem": {"hash": "h"}}, "end": "submit", "turns": 3,
           "tokens": 900, "wall_s": 1.5, "excluded": False, "final": {"verdict": {"status": "correct"}},
           "reward": {"value": 2.0, "milestone": 2}}
    assert store.put_episode("ro-1", 0, rec) is True
    assert store.put_episode("ro-1", 0, {**rec, "id": "ep-again"}) is False  # a resumed rollout: the first stays
    assert store.put_episode("ro-1", 1, {**rec, "id": "ep-2", "excluded": True, "reward": {"value": None}}) is True
    got = store.episodes("ro-1", records=True)
    assert [(e["seq"], e["episode_id"], e["status"], e["reward"], e["excluded"]) for e in got] == [
        (0, "ep-1", "correct", 2.0, False), (1, "ep-2", "correct", None, True)]
    assert got[0]["record"]["turns"] == 3 and got[0]["task_id"] == "builtin:relu" and got[0]["problem_hash"] == "h"
    assert store.episodes("other") == []
