"""The judge's pool (client.pool): the same verdicts as the in-process judge through worker
processes or Ray actors, and no request lost or answered twice when a worker dies mid-request."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import candidate, correctness_policy, problem
from kernelwright.client.pool import Pool, WorkerLost, lost_verdict
from kernelwright.core.records import Status

CASES = [("relu", "relu_correct"), ("relu", "relu_identity"), ("rowsum", "rowsum_correct"), ("rowsum", "rowsum_compile_error")]


@functools.lru_cache(maxsize=1)
def _statuses_alone() -> list[str]:
    """The in-process judge's statuses of CASES (once per worker: the backends' tests compare with the same)."""
    from kernelwright.client import Judge

    return [Judge(device="cpu").evaluate(problem(p), candidate(c), correctness_policy()).status.value for p, c in CASES]


def _busy(pool: Pool, slot: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while slot not in pool.in_flight:
        assert time.monotonic() < deadline, "the worker never took a request"
        time.sleep(0.05)


def _check_pool(backend: str) -> None:
    """Same statuses as alone; then worker 0 killed while it judges: every request answered once,
    the lost one on another worker, and the slot filled again."""
    want = list(_statuses_alone())
    assert want == ["correct", "incorrect", "correct", "compile_error"]
    with Pool(backend, workers=2, device="cpu") as pool:
        first = [pool.submit(problem(p), candidate(c), correctness_policy()) for p, c in CASES]
        assert [f.result(timeout=300).status.value for f in first] == want
        pids = [i["pid"] for i in pool.info()]
        futures = [pool.submit(problem(p), candidate(c), correctness_policy()) for p, c in CASES]
        _busy(pool, 0)
        pool.kill(0)  # with a request in flight on it: sent, or about to be
        got = [f.result(timeout=300).status.value for f in futures]
        assert got == want  # each request's own verdict, the lost one's too
        assert pool.replaced == 1 and pool.retried == 1 and pool.sent == 2 * len(CASES) + 1  # the first round, the second, one retry
        assert pool.info()[0]["pid"] != pids[0] and pool.info()[1]["pid"] == pids[1]


def test_local_pool_judges_as_the_in_process_judge_and_loses_no_request_when_a_worker_dies():
    _check_pool("local")


def test_ray_pool_judges_as_the_in_process_judge_and_loses_no_request_when_an_actor_dies():
    pytest.importorskip("ray", reason="the ray extra is not installed")
    import ray

    try:
        _check_pool("ray")
    finally:
        ray.shutdown()


class _Lost:
    """A backend whose workers always die: the request is tried 1 + retries times, then infra_error."""

    def __init__(self) -> None:
        self.calls, self.replaced = 0, 0

    def call(self, i, request, timeout=None):
        self.calls += 1
        raise WorkerLost(f"worker {i} died")

    def replace(self, i):
        self.replaced += 1

    def close(self):
        pass

    def shutdown(self):
        pass


def test_a_request_whose_workers_all_die_ends_infra_error_after_one_retry():
    pool = Pool("local", workers=1, device="cpu")
    pool._workers.close()
    pool._workers = fake = _Lost()
    v = pool.evaluate(problem("relu"), candidate("relu_correct"), correctness_policy())
    assert v.status is Status.INFRA_ERROR and "no worker finished the request (2 lost)" in v.log and "worker 0 died" in v.log
    assert fake.calls == 2 and fake.replaced == 2 and pool.retried == 1 and v.problem["name"] == "relu"
    pool.close()


class _BrokenDevice:
    """Two workers alive; the devices of those in `broken` broke, so their verdicts are infra_error
    (or, with `fail`, their judge fails outright); each call takes `slow` seconds."""

    def __init__(self, good: dict, broken=(0,), fail=False, slow=0.0) -> None:
        self.good, self.calls, self.broken, self.fail, self.slow, self.replaced = good, [], set(broken), fail, slow, []

    def replace(self, i):
        self.replaced.append(i)

    def call(self, i, request, timeout=None):
        self.calls.append(i)
        time.sleep(self.slow)
        if i in self.broken and self.fail:
            return {"state": "failed", "error": {"kind": "infra", "message": "RuntimeError: the fork server is gone"}, "verdict": None}
        if i in self.broken:
            return {"state": "done", "verdict": {**self.good, "status": "infra_error", "log": "CUDA error: unspecified launch failure"}}
        return {"state": "done", "verdict": self.good}

    def close(self):
        pass

    def shutdown(self):
        pass


def test_an_infra_error_is_judged_once_more_on_another_worker_and_a_stuck_worker_is_replaced():
    from kernelwright.client import Judge

    good = Judge(device="cpu").evaluate(problem("relu"), candidate("relu_correct"), correctness_policy()).to_dict()
    def two(fake):
        pool = Pool("local", workers=1, device="cpu")
        pool._workers.close()
        pool.size, pool._workers, pool._idle = 2, fake, [0, 1]
        pool._run = ThreadPoolExecutor(max_workers=4)  # as a pool of two has it
        return pool

    pool = two(_BrokenDevice(good))
    try:
        v = pool.evaluate(problem("relu"), candidate("relu_correct"), correctness_policy())
        assert v.status is Status.CORRECT and pool.retried == 1 and pool._workers.calls == [0, 1]  # both idle since the start: 0 first
        assert "judged again after: worker 0 answered infra_error: CUDA error" in v.log
        assert pool._workers.replaced == [] and pool.replaced == 0  # one failure: the worker stays
        v = pool.evaluate(problem("relu"), candidate("relu_correct"), correctness_policy())
        assert v.status is Status.CORRECT and pool._workers.calls == [0, 1, 0, 1]
        deadline = time.monotonic() + 30
        while pool.replaced < 1:  # its second failure in a row that the other worker then judged: started again, in the background
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert pool._workers.replaced == [0]
    finally:
        pool.close()
    # both devices broken, two requests at once, each avoiding the worker it failed on: both end, and so does close
    pool = two(_BrokenDevice(good, broken=(0, 1), slow=0.2))
    futures = [pool.submit(problem("relu"), candidate("relu_correct"), correctness_policy()) for _ in range(2)]
    got = [f.result(timeout=30) for f in futures]
    assert [v.status for v in got] == [Status.INFRA_ERROR] * 2 and pool.retried == 2 and sorted(pool._workers.calls) == [0, 0, 1, 1]
    assert pool._workers.replaced == [] and pool.replaced == 0  # requests that fail everywhere strike no worker
    assert all("judged again after: worker" in v.log for v in got)
    closer = threading.Thread(target=pool.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive()
    pool = two(_BrokenDevice(good, fail=True))  # a worker whose judge fails outright: its job judged again on the other
    try:
        v = pool.evaluate(problem("relu"), candidate("relu_correct"), correctness_policy())
        assert v.status is Status.CORRECT and "worker 0's judge failed (failed): RuntimeError: the fork server is gone" in v.log
    finally:
        pool.close()
    with Pool("local", workers=1, device="cpu", deadline_s=0.2) as stuck:  # no verdict comes in 0.2 s: stuck, twice
        first = stuck.info()[0]["pid"]
        v = stuck.evaluate(problem("relu"), candidate("relu_correct"), correctness_policy())
        assert v.status is Status.INFRA_ERROR and "said nothing in 0 s" in v.log and stuck.replaced == 2 and stuck.retried == 1
        assert stuck.info()[0]["pid"] != first


class _Scripted:
    """Stand-in workers whose answers `answer(slot, call number)` gives; `closed` is set by close."""

    def __init__(self, answer) -> None:
        self.answer, self.calls, self.closed, self.lock = answer, [], threading.Event(), threading.Lock()

    def replace(self, i):
        pass

    def call(self, i, request, timeout=None):
        with self.lock:
            self.calls.append(i)
            n = len(self.calls)
        return self.answer(i, n, request)

    def close(self):
        self.closed.set()

    def shutdown(self):
        pass


def _stand_in(answer, size=2) -> Pool:
    pool = Pool("local", workers=1, device="cpu")
    pool._workers.close()
    pool.size, pool._workers, pool._idle = size, _Scripted(answer), list(range(size))
    pool._run = ThreadPoolExecutor(max_workers=2 * size)  # as the pool has it
    return pool


def test_a_retry_gets_the_next_free_worker_first_and_the_worker_it_avoids_keeps_working(tmp_path):
    """Worker 1 fails its first request; worker 0 is slow. The retry waits for worker 0, ahead of
    the requests queued behind it, and worker 1 takes queued requests meanwhile."""
    from kernelwright.client import Judge

    good = Judge(device="cpu").evaluate(problem("relu"), candidate("relu_correct"), correctness_policy()).to_dict()
    starts: list[tuple[int, float, int]] = []  # (worker, seconds since the start, the request's id)
    t0 = time.monotonic()

    def answer(slot, n, request):
        starts.append((slot, time.monotonic() - t0, id(request)))
        time.sleep(0.6 if slot == 0 else 0.05)
        if slot == 1 and sum(1 for x in starts if x[0] == 1) == 1:
            return {"state": "done", "verdict": {**good, "status": "infra_error", "log": "device lost"}}
        return {"state": "done", "verdict": good}

    pool = _stand_in(answer)
    try:
        futures = [pool.submit(problem("relu"), candidate("relu_correct"), correctness_policy()) for _ in range(24)]
        assert all(f.result(timeout=60).status is Status.CORRECT for f in futures)
    finally:
        pool.close()
    retried = [k for k, f in enumerate(futures) if "judged again after: worker 1 answered infra_error" in f.result().log]
    assert len(retried) == 1 and pool.retried == 1
    on_0 = [x for x in starts if x[0] == 0]
    on_1 = [x for x in starts if x[0] == 1]
    assert on_0[1][2] == on_1[0][2], starts  # worker 0's next request was the retry, not one queued behind it
    assert sum(1 for x in on_1 if x[1] < on_0[0][1] + 0.5) >= 5, starts  # worker 1 busy while worker 0 judged


def test_closing_ends_a_request_waiting_for_a_worker_and_one_in_flight():
    """Worker 0 holds its request until the pool closes; worker 1's judge fails, so its request
    waits for worker 0: close settles every future and returns."""
    from kernelwright.client.pool import WorkerLost as Lost

    def answer(slot, n, request):
        if slot == 0:
            pool._workers.closed.wait(60)
            raise Lost("worker 0 killed at close")
        return {"state": "failed", "error": {"kind": "infra", "message": "the fork server is gone"}, "verdict": None}

    pool = _stand_in(answer)
    futures = [pool.submit(problem("relu"), candidate("relu_correct"), correctness_policy()) for _ in range(3)]
    deadline = time.monotonic() + 30
    while not any(avoid == 1 for _, avoid in pool._waiting):  # the failed one waits for worker 0
        assert time.monotonic() < deadline
        time.sleep(0.02)
    t0 = time.monotonic()
    closer = threading.Thread(target=pool.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive() and time.monotonic() - t0 < 10
    settled = [f for f in futures if f.done()]
    assert len(settled) == 3
    assert all(f.cancelled() or (f.result().status is Status.INFRA_ERROR and "the pool was closed" in f.result().log) for f in futures)


class _SlowRestart(_Scripted):
    """Stand-ins whose restart waits for `go` (or the pool's close), noting the order of events."""

    def __init__(self, answer) -> None:
        super().__init__(answer)
        self.go, self.events = threading.Event(), []

    def replace(self, i):
        self.events.append(("replace", i))
        while not (self.go.is_set() or self.closed.is_set()):
            time.sleep(0.01)
        self.events.append(("replaced", i))
        if self.closed.is_set():
            raise WorkerLost("the pool is closed")

    def shutdown(self):
        self.events.append(("shutdown", None))


def test_strikes_while_a_restart_is_pending_start_no_second_one_and_close_waits_for_it():
    good = {"state": "done", "verdict": None}
    pool = _stand_in(lambda slot, n, request: good)
    fake = _SlowRestart(pool._workers.answer)
    pool._workers = fake
    for _ in range(2):
        pool._strike([(0, 0)], 1)  # worker 0 failed two requests that worker 1 then judged
    deadline = time.monotonic() + 10
    while ("replace", 0) not in fake.events:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    for _ in range(3):
        pool._strike([(0, 0)], 1)  # more strikes of the same generation while the restart is under way
    assert pool._restarting == {0} and len([t for t in pool._restarts if t.is_alive()]) == 1
    with pool._cv:
        assert 0 not in pool._idle  # the restart holds the worker
    closer = threading.Thread(target=pool.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive()
    assert fake.events == [("replace", 0), ("replaced", 0), ("shutdown", None)]  # the restart ended before the shutdown
    assert pool.replaced == 0 and pool._restarting == set()


def test_a_strike_counts_only_against_the_generation_that_failed():
    pool = _stand_in(lambda slot, n, request: None)
    try:
        pool._strike([(0, 0)], 1)
        with pool._lock:
            pool._gen[0] = 1  # worker 0 judged a request since (or was started again)
        pool._strike([(0, 0)], 1)  # a failure from before that: not in a row
        pool._strike([(1, 0), (1, 0)], 1)  # the worker that judged it, and a repeat: no strike
        assert pool._fails.get(0) == 1 and not pool._fails.get(1) and pool._restarting == set()
    finally:
        pool.close()


def test_the_pool_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="backend must be one of local, ray"):
        Pool("slurm")
    with pytest.raises(ValueError, match="needs backend='ray'"):
        Pool("local", address="ray://head:10001")
    with pytest.raises(ValueError, match="workers must be at least 1"):
        Pool("local", workers=0)
    with pytest.raises(ValueError, match="deadline_s positive"):
        Pool("local", deadline_s=0)
    with Pool("local", workers=1, device="cpu") as pool:
        with pytest.raises(ValueError, match="model_new.py"):
            pool.submit(problem("relu"), problem("relu").parent)  # a folder without model_new.py: refused before any worker
        with pytest.raises(ValueError, match="sees its one GPU as index 0"):
            pool.submit(problem("relu"), candidate("relu_correct"), correctness_policy(gpu_index=1))
        with pytest.raises(ValueError, match="cached baselines"):
            pool.submit(problem("relu"), candidate("relu_correct"), correctness_policy(baselines="cached"))
        assert pool.sent == 0


def test_lost_verdict_is_a_whole_verdict():
    from kernelwright.judge.policy import Policy
    from kernelwright.problems.loader import load_problem

    v = lost_verdict(load_problem(problem("relu")), Policy(), "why")
    d = v.to_dict()
    assert d["status"] == "infra_error" and d["log"] == "why" and d["problem"]["name"] == "relu" and d["policy"]["precision"] == "fp32"


_PLAIN: dict = {}


def _plain_bench(policy) -> dict:
    """examples/cpu benched in this process, once per worker (each backend's test compares with it)."""
    from kernelwright.report.bench import BenchConfig, run_bench

    if "doc" not in _PLAIN:
        _PLAIN["doc"] = run_bench(BenchConfig(suite="examples/cpu", sources=(), device="cpu", keep=False), policy)
    return _PLAIN["doc"]


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_bench_through_the_pool_gives_the_statuses_of_one_without_and_only_this_process_writes_the_store(tmp_path, monkeypatch, backend):
    """A worker (a local process, or a Ray actor standing in for a GPU's) is killed mid-bench; the
    pool judged every candidate (the in-process path raises here), every row has its verdict
    stored once, by this process."""
    import sqlite3

    if backend == "ray":
        pytest.importorskip("ray", reason="the ray extra is not installed")

    from kernelwright.report import bench
    from kernelwright.report.bench import BenchConfig, run_bench

    policy = correctness_policy()
    plain = _plain_bench(policy)
    store = tmp_path / "store.sqlite"

    def not_here(*a, **k):
        raise AssertionError("judged in the driver's process, not by the pool")

    monkeypatch.setattr(bench, "judge_solution", not_here)
    with Pool(backend, workers=2, device="cpu") as pool:
        threading.Thread(target=lambda: (_busy(pool, 1), pool.kill(1)), daemon=True).start()
        pooled = run_bench(BenchConfig(suite="examples/cpu", sources=(), device="cpu", store=store, out=tmp_path / "b.json", pool=pool), policy)
        assert pool.replaced == 1 and pool.sent == len(pooled["problems"]) + 1
    assert [(r["name"], r["status"]) for r in pooled["problems"]] == [(r["name"], r["status"]) for r in plain["problems"]]
    assert {r["status"] for r in pooled["problems"]} == {"correct"} and pooled["complete"]
    ids = [r["verdict_id"] for r in pooled["problems"]]
    assert all(ids) and len(set(ids)) == len(ids)
    db = sqlite3.connect(store)
    try:  # one verdict stored per row, none twice
        assert db.execute("select count(*) from verdicts").fetchone()[0] == len(ids)
    finally:
        db.close()


def test_closing_with_requests_in_flight_ends_them_lost_at_once_and_leaves_no_worker(tmp_path):
    """Close while both workers judge and more wait: the waiting ones are cancelled, the ones in
    flight end infra_error (not retried, no worker started again), and no worker process is left."""
    import os

    with Pool("local", workers=2, device="cpu") as pool:
        pids = [i["pid"] for i in pool.info()]
        futures = [pool.submit(problem(p), candidate(c), correctness_policy()) for p, c in CASES * 2]
        _busy(pool, 0)
        _busy(pool, 1)
        t0 = time.monotonic()
        pool.close()
        closed_in = time.monotonic() - t0
    ended = [f for f in futures if not f.cancelled()]
    assert any(f.cancelled() for f in futures) and pool.replaced == 0 and pool.retried == 0
    assert all(f.result().status is Status.INFRA_ERROR and "the pool was closed" in f.result().log for f in ended if f.result().status is not Status.CORRECT)
    assert closed_in < 30, closed_in  # one shared wait, then the busy ones killed
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_pooled_bench_resumes_from_its_file_and_sends_only_what_is_left(tmp_path):
    """A bench cut short (its file marked incomplete, two rows done) resumes through a pool: the
    finished rows are taken back, only the rest is sent to the workers."""
    import json

    from kernelwright.report.bench import BenchConfig, run_bench

    policy, out = correctness_policy(), tmp_path / "b.json"
    first = run_bench(BenchConfig(suite="examples/cpu", sources=(), device="cpu", keep=False, out=out), policy)
    doc = json.loads(out.read_text())
    doc["problems"][2:] = []  # as a driver that died after two problems would have left it
    doc["complete"], doc["pending"] = False, [r["name"] for r in first["problems"][2:]]
    out.write_text(json.dumps(doc))
    with Pool("local", workers=2, device="cpu") as pool:
        again = run_bench(BenchConfig(suite="examples/cpu", sources=(), device="cpu", keep=False, out=out, resume=True, pool=pool), policy)
        assert pool.sent == len(first["problems"]) - 2
    assert [r["name"] for r in again["problems"]] == [r["name"] for r in first["problems"]] and again["complete"]
    assert [r["verdict"]["created_at"] for r in again["problems"][:2]] == [r["verdict"]["created_at"] for r in first["problems"][:2]]
    assert {r["status"] for r in again["problems"]} == {"correct"}
