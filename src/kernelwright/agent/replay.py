"""The replay backend: a recorded run's model replies, handed back by slot instead of asking a model.

A recording is one JSON file:

    {"format": "kernelwright-recording", "version": 1,
     "provenance": {...},          free-form: who made it, against what server, when, commit, device
     "problem": {"name": ..., "hash": "sha256...", "source": ...},
     "objective": {...},           Objective.to_dict() of the recorded run
     "strategy": "refine",
     "turns": [{"key": "t0", "reply": {...Reply.to_dict()...}}, ...],
     "recorded_verdicts": [{"key": "t0", "status": "compile_error", "runtime_ms": null,
                            "speedup_vs_best": null}, ...]}

`complete(..., key=K)` returns the next unused recorded reply of slot K (a slot recorded several
times gives its replies in recorded order) and raises LLMError(kind="exhausted") when none is left.
The messages sent are ignored: a replay reproduces the model, never the judge. Recorded verdicts
are for people and for divergence reports only; a replayed reply carries no verdict (a reply whose
recorded fields include anything Reply does not have is refused when the file is read), and every
candidate is judged afresh. `recorded_verdict(K)` lets the caller say where a fresh verdict differs.

`write_recording` and `load_recording` are the one writer and the one reader of the format.
`make_backend` is the agent's factory: llm.backend's clients, and `replay:PATH` besides.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from kernelwright.agent.objective import Objective
from kernelwright.core.runs import LLMError, Message, Reply, ToolSpec
from kernelwright.llm import backend as llm

logger = logging.getLogger(__name__)

FORMAT = "kernelwright-recording"
VERSION = 1
_REQUIRED = ("provenance", "problem", "objective", "strategy", "turns")
_REPLY_FIELDS = frozenset(f.name for f in dataclasses.fields(Reply))


class ReplayBackend:
    """Answers each slot with the replies recorded for it, in order."""

    supports_tools = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.name = f"replay:{self.path}"
        self.recording = load_recording(path)
        self._queues: dict[str, collections.deque[Reply]] = collections.defaultdict(collections.deque)
        for turn in self.recording["turns"]:
            self._queues[turn["key"]].append(Reply.from_dict(turn["reply"]))
        self._used: collections.Counter[str] = collections.Counter()

    def __repr__(self) -> str:
        return f"ReplayBackend(name={self.name!r}, turns_left={self.turns_left()})"

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSpec] = (), *, key: str = "",
                 max_tokens: int | None = None, temperature: float | None = None) -> Reply:
        """The next recorded reply for slot `key`."""
        queue = self._queues.get(key)
        if not queue:
            used = self._used[key]
            raise LLMError("exhausted", f"recording {self.path} has no turn left for slot {key!r} "
                                        f"({used} already replayed for it; {self.turns_left()} left in all)")
        self._used[key] += 1
        logger.debug("replaying slot %r (use %d) from %s", key, self._used[key], self.path)
        return queue.popleft()

    def turns_left(self) -> int:
        """Recorded turns not replayed yet."""
        return sum(len(q) for q in self._queues.values())

    def recorded_verdict(self, key: str, occurrence: int | None = None) -> dict[str, Any] | None:
        """The recorded verdict of slot `key` (a copy), or None when none was recorded.

        `occurrence` picks among verdicts recorded under one slot (0-based); by default the one that
        goes with the slot's latest replayed turn.
        """
        if occurrence is None:
            occurrence = max(0, self._used[key] - 1)
        found = [v for v in self.recording["recorded_verdicts"] if v["key"] == key]
        return copy.deepcopy(found[occurrence]) if 0 <= occurrence < len(found) else None


def make_backend(spec: str, **options: Any) -> llm.Backend:
    """The backend for a PROVIDER:MODEL spec (llm.backend.make_backend's options), `replay:PATH` included."""
    return llm.make_backend(spec, offline={"replay": ReplayBackend}, **options)


# ---- reading and writing ----------------------------------------------------------------------

def load_recording(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A recording file, checked; ValueError names the file and what is wrong."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"cannot read recording {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"recording {path} is not valid JSON: {exc}") from None
    problem = recording_problem(data)
    if problem:
        raise ValueError(f"recording {path}: {problem}")
    data.setdefault("recorded_verdicts", [])
    return data


def write_recording(path: str | os.PathLike[str], *, provenance: Mapping[str, Any], problem: Mapping[str, Any],
                    objective: Objective | Mapping[str, Any], strategy: str,
                    turns: Sequence[tuple[str, Reply] | Mapping[str, Any]],
                    recorded_verdicts: Sequence[Mapping[str, Any]]) -> None:
    """Write a recording atomically (temp file, then rename). `turns` holds (key, Reply) pairs or
    {"key", "reply"} dicts whose reply is a Reply or its dict form. ValueError on a bad field."""
    data = {"format": FORMAT, "version": VERSION, "provenance": dict(provenance), "problem": dict(problem),
            "objective": objective.to_dict() if isinstance(objective, Objective) else dict(objective),
            "strategy": strategy, "turns": [_turn_dict(t) for t in turns],
            "recorded_verdicts": [dict(v) for v in recorded_verdicts]}
    problem_text = recording_problem(data)
    if problem_text:
        raise ValueError(f"cannot write recording {path}: {problem_text}")
    try:
        text = json.dumps(data, indent=1) + "\n"
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot write recording {path}: a field is not JSON: {exc}") from None
    _atomic_write(Path(path), text)


def _turn_dict(turn: tuple[str, Reply] | Mapping[str, Any]) -> dict[str, Any]:
    key, reply = (turn["key"], turn["reply"]) if isinstance(turn, Mapping) else turn
    return {"key": key, "reply": reply.to_dict() if isinstance(reply, Reply) else dict(reply)}


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


# ---- validation -------------------------------------------------------------------------------

def recording_problem(data: Any) -> str:
    """What is wrong with a recording's parsed JSON, or "" when nothing is."""
    if not isinstance(data, dict):
        return f"must be a JSON object, got {type(data).__name__}"
    if data.get("format") != FORMAT:
        return f"format must be {FORMAT!r}, got {data.get('format')!r}"
    if data.get("version") != VERSION:
        return f"version must be {VERSION}, got {data.get('version')!r} (this kernelwright reads version {VERSION})"
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        return f"missing fields {missing}"
    for name in ("provenance", "problem", "objective"):
        if not isinstance(data[name], dict):
            return f"{name} must be an object, got {type(data[name]).__name__}"
    if not isinstance(data["strategy"], str):
        return f"strategy must be a string, got {type(data['strategy']).__name__}"
    return _turns_problem(data["turns"]) or _verdicts_problem(data.get("recorded_verdicts", []))


def _turns_problem(turns: Any) -> str:
    if not isinstance(turns, list):
        return f"turns must be a list, got {type(turns).__name__}"
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("key"), str) or not isinstance(turn.get("reply"), dict):
            return f"turn {i} must be an object with a string key and a reply object, got {str(turn)[:200]}"
        extra = sorted(set(turn["reply"]) - _REPLY_FIELDS)
        if extra:
            return f"turn {i} (key {turn['key']!r}): reply has fields a Reply does not have: {extra}"
        try:
            Reply.from_dict(turn["reply"])
        except (TypeError, ValueError, KeyError) as exc:
            return f"turn {i} (key {turn['key']!r}): reply does not parse: {type(exc).__name__}: {exc}"
    return ""


def _verdicts_problem(verdicts: Any) -> str:
    if not isinstance(verdicts, list):
        return f"recorded_verdicts must be a list, got {type(verdicts).__name__}"
    for i, verdict in enumerate(verdicts):
        if not isinstance(verdict, dict) or not isinstance(verdict.get("key"), str):
            return f"recorded verdict {i} must be an object with a string key, got {str(verdict)[:200]}"
    return ""
