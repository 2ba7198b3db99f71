"""`kernelwright serve`: a local evaluation service that holds the judge's warm workers.

Requests carry the problem's bytes, the candidate's files and the whole policy (judge.policy's wire
form), never paths, so the service and its callers need not share a folder. Each is queued, judged
by one of a few worker threads with exactly `evaluate()` (the fork server and the warm reference
children live in this process for its lifetime), and answered with exactly the verdict JSON of
`kernelwright eval`. Time in the queue counts against nothing: an evaluation's timeouts start when
a worker takes it. A queued or running evaluation can be cancelled.

HTTP/1.1 with JSON bodies, on a unix socket in a folder only its user can open (default), or on
TCP with a bearer token (loopback is not private on a shared host):

    POST   /v1/evaluations          {"problem": {...}, "candidate": {...}, "policy": {...}, "device": "auto"} -> {"id": ...}
                                     candidate: {"files": {name: text}, "main": "model_new.py" (the default) or
                                     a single file's own name, "shown_as": the caller's folder}
    GET    /v1/evaluations/ID?wait=S  the job: state (queued, running, done, failed, cancelled), verdict or error,
                                     queued_s, judged_s and progress_log ([seconds since it started, message], ...)
    DELETE /v1/evaluations/ID       cancel it
    GET    /v1/health               queue and worker counts, the fork server's state (starting, ready, ...)
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import json
import logging
import queue
import shutil
import socketserver
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import parse_qs, urlparse

from kernelwright.judge import refpool, sandbox_check
from kernelwright.judge.evaluate import Cancelled
from kernelwright.judge.policy import policy_from_wire, policy_to_wire
from kernelwright.judge.snapshot import MAIN, MAX_BYTES

log = logging.getLogger(__name__)

MAX_BODY = 64 * 2**20  # a request larger than this is refused
MAX_WAIT_S = 60.0  # the longest a GET waits for a job to finish
MAX_PROGRESS = 200  # progress messages a job keeps with their times (the first ones and the last)
KEEP_DONE = 1000  # finished jobs kept for their callers to collect (the oldest go first)
STATES = ("queued", "running", "done", "failed", "cancelled")


@dataclass
class Job:
    """One evaluation asked of the service."""

    id: str  # eval-<hex>
    request: dict[str, Any]  # as received (validated)
    state: str = "queued"  # one of STATES
    verdict: dict[str, Any] | None = None  # the verdict JSON once done
    error: dict[str, str] | None = None  # {"kind": problem | usage | infra, "message"} once failed
    progress: str = ""  # the judge's last progress message
    progress_log: list[tuple[float, str]] = field(default_factory=list)  # (seconds since the job started, message)
    cancel: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    times: dict[str, float] = field(default_factory=dict)  # queued, started, finished (unix time)

    def to_dict(self) -> dict[str, Any]:
        t = self.times
        waited = t.get("started", t.get("finished", time.time())) - t["queued"]
        judged = t["finished"] - t["started"] if "finished" in t and "started" in t else None
        return {"id": self.id, "state": self.state, "verdict": self.verdict, "error": self.error, "progress": self.progress,
                "progress_log": [list(p) for p in self.progress_log], "queued_s": waited, "judged_s": judged}

    def said(self, message: str) -> None:
        """A progress message of the judge's, kept with its time (the first MAX_PROGRESS - 1 and the last)."""
        self.progress = message
        entry = (round(time.time() - self.times.get("started", self.times["queued"]), 3), message)
        if len(self.progress_log) >= MAX_PROGRESS:
            self.progress_log[-1] = entry
        else:
            self.progress_log.append(entry)


def validate(request: Any) -> dict[str, Any]:
    """The request, checked: ValueError naming what is malformed."""
    if not isinstance(request, dict):
        raise ValueError("a request is a JSON object")
    prob, cand = request.get("problem"), request.get("candidate")
    if not isinstance(prob, dict) or not isinstance(prob.get("name"), str) or not isinstance(prob.get("source_b64"), str):
        raise ValueError("problem must be {\"name\": str, \"source_b64\": str}")
    _safe_name(prob["name"] + ".py")
    if not isinstance(cand, dict) or not isinstance(cand.get("files"), dict):
        raise ValueError("candidate must be {\"files\": {\"model_new.py\": text, ...}}")
    main = cand.get("main", MAIN)
    if not isinstance(main, str) or "/" in main or not main.endswith(".py") or main not in cand["files"]:
        raise ValueError(f"candidate.main must name a top-level .py file among its files (default {MAIN}), got {main!r}")
    if not isinstance(cand.get("shown_as", ""), str) or len(cand.get("shown_as", "")) > 4096:
        raise ValueError("candidate.shown_as, when given, is the caller's name of the candidate's folder (a string)")
    total = 0
    for name, text in cand["files"].items():
        _safe_name(name)
        if not isinstance(text, str):
            raise ValueError(f"candidate file {name!r} must be text")
        total += len(text.encode())
    if total > MAX_BYTES:
        raise ValueError(f"candidate files add up to {total} bytes, over the {MAX_BYTES}-byte limit")
    try:
        base64.b64decode(prob["source_b64"], validate=True)
        policy_from_wire(request.get("policy") or {})
    except (TypeError, binascii.Error) as exc:
        raise ValueError(f"malformed request: {exc}") from None
    if request.get("device", "auto") not in ("auto", "cuda", "cpu"):
        raise ValueError(f"device must be auto, cuda or cpu, got {request.get('device')!r}")
    return request


def _safe_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or path.is_absolute() or any(part in ("", ".", "..") for part in path.parts) or "\\" in name or "\0" in name:
        raise ValueError(f"file name {name!r} must be a plain relative path")
    return path


class JudgeService:
    """The queue, the worker threads and the jobs; HTTP is layered on top (make_server)."""

    def __init__(self, *, workers: int = 2, root: Path | None = None, pool: Any = None) -> None:
        """`pool` (a client.pool.Pool: `serve --ray`): its workers judge, as many at once as it has;
        this process only checks requests and passes them on (`workers` is then the pool's size)."""
        self.pool = pool
        workers = pool.size if pool is not None else workers
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if pool is None:
            refpool.keep_for(workers)  # one warm reference child for each problem it may be judging
        self.root = Path(tempfile.mkdtemp(prefix="kw-serve-", dir=root))
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._work, name=f"kw-judge-{i}", daemon=True) for i in range(workers)]
        for t in self._threads:
            t.start()

    def submit(self, request: Any) -> Job:
        job = Job(id=f"eval-{uuid.uuid4().hex[:12]}", request=validate(request))
        job.times["queued"] = time.time()
        with self._lock:
            self._jobs[job.id] = job
            self._forget_old()
        self._queue.put(job)
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and job.state in ("queued", "running"):
                job.cancel.set()
                if job.state == "queued":  # no worker has it: answered now, and no worker will take it
                    self._end(job, "cancelled")
        return job

    def counts(self) -> dict[str, int]:
        with self._lock:
            jobs = list(self._jobs.values())
        pool = {} if self.pool is None else {"pool": {"size": self.pool.size, "device": self.pool.device, "replaced": self.pool.replaced,
                                                     "retried": self.pool.retried}}
        return {s: sum(j.state == s for j in jobs) for s in STATES} | {"workers": len(self._threads)} | pool

    def _forget_old(self) -> None:
        done = [j for j in self._jobs.values() if j.finished.is_set()]
        for j in done[:max(0, len(done) - KEEP_DONE)]:
            del self._jobs[j.id]

    def _end(self, job: Job, state: str) -> None:
        job.state = state
        job.times["finished"] = time.time()
        job.finished.set()

    def _work(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                if job.cancel.is_set():
                    continue
                job.state, job.times["started"] = "running", time.time()
            try:
                self._judge(job)
            except Cancelled:
                self._end(job, "cancelled")
            except Exception as exc:  # noqa: BLE001 - a failure is the job's answer, the worker goes on
                log.exception("service job %s failed", job.id)
                job.error = {"kind": "infra", "message": f"{type(exc).__name__}: {exc}"[:2000]}
                self._end(job, "failed")

    def _judge(self, job: Job) -> None:
        from kernelwright.judge.evaluate import evaluate
        from kernelwright.problems.loader import ProblemError, load_problem

        folder = self.root / job.id
        try:
            problem_path, candidate_dir = _materialize(job.request, folder)
            policy = policy_from_wire(job.request.get("policy") or {})

            job.said("request materialized")
            try:
                if self.pool is not None:  # judged by a worker of the pool, which has the request's own bytes
                    request = job.request
                    if policy.baselines == "cached":  # the workers have no store: measured beside the candidate on the worker's device
                        policy = dataclasses.replace(policy, baselines="measured")
                        request = {**request, "policy": policy_to_wire(policy)}
                        job.said("cached baselines asked for: the pool's workers have no store, so they are measured beside the candidate")
                    job.said("sent to the pool")
                    verdict = self.pool.submit_request(load_problem(problem_path), policy, request).result()
                    if job.cancel.is_set():  # cancelled while a pool's worker judged it: the verdict is not the answer
                        raise Cancelled
                else:
                    verdict = evaluate(load_problem(problem_path), candidate_dir, policy, device=job.request.get("device", "auto"),
                                       progress=job.said, cancel=job.cancel, shown_as=job.request["candidate"].get("shown_as"))
            except ProblemError as exc:
                job.error = {"kind": "problem", "message": str(exc)}
                return self._end(job, "failed")
            except ValueError as exc:
                job.error = {"kind": "usage", "message": str(exc)}
                return self._end(job, "failed")
            job.verdict = verdict.to_dict()
            job.said("verdict serialized")
            self._end(job, "done")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        shutil.rmtree(self.root, ignore_errors=True)


def _materialize(request: dict[str, Any], folder: Path) -> tuple[Path, Path]:
    """The problem's file, one per content and name for the service's life (so the next request
    of that problem finds its warm reference child, whose key holds the path), and the candidate
    in the job's own folder; their paths (the candidate's: its folder, or its main file where that
    is not model_new.py)."""
    prob = request["problem"]
    source = base64.b64decode(prob["source_b64"], validate=True)
    problem_path = folder.parent / "problems" / hashlib.sha256(source).hexdigest()[:24] / f"{prob['name']}.py"
    if not problem_path.is_file():
        problem_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = problem_path.with_suffix(f".{folder.name}.tmp")
        tmp.write_bytes(source)
        tmp.replace(problem_path)  # whole or not at all, when two jobs bring it at once
        problem_path.chmod(0o444)
    cand_dir = folder / "candidate"
    for name, text in request["candidate"]["files"].items():
        dest = cand_dir / _safe_name(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    main = request["candidate"].get("main", MAIN)
    return problem_path, cand_dir if main == MAIN else cand_dir / main  # a single file: judged as eval judges it, by its name


class _Handler(BaseHTTPRequestHandler):
    server: "_HTTPServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:
        log.debug("serve: " + fmt, *args)

    def address_string(self) -> str:  # a unix socket's peer has no address
        return str(self.client_address or "unix")

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body, allow_nan=False).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        token = self.server.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return True
        self._reply(401, {"error": {"kind": "usage", "message": "missing or wrong bearer token"}})
        return False

    def _job_id(self) -> str | None:
        parts = urlparse(self.path).path.strip("/").split("/")
        return parts[2] if len(parts) == 3 and parts[:2] == ["v1", "evaluations"] else None

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        if not self._authorized():
            return
        if urlparse(self.path).path.rstrip("/") != "/v1/evaluations":
            return self._reply(404, {"error": {"kind": "usage", "message": f"no such endpoint: POST {self.path}"}})
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            return self._reply(413, {"error": {"kind": "usage", "message": f"a request body of 0 to {MAX_BODY} bytes, with its Content-Length"}})
        try:
            job = self.server.service.submit(json.loads(self.rfile.read(length) or b"null"))
        except ValueError as exc:
            return self._reply(400, {"error": {"kind": "usage", "message": str(exc)}})
        self._reply(202, {"id": job.id, "state": job.state})

    def do_GET(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        url = urlparse(self.path)
        if url.path.rstrip("/") == "/v1/health":
            from kernelwright.judge import forkpool

            return self._reply(200, {"ok": True, **self.server.service.counts(), "forkserver": forkpool.state()})
        job = self.server.service.get(self._job_id() or "")
        if job is None:
            return self._reply(404, {"error": {"kind": "usage", "message": f"no such evaluation: {self.path}"}})
        try:
            wait = min(MAX_WAIT_S, max(0.0, float(parse_qs(url.query).get("wait", ["0"])[0])))
        except ValueError:
            return self._reply(400, {"error": {"kind": "usage", "message": "wait must be a number of seconds"}})
        job.finished.wait(wait)
        self._reply(200, job.to_dict())

    def do_DELETE(self) -> None:  # noqa: N802
        if not self._authorized():
            return
        job = self.server.service.cancel(self._job_id() or "")
        if job is None:
            return self._reply(404, {"error": {"kind": "usage", "message": f"no such evaluation: {self.path}"}})
        self._reply(200, job.to_dict())


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    service: JudgeService
    token: str | None


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    service: JudgeService
    token: str | None
    bound: tuple[int, int, int]

    def server_bind(self) -> None:
        from kernelwright.core.sockets import bind_private

        self.bound = bind_private(self.socket, self.server_address)  # the file's identity: remove_if_ours at the end
        self.server_address = self.socket.getsockname()
        self.server_name, self.server_port = "localhost", 0

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """A sandboxed process (a candidate of a judge that is not root has its uid, and 0600 lets
        it in: it could ask for a verdict under --sandbox off) gets 403 and the reason, written on
        the accepting thread, and the connection closed: no handler thread, nothing read.
        TCP needs no such check: a sandboxed process cannot open a TCP socket (seccomp, Landlock)."""
        why = sandbox_check.confined_peer(request)
        if not why:
            return True
        line = sandbox_check.refused_peer_line(why)
        if line:
            log.warning("service: %s", line)
        body = json.dumps({"error": {"kind": "refused", "message": f"the judge's service serves no sandboxed process ({why})"}}).encode()
        head = f"HTTP/1.0 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        try:
            request.setblocking(False)
            for _ in range(16):  # what it sent already, read and dropped: a close with unread bytes resets the connection
                if not request.recv(65536):
                    break
        except OSError:
            pass
        try:
            request.settimeout(1.0)
            request.sendall(head.encode() + body)
        except OSError:
            pass
        return False


def make_server(service: JudgeService | None, *, socket_path: Path | None = None, host: str = "127.0.0.1", port: int | None = None,
                token: str | None = None) -> tuple[Any, str]:
    """An HTTP server for the service and its URL: on a unix socket in a folder of this user's alone
    (core.sockets), or on TCP, where a token is required. A None service is set on the server before it
    serves (`serve` binds first, then starts its pool)."""
    if socket_path is not None:
        from kernelwright.core.sockets import clear_stale, private_folder

        private_folder(str(socket_path))
        clear_stale(str(socket_path))  # a stale socket of a service that is gone
        server: Any = _UnixHTTPServer(str(socket_path), _Handler)  # bound 0600 from its first moment
        url = f"unix://{socket_path}"
    else:
        if not token:
            raise ValueError("a TCP service needs a token: on a shared host loopback is not private")
        server = _HTTPServer((host, port or 0), _Handler)
        url = f"http://{host}:{server.server_address[1]}"
    server.service, server.token = service, token
    return server, url
