"""Export accepted synthesis tasks for training and for our own judge.

`export_tasks` writes three things under one output folder, each file atomically (a temporary file
beside it, then `os.replace`):

  kernelbench/levelN/K_NAME.py  the task's reference source, in the KernelBench layout; K numbers the
                                tasks of a level from 1 in the order given, so `load_suite` reads it
                                as `kernelbench:OUT/kernelbench`. Stale .py files are removed first.
  tasks.jsonl                   one JSON object per task: every key of the record plus `file`, the
                                relative path of its KernelBench file.
  train.parquet                 one row per task with an explicit schema (`parquet_schema`).

Which trainer reads which parquet column:
  verl (RL datasets): data_source (picks the reward function), prompt (chat messages), ability,
                      reward_model {style, ground_truth} (ground_truth is the reference source the
                      reward judges a candidate against), extra_info (passed through to the reward).
  TRL:                prompt, in the conversational format (a list of {role, content} messages).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kernelwright.agent.prompts import problem_prompt

REQUIRED_KEYS = ("id", "index", "name", "ops", "n_ops", "level", "source", "hash", "seed", "proxy_ms", "measured_ms", "device")
ABILITY = "cuda_kernel"
KERNELBENCH_DIR = "kernelbench"
JSONL_NAME = "tasks.jsonl"
PARQUET_NAME = "train.parquet"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class _PromptProblem:
    """What `problem_prompt` reads of a problem."""

    name: str  # the task's name, e.g. "Conv2d_GELU_GroupNorm"
    source: str  # the reference program, KernelBench format


def _validate_task(task: dict[str, Any], position: int) -> None:
    """ValueError naming the task and the cause when a record cannot be exported."""
    label = task.get("id", f"#{position}")
    missing = [k for k in REQUIRED_KEYS if k not in task]
    if missing:
        raise ValueError(f"task {label!r} is missing required key {missing[0]!r} (required: {', '.join(REQUIRED_KEYS)})")
    if not isinstance(task["level"], int) or isinstance(task["level"], bool) or task["level"] < 1:
        raise ValueError(f"task {label!r}: level must be a positive int, got {task['level']!r}")
    if not isinstance(task["name"], str) or not _SAFE_NAME.match(task["name"]):
        raise ValueError(f"task {label!r}: name must be filename-safe (letters, digits, _ . -), got {task['name']!r}")
    if not isinstance(task["source"], str):
        raise ValueError(f"task {label!r}: source must be a str, got {type(task['source']).__name__}")


def validate_tasks(tasks: list[dict[str, Any]]) -> None:
    """Check every record's keys, level and name, and that ids are unique; ValueError otherwise."""
    seen: set[str] = set()
    for position, task in enumerate(tasks):
        _validate_task(task, position)
        if task["id"] in seen:
            raise ValueError(f"duplicate task id {task['id']!r} (at position {position})")
        seen.add(task["id"])


def kernelbench_paths(tasks: list[dict[str, Any]]) -> list[str]:
    """Each task's relative path, `kernelbench/levelN/K_NAME.py`, K counting from 1 per level."""
    counts: dict[int, int] = {}
    paths = []
    for task in tasks:
        level = task["level"]
        counts[level] = counts.get(level, 0) + 1
        paths.append(f"{KERNELBENCH_DIR}/level{level}/{counts[level]}_{task['name']}.py")
    return paths


def _replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """Have write() fill a temporary file beside path, then move it over path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(temp))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _write_text(path: Path, text: str) -> None:
    _replace_atomically(path, lambda temp: temp.write_bytes(text.encode("utf-8")))  # bytes: no newline translation


def _clear_kernelbench(root: Path) -> None:
    """Remove the .py files of every levelN/ folder under root, and level folders left empty."""
    for folder in root.glob("level[0-9]*"):
        if not folder.is_dir():
            continue
        for stale in folder.glob("*.py"):
            stale.unlink()
        if not any(folder.iterdir()):
            folder.rmdir()


def _jsonl_text(tasks: list[dict[str, Any]], paths: list[str]) -> str:
    return "".join(json.dumps({**task, "file": path}, ensure_ascii=False) + "\n" for task, path in zip(tasks, paths))


def load_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The task records of a tasks.jsonl; ValueError naming the line when one is not a JSON object."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append(record)
    return records


PYARROW_MISSING = "pyarrow is not installed (pip install pyarrow; in a checkout: pip install -e '.[synth]')"


class PyarrowMissing(RuntimeError):
    """train.parquet cannot be written here: pyarrow is not installed."""


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise PyarrowMissing(f"writing {PARQUET_NAME} needs pyarrow: {PYARROW_MISSING}") from None
    return pa, pq


def export_or_skip(tasks: list[dict[str, Any]], out: Path, *, device: str = "cuda") -> dict[str, Any]:
    """export_tasks, and without pyarrow the files that need none: the summary's `skipped` then says
    {train.parquet: why}. A train.parquet left there by an earlier export would not match the new
    tasks.jsonl, so it is removed, and the reason says so."""
    try:
        return {**export_tasks(tasks, out, device=device), "skipped": {}}
    except PyarrowMissing:  # only that: a write that failed for another reason is raised, not called a missing package
        summary = export_tasks(tasks, out, device=device, parquet=False)
    stale = Path(out) / PARQUET_NAME
    why = PYARROW_MISSING
    if stale.exists():
        stale.unlink()
        why += f"; the {PARQUET_NAME} of an earlier export there was removed (it did not match the new tasks)"
    return {**summary, "skipped": {PARQUET_NAME: why}}


def parquet_schema(pa: Any) -> Any:
    """The train.parquet schema, explicit so that empty or all-null columns keep their types."""
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    extra = pa.struct([("index", pa.int64()), ("split", pa.string()), ("task_id", pa.string()), ("name", pa.string()),
                       ("n_ops", pa.int64()), ("ops", pa.list_(pa.string())), ("problem_hash", pa.string()),
                       ("proxy_ms", pa.float64()), ("measured_ms", pa.float64())])
    return pa.schema([("data_source", pa.string()), ("prompt", pa.list_(message)), ("ability", pa.string()),
                      ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
                      ("extra_info", extra)])


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def training_row(task: dict[str, Any], *, data_source: str, split: str, device: str) -> dict[str, Any]:
    """One train.parquet row: a single user message asking for a faster ModelNew, and the reference."""
    content = problem_prompt(_PromptProblem(task["name"], task["source"]), device, tools=False, target=None)
    extra = {"index": int(task["index"]), "split": split, "task_id": task["id"], "name": task["name"],
             "n_ops": int(task["n_ops"]), "ops": [str(op) for op in task["ops"]], "problem_hash": task["hash"],
             "proxy_ms": _optional_float(task["proxy_ms"]), "measured_ms": _optional_float(task["measured_ms"])}
    return {"data_source": data_source, "prompt": [{"role": "user", "content": content}], "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": task["source"]}, "extra_info": extra}


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    pa, pq = _pyarrow()
    table = pa.Table.from_pylist(rows, schema=parquet_schema(pa))
    _replace_atomically(path, lambda temp: pq.write_table(table, temp))


def export_tasks(tasks: list[dict[str, Any]], out: Path, *, data_source: str = "kernelwright/synth",
                 split: str = "train", device: str = "cuda", parquet: bool = True) -> dict[str, Any]:
    """Write the KernelBench files, tasks.jsonl and (unless parquet=False) train.parquet under out;
    return a summary."""
    validate_tasks(tasks)
    out = Path(out)
    rows = [training_row(t, data_source=data_source, split=split, device=device) for t in tasks]
    paths = kernelbench_paths(tasks)
    if parquet:
        _pyarrow()  # fail before touching any file when pyarrow is missing
    _clear_kernelbench(out / KERNELBENCH_DIR)
    for task, rel in zip(tasks, paths):
        _write_text(out / rel, task["source"])
    _write_text(out / JSONL_NAME, _jsonl_text(tasks, paths))
    if parquet:
        _write_parquet(out / PARQUET_NAME, rows)
    per_level: dict[int, int] = {}
    for task in tasks:
        per_level[task["level"]] = per_level.get(task["level"], 0) + 1
    files = {"kernelbench": KERNELBENCH_DIR, "jsonl": JSONL_NAME, **({"parquet": PARQUET_NAME} if parquet else {})}
    return {"n": len(tasks), "files": files,
            "per_level": dict(sorted(per_level.items()))}
