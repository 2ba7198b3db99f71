"""Tasks for the environment: from a problem suite (built-in, a KernelBench checkout, a folder) or
from a synthesis's `tasks.jsonl`, each with its split.

The split is the problem's own: a task is held out (`test`) when a salted hash of its problem's
content hash falls under the held-out fraction, so the same program lands in the same split
whatever source it came from and in whatever order, and a training set never holds a test
problem. Synthesised tasks carry two programs; on the CPU the small one (`check_source`) is the
problem, as synthesis itself checks it there, and the split follows the full program either way.
Their files are written once each, named by content, so loads for two devices never overwrite a file
the other's tasks point at.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwright.problems.loader import Problem, ProblemError, load_problem
from kernelwright.problems.suite import load_suite

SPLITS = ("train", "test")
SALT = "kernelwright-rl-split-1"


@dataclass(frozen=True)
class Task:
    """One problem an episode works on."""

    id: str  # stable: the suite's name for it, or the synthesis task's id
    problem: Problem
    split: str  # train or test (unknown for a problem handed to KernelEnv.reset without a split)
    source: str  # the spec it came from
    meta: dict[str, Any]  # level, category, ops: whatever the source knew

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "problem": self.problem.to_dict(), "split": self.split, "source": self.source, "meta": self.meta}


def split_of(problem_hash: str, heldout: float) -> str:
    """`test` for the held-out fraction of problems, by a salted hash of the problem's content."""
    if not 0.0 <= heldout < 1.0:
        raise ValueError(f"the held-out fraction must be in [0, 1), got {heldout}")
    digest = hashlib.sha256(f"{SALT}:{problem_hash}".encode()).digest()
    return "test" if int.from_bytes(digest[:8], "big") / 2**64 < heldout else "train"


def load_tasks(spec: str | Path, *, heldout: float = 0.1, device: str = "cpu", split: str | None = None,
               cache: Path | None = None) -> list[Task]:
    """Every task `spec` names, each with its split; only one split's when `split` is given.

    `spec`: a suite (`builtin`, `builtin:LEVEL`, `kernelbench:PATH[:LEVEL]`, a problem file or a folder of
    them) or a synthesis's `tasks.jsonl` (or its folder). Synthesised programs are written under
    `cache` (default: a folder beside the jsonl) so that each task is a problem file the judge loads.
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    text = str(spec)
    jsonl = _tasks_jsonl(text)
    tasks = _synth_tasks(jsonl, heldout, device, cache) if jsonl else _suite_tasks(text, heldout)
    if not tasks:
        raise ProblemError(f"{text}: no tasks")
    seen: dict[str, str] = {}
    for t in tasks:
        if t.id in seen:
            raise ProblemError(f"{text}: two tasks are called {t.id!r}")
        seen[t.id] = t.problem.hash
    return [t for t in tasks if split is None or t.split == split]


def _tasks_jsonl(text: str) -> Path | None:
    if text.startswith(("builtin", "kernelbench:")):
        return None
    path = Path(text).expanduser()
    if path.is_file() and path.suffix == ".jsonl":
        return path
    if path.is_dir() and (path / "tasks.jsonl").is_file():
        return path / "tasks.jsonl"
    return None


def _suite_tasks(spec: str, heldout: float) -> list[Task]:
    out = []
    for entry in load_suite(spec):
        p = entry.problem
        name = {"builtin": f"builtin:{p.name}", "kernelbench": f"kernelbench:{entry.level}:{entry.id}"}.get(entry.suite, p.name)
        meta = {"level": entry.level, "category": entry.category, "suite": entry.suite, "spec": entry.spec}
        out.append(Task(name, p, split_of(p.hash, heldout), spec, meta))
    return out


def _synth_tasks(path: Path, heldout: float, device: str, cache: Path | None) -> list[Task]:
    folder = (cache or path.parent / "rl_problems").expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            tid, code = str(row["id"]), row["source"] if device == "cuda" or not row.get("check_source") else row["check_source"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProblemError(f"{path}:{n}: not a synthesis task ({type(exc).__name__}: {exc})") from None
        if not isinstance(code, str) or not tid.replace("-", "").replace("_", "").isalnum():
            raise ProblemError(f"{path}:{n}: task {tid!r} has no program or an id that is not a plain name")
        digest = hashlib.sha256(code.encode()).hexdigest()
        file = folder / f"{tid}-{digest[:16]}.py"  # by content: a file another load points at is never rewritten
        _write_once(file, code, digest)
        problem = load_problem(file)
        # the split follows the task's full program, whichever program this device judges
        full = hashlib.sha256(str(row["source"]).encode()).hexdigest()
        meta = {"level": row.get("level"), "ops": row.get("ops"), "name": row.get("name"), "synth_hash": row.get("hash"), "split_hash": full}
        out.append(Task(tid, problem, split_of(full, heldout), str(path), meta))
    return out


def task_payload(task: Task) -> dict[str, Any]:
    """A task as plain data that travels with a dataset row to a process with no file of it (a
    trainer's rollout worker, another node): its program's text, not a path."""
    p = task.problem
    return {"id": task.id, "name": p.name, "split": task.split, "source": task.source, "meta": task.meta, "program": p.source, "hash": p.hash}


def task_from_payload(payload: dict[str, Any] | str, cache: Path | None = None) -> Task:
    """The task a `task_payload` (or its JSON) describes. Its program is written once under `cache`
    (default: the kernelwright cache's rl_tasks), named by content, and must match the hash it came with."""
    from kernelwright.runtime.build import cache_dir

    try:
        d = json.loads(payload) if isinstance(payload, str) else dict(payload)
        tid, name, program, digest = str(d["id"]), str(d["name"]), d["program"], str(d["hash"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProblemError(f"not a task payload ({type(exc).__name__}: {exc})") from None
    if not isinstance(program, str) or hashlib.sha256(program.encode()).hexdigest() != digest:
        raise ProblemError(f"task {tid!r}: its program does not match its hash")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ProblemError(f"task {tid!r}: the problem's name {name!r} is not a plain name")
    file = (cache or cache_dir() / "rl_tasks").expanduser() / digest[:16] / f"{name}.py"
    _write_once(file, program, digest)
    return Task(tid, load_problem(file), str(d.get("split") or "unknown"), str(d.get("source") or ""), dict(d.get("meta") or {}))


def _write_once(file: Path, text: str, digest: str) -> None:
    """`text` at `file`, named by its content: written (whole, then moved into place) when the file
    is missing or no longer holds that content; processes and threads write apart."""
    if file.is_file() and hashlib.sha256(file.read_bytes()).hexdigest() == digest:
        return
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f"{file.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text)
    tmp.replace(file)
