"""The synthesis export: KernelBench files our own loader reads, tasks.jsonl that round-trips, and a
train.parquet with the columns and types that verl's RL datasets and TRL read."""

from __future__ import annotations

import hashlib
import sys
import textwrap

import pytest

from kernelwright.problems.suite import load_suite
from kernelwright.synth.export import export_tasks, load_jsonl

pytestmark = pytest.mark.timeout(30)

RELU = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)


    def get_inputs():
        return [torch.randn(4, 8)]


    def get_init_inputs():
        return []
    ''')

SOFTMAX = RELU.replace("torch.relu(x)", "torch.softmax(x, dim=-1)")

LINEAR_GELU = textwrap.dedent('''\
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.linear = nn.Linear(n, n)

        def forward(self, x):
            return torch.nn.functional.gelu(self.linear(x))


    def get_inputs():
        return [torch.randn(4, 8)]


    def get_init_inputs():
        return [8]
    ''')


def _task(index: int, name: str, ops: list[str], source: str, **extra: object) -> dict:
    return {"id": f"syn-s7-{index:06d}", "index": index, "name": name, "ops": ops, "n_ops": len(ops),
            "level": 1 if len(ops) == 1 else 2, "source": source, "hash": hashlib.sha256(source.encode()).hexdigest(),
            "seed": 7, "proxy_ms": 0.25 * (index + 1), "measured_ms": None, "device": "NVIDIA H200", **extra}


@pytest.fixture
def arrow() -> tuple:
    """pyarrow and pyarrow.parquet (the synth extra): a test that writes or reads train.parquet skips
    without them; the validation tests and the test of the missing-package message run either way."""
    return pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def tasks() -> list[dict]:
    return [_task(0, "ReLU", ["relu"], RELU, attempts=2),
            _task(1, "Linear_GELU", ["linear", "gelu"], LINEAR_GELU),
            _task(2, "Softmax", ["softmax"], SOFTMAX, notes={"why": "kept"})]


EXPECTED_FILES = {"kernelbench/level1/1_ReLU.py": RELU, "kernelbench/level2/1_Linear_GELU.py": LINEAR_GELU,
                  "kernelbench/level1/2_Softmax.py": SOFTMAX}


@pytest.mark.usefixtures("arrow")
def test_kernelbench_layout_read_by_our_loader(tasks, tmp_path):
    summary = export_tasks(tasks, tmp_path)
    assert summary == {"n": 3, "files": {"kernelbench": "kernelbench", "jsonl": "tasks.jsonl", "parquet": "train.parquet"},
                       "per_level": {1: 2, 2: 1}}
    for rel, source in EXPECTED_FILES.items():
        assert (tmp_path / rel).read_bytes() == source.encode()
    entries = load_suite("kernelbench:" + str(tmp_path / "kernelbench"))
    assert [(e.level, e.id, e.problem.name) for e in entries] == [(1, 1, "1_ReLU"), (1, 2, "2_Softmax"), (2, 1, "1_Linear_GELU")]
    assert {e.problem.hash for e in entries} == {t["hash"] for t in tasks}
    assert not list(tmp_path.rglob("*.tmp"))


def test_jsonl_round_trips_every_key(tasks, tmp_path):
    export_tasks(tasks, tmp_path, parquet=False)  # tasks.jsonl is written the same either way
    back = load_jsonl(tmp_path / "tasks.jsonl")
    assert [{k: v for k, v in r.items() if k != "file"} for r in back] == tasks
    assert [r["file"] for r in back] == list(EXPECTED_FILES)


def test_parquet_schema_and_verl_rows(tasks, tmp_path, arrow):
    pa, pq = arrow
    export_tasks(tasks, tmp_path, data_source="kw/test", split="val", device="cuda:0")
    table = pq.read_table(tmp_path / "train.parquet")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert table.schema.field("prompt").type == pa.list_(message)
    assert table.schema.field("reward_model").type == pa.struct([("style", pa.string()), ("ground_truth", pa.string())])
    extra = table.schema.field("extra_info").type
    assert {extra.field(i).name: extra.field(i).type for i in range(extra.num_fields)} == {
        "index": pa.int64(), "split": pa.string(), "task_id": pa.string(), "name": pa.string(), "n_ops": pa.int64(),
        "ops": pa.list_(pa.string()), "problem_hash": pa.string(), "proxy_ms": pa.float64(), "measured_ms": pa.float64()}
    for row, task in zip(table.to_pylist(), tasks):
        assert row["data_source"] == "kw/test" and row["ability"] == "cuda_kernel"
        [msg] = row["prompt"]
        assert msg["role"] == "user" and task["source"].rstrip() in msg["content"] and "cuda:0" in msg["content"]
        assert f"`{task['name']}`" in msg["content"]
        assert row["reward_model"] == {"style": "rule", "ground_truth": task["source"]}
        assert row["extra_info"] == {"index": task["index"], "split": "val", "task_id": task["id"], "name": task["name"],
                                     "n_ops": task["n_ops"], "ops": task["ops"], "problem_hash": task["hash"],
                                     "proxy_ms": task["proxy_ms"], "measured_ms": None}


def test_parquet_reads_as_trl_conversations(tasks, tmp_path, arrow):
    _, pq = arrow
    export_tasks(tasks, tmp_path)
    prompts = pq.read_table(tmp_path / "train.parquet", columns=["prompt"]).to_pylist()
    for row in prompts:
        assert isinstance(row["prompt"], list)
        assert all(isinstance(m, dict) and set(m) == {"role", "content"} for m in row["prompt"])


def test_empty_export_keeps_types(tmp_path, arrow):
    pa, pq = arrow
    summary = export_tasks([], tmp_path)
    table = pq.read_table(tmp_path / "train.parquet")
    assert summary["n"] == 0 and table.num_rows == 0
    assert table.schema.field("extra_info").type.field("measured_ms").type == pa.float64()


def test_reexport_removes_stale_files(tasks, tmp_path, arrow):
    _, pq = arrow
    export_tasks(tasks, tmp_path)
    summary = export_tasks([tasks[2], _task(3, "ReLU", ["relu"], RELU)], tmp_path)
    assert summary["per_level"] == {1: 2}
    files = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "kernelbench").rglob("*"))
    assert files == ["kernelbench/level1", "kernelbench/level1/1_Softmax.py", "kernelbench/level1/2_ReLU.py"]
    assert len(load_jsonl(tmp_path / "tasks.jsonl")) == 2
    assert pq.read_table(tmp_path / "train.parquet").num_rows == 2


def test_same_name_in_one_level_is_fine(tmp_path):
    export_tasks([_task(0, "ReLU", ["relu"], RELU), _task(1, "ReLU", ["relu"], RELU)], tmp_path, parquet=False)
    assert sorted(p.name for p in (tmp_path / "kernelbench" / "level1").iterdir()) == ["1_ReLU.py", "2_ReLU.py"]


def test_missing_key_names_key_and_task(tasks, tmp_path):
    del tasks[1]["hash"]
    with pytest.raises(ValueError, match=r"syn-s7-000001.*'hash'"):
        export_tasks(tasks, tmp_path)
    assert not any(tmp_path.iterdir())


def test_duplicate_id_rejected(tasks, tmp_path):
    tasks[2]["id"] = tasks[0]["id"]
    with pytest.raises(ValueError, match="duplicate task id 'syn-s7-000000'"):
        export_tasks(tasks, tmp_path)


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden"])
def test_unsafe_name_rejected(name, tmp_path):
    with pytest.raises(ValueError, match="filename-safe"):
        export_tasks([_task(0, name, ["relu"], RELU)], tmp_path)


def test_missing_pyarrow_is_a_clear_error(tasks, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError, installed or not
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(RuntimeError, match=r"pip install -e '\.\[synth\]'"):
        export_tasks(tasks, tmp_path)
    assert not any(tmp_path.iterdir())


def test_load_jsonl_names_bad_line(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a"}\n\nnot json\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl:3: not JSON"):
        load_jsonl(path)
