"""The one door to the judge: `Judge(service=None | URL).evaluate(problem, candidate, policy)`.

Without a service (and without KERNELWRIGHT_SERVICE) it judges in this process with the warm workers
(the fork server and warm reference children, kept for the process's lifetime); with one it sends
the problem's bytes, the candidate's files and the policy to `kernelwright serve` and waits for the
verdict. Either way the answer is the same Verdict.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from kernelwright.judge.policy import Policy, policy_to_wire
from kernelwright.core.records import Verdict
from kernelwright.problems.loader import Problem, ProblemError, load_problem

SERVICE_ENV = "KERNELWRIGHT_SERVICE"
TOKEN_ENV = "KERNELWRIGHT_SERVICE_TOKEN"
POLL_S = 30.0  # each wait asked of the service


class ServiceError(RuntimeError):
    """The service could not be reached, refused the request, or failed it."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Judge:
    """evaluate() in this process or through a service; `aevaluate` is its async twin."""

    def __init__(self, service: str | None = None, *, device: str = "auto", token: str | None = None) -> None:
        self.service = service if service is not None else (os.environ.get(SERVICE_ENV) or None)
        self.device = device
        self.token = token if token is not None else os.environ.get(TOKEN_ENV)
        self.last_job: dict[str, Any] | None = None  # the service's last answer about a job, verdict left out (its times and progress)
        if self.service is not None:
            url = urlparse(self.service)
            if url.scheme not in ("unix", "http") or (url.scheme == "unix" and not url.path) or (url.scheme == "http" and not url.port):
                raise ValueError(f"a service is unix:///PATH or http://HOST:PORT, got {self.service!r}")

    def evaluate(self, problem: Problem | str | Path, candidate: str | Path, policy: Policy | None = None, *,
                 progress: Any = None, baseline_store: str | Path | None = None) -> Verdict:
        """The verdict. `baseline_store` is where cached baselines are looked up in process; a
        service looks them up in its own store."""
        policy = policy or Policy()
        problem = problem if isinstance(problem, Problem) else load_problem(problem)
        if self.service is None:
            from kernelwright.judge.evaluate import evaluate

            return evaluate(problem, candidate, policy, device=self.device, progress=progress, baseline_store=baseline_store)
        return self._remote(problem, Path(candidate), policy, progress)

    async def aevaluate(self, problem: Problem | str | Path, candidate: str | Path, policy: Policy | None = None) -> Verdict:
        return await asyncio.to_thread(self.evaluate, problem, candidate, policy)

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/v1/health")

    def _remote(self, problem: Problem, candidate: Path, policy: Policy, progress: Any) -> Verdict:
        job = self._call("POST", "/v1/evaluations", request_for(problem, candidate, policy, self.device))
        try:
            while job.get("state") in ("queued", "running"):
                job = self._call("GET", f"/v1/evaluations/{job['id']}?wait={POLL_S:g}")
                if progress is not None and job.get("progress"):
                    progress(job["progress"])
        except BaseException:
            self._cancel(job.get("id"))
            raise
        self.last_job = {k: v for k, v in job.items() if k != "verdict"}
        return _answer(job)

    def _cancel(self, job_id: str | None) -> None:
        if job_id:
            try:
                self._call("DELETE", f"/v1/evaluations/{job_id}")
            except (ServiceError, OSError):
                pass

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        url = urlparse(self.service or "")
        timeout = POLL_S + 30
        conn = _UnixConnection(url.path, timeout) if url.scheme == "unix" else http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            resp = conn.getresponse()
            data = json.loads(resp.read() or b"{}")
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise ServiceError(f"the judge service at {self.service} did not answer {method} {path}: {exc}") from None
        finally:
            conn.close()
        if resp.status >= 400:
            err = data.get("error") or {}
            if resp.status == 400:
                raise ValueError(f"the judge service refused the request: {err.get('message')}")
            raise ServiceError(f"the judge service answered {resp.status}: {err.get('message')}")
        return data


def request_for(problem: Problem, candidate: Path, policy: Policy, device: str = "auto") -> dict[str, Any]:
    """The wire form of one evaluation (`kernelwright serve`'s, a pool worker's): the problem's
    bytes, the candidate's files, the whole policy. ValueError for a malformed candidate."""
    from kernelwright.judge.snapshot import main_name, read_candidate

    return {"problem": {"name": problem.name, "source_b64": base64.b64encode(problem.path.read_bytes()).decode()},
            "candidate": {"files": read_candidate(candidate), "main": main_name(candidate),
                          "shown_as": str(candidate if candidate.is_dir() else candidate.parent)},
            "policy": policy_to_wire(policy), "device": device}


def _answer(job: dict[str, Any]) -> Verdict:
    state = job.get("state")
    if state == "done":
        return Verdict.from_dict(job["verdict"])
    err = job.get("error") or {}
    if state == "failed" and err.get("kind") == "problem":
        raise ProblemError(err.get("message", "malformed problem"))
    if state == "failed" and err.get("kind") == "usage":
        raise ValueError(err.get("message", "malformed request"))
    raise ServiceError(f"evaluation {job.get('id')} ended {state}: {err.get('message', '')}".rstrip(": "))


def wait_for(url: str, timeout_s: float = 30.0, token: str | None = None) -> dict[str, Any]:
    """Wait until a service answers its health check; its answer."""
    judge, deadline = Judge(url, token=token), time.monotonic() + timeout_s
    while True:
        try:
            return judge.health()
        except ServiceError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
