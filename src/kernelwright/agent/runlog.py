"""One run's history in the store, written as it happens: every prompt, reply, tool call, verdict,
pause, hint and review is a row the moment it exists, so a crash loses at most the step in flight.

Threads (the tree search's branches) each get their own store connection.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from kernelwright.core.runs import Reply, RunStatus, StepKind, Usage

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


class RunLog:
    """Writes one run's steps and state; counts tokens, cost and elapsed time."""

    def __init__(self, store_path: Path | None, run_id: str, *, progress: Progress | None = None, elapsed_s: float = 0.0) -> None:
        self.store_path = store_path  # the SQLite store (None: the default one)
        self.run_id = run_id  # run-xxxxxxxx
        self.progress = progress  # live progress lines (stderr in the CLI)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._started = time.monotonic() - elapsed_s  # elapsed time carries over a resume
        self.prompt_tokens = 0  # tokens of this run so far (resumes included once loaded)
        self.completion_tokens = 0
        self.cost_usd: float | None = None

    def db(self) -> Any:
        """This thread's store connection."""
        from kernelwright.store import Store

        if getattr(self._local, "db", None) is None:
            self._local.db = Store.open(self.store_path)
        return self._local.db

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    @property
    def elapsed_s(self) -> float:
        """Wall seconds this run has spent, over all its resumes."""
        return time.monotonic() - self._started

    def carry_elapsed(self, seconds: float) -> None:
        """Count the wall time earlier stretches of a resumed run spent."""
        self._started -= seconds

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def load_totals(self) -> None:
        """Start the counters from what the store already holds (a resumed run)."""
        totals = self.db().run_totals(self.run_id)
        self.prompt_tokens = int(totals.get("prompt_tokens") or 0)
        self.completion_tokens = int(totals.get("completion_tokens") or 0)
        self.cost_usd = totals.get("cost_usd")

    def step(self, kind: StepKind, payload: dict[str, Any], *, branch: str = "", usage: Usage | None = None) -> int:
        """Record one step; returns its sequence number."""
        if usage is not None:
            with self._lock:
                self.prompt_tokens += usage.prompt_tokens
                self.completion_tokens += usage.completion_tokens
                if usage.cost_usd is not None:
                    self.cost_usd = (self.cost_usd or 0.0) + usage.cost_usd
        return self.db().add_step(self.run_id, kind, payload, branch=branch, usage=usage)

    def reply(self, key: str, branch: str, reply: Reply, *, replayed: bool = False) -> None:
        """Record a model reply, count its tokens and cost, and say so on the progress line. A
        replayed reply counts the tokens its recording reports, and no cost: nothing was spent now."""
        usage = dataclasses.replace(reply.usage, cost_usd=None) if replayed else reply.usage
        self.step(StepKind.RESPONSE, {"key": key, "reply": reply.to_dict()}, branch=branch, usage=usage)
        calls = ", ".join(c.name for c in reply.tool_calls)
        self.say(f"{key}: reply, {reply.usage.total_tokens} tokens" + (" (recorded)" if replayed else "") + (f", tools: {calls}" if calls else ""))

    def update(self, **fields: Any) -> None:
        """Change the run's row (status, state, best, out_dir, summary)."""
        if isinstance(fields.get("status"), RunStatus):
            fields["status"] = fields["status"].value
        self.db().update_run(self.run_id, **fields)

    def say(self, message: str) -> None:
        """One live progress line."""
        log.info("%s: %s", self.run_id, message)
        if self.progress is not None:
            self.progress(message)
