"""The synthesis workers' channel: task code shares its worker's process and can write anything to
the descriptors it holds, so what comes back is read as JSON and held to its form, never unpickled.
A reply the parent refuses rejects that one candidate and replaces its worker."""

from __future__ import annotations

import pickle
import struct

import pytest

pytest.importorskip("torch")

from kernelwright.synth.cost import load_calibration  # noqa: E402
from kernelwright.synth.pool import Pool  # noqa: E402

pytestmark = pytest.mark.timeout(120)

HONEST = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) + 1.0


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

WIDE = [1e-9, 1e9]


def _ctx() -> dict:
    return {"device": "cpu", "calibration": load_calibration(), "against": {}, "threshold": 0.9, "atol": 1e-4, "rtol": 1e-4,
            "backend": "aot_eager"}


class _Payload:
    """Unpickling it creates a file: whoever unpickles it runs code of the task's choosing."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _job(index: int, source: str) -> dict:
    task = {"id": f"g{index}", "index": index, "name": f"g{index}", "ops": ["relu"], "n_ops": 1, "level": 1, "seed": 0, "device": "cpu"}
    return {"index": index, "seed": 0, "window": WIDE, "phase": "all", "source": source, "task": task}


def _run_one(source: str, timeout_s: float = 60) -> tuple[dict, dict]:
    pool = Pool(1, _ctx(), timeout_s=timeout_s)
    try:
        (result,) = list(pool.run(iter([_job(0, source)])))
        (after,) = list(pool.run(iter([_job(1, HONEST)])))  # the worker, replaced, examines an honest task
    finally:
        pool.close()
    return result, after


def test_a_pickle_written_by_task_code_never_runs_in_the_parent(tmp_path):
    marker = tmp_path / "ran-in-the-parent"
    frame = pickle.dumps(_Payload(str(marker)), protocol=2)
    frame = struct.pack("!i", len(frame)) + frame  # multiprocessing.Connection's framing
    attack = f"""import os
FRAME = {frame!r}
for _name in os.listdir("/proc/self/fd"):
    try:
        os.write(int(_name), FRAME)  # every descriptor it holds: the reply channel among them
    except OSError:
        pass
""" + HONEST
    result, after = _run_one(attack)
    assert not marker.exists(), "the task's pickle ran in the parent"
    assert isinstance(result, dict) and result["status"] == "rejected" and result["index"] == 0, result
    assert result["stage"] == "crash" and "refused" in result["reason"], result
    assert after["status"] == "accepted" and after["index"] == 1, after


# Task code that finds its worker's own channel writer (the key is in its memory) and sends an
# authenticated reply of its own: well-signed, but not of the form a result has.
FORGER = """import gc
for _o in gc.get_objects():
    if type(_o).__name__ == "Writer" and hasattr(_o, "send"):
        _o.send({"ok": True, "result": {"index": 0, "phase": "all", "status": "accepted", "stage": None, "reason": "",
                                        "retry": False, "seconds": {}, "task": {"id": 7, "source": None}}})
        break
""" + HONEST


def test_a_forged_reply_of_the_wrong_form_rejects_that_candidate_only():
    result, after = _run_one(FORGER)
    assert result["status"] == "rejected" and result["stage"] == "crash" and "refused" in result["reason"], result
    assert after["status"] == "accepted", after


# Task code that replaces the filters in its worker's process: every later job that worker examined
# came back accepted, a task that fails at its first call among them (well-formed, and signed by the
# worker's own writer, so the parent's checks of form could not tell).
POISONER = """import kernelwright.synth.filters as _filters
_real = _filters.examine


def _accept_all(job, ctx):
    honest = dict(job, source=job["source"].split("# BROKEN")[0])
    result = _real(honest, ctx)
    if result.get("task"):
        result["task"]["source"] = job["source"]
    return result


_filters.examine = _accept_all
""" + HONEST
BROKEN = HONEST + """
# BROKEN
def get_inputs():
    raise RuntimeError("this task has no inputs")
"""


@pytest.mark.parametrize("fresh", [True, False])
def test_task_code_cannot_change_how_later_jobs_are_examined_in_a_fresh_worker(fresh):
    pool = Pool(1, _ctx(), timeout_s=60, fresh=fresh)
    try:
        results = sorted(pool.run(iter([_job(0, POISONER), _job(1, BROKEN)])), key=lambda r: r["index"])
    finally:
        pool.close()
    assert results[0]["status"] == "accepted", results[0]
    if fresh:
        assert results[1]["status"] == "rejected" and "no inputs" in results[1]["reason"], results[1]
    else:  # the attack is real: a shared worker accepts the broken task (why the rule composer alone shares them)
        assert results[1]["status"] == "accepted", results[1]


def test_a_result_whose_task_is_not_the_examined_source_is_refused():
    swap = HONEST + """
import kernelwright.synth.filters as _filters
_real = _filters.examine


def _swap(job, ctx):
    result = _real(job, ctx)
    result["task"]["source"] = "import torch  # never examined"
    return result


_filters.examine = _swap
"""
    pool = Pool(1, _ctx(), timeout_s=60, fresh=False)
    try:
        results = sorted(pool.run(iter([_job(0, swap), _job(1, HONEST)])), key=lambda r: r["index"])
    finally:
        pool.close()
    assert results[0]["status"] == "accepted", results[0]  # the swap is installed after this job's result
    assert results[1]["stage"] == "crash" and "source is not the job's" in results[1]["reason"], results[1]


def test_close_leaves_nothing_of_a_worker_running():
    """A daemon the task code starts in a session of its own goes with the pool."""
    daemon = """import subprocess
_p = subprocess.Popen(["sleep", "60"], start_new_session=True)
raise RuntimeError(f"daemon {_p.pid} started")
""" + HONEST
    result, _ = _run_one(daemon)
    assert result["stage"] == "shape" and "daemon" in result["reason"], result
    pid = int(result["reason"].split("daemon ")[1].split()[0])
    assert not _running(pid), f"the task's daemon {pid} outlived the pool"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_only_a_hosted_child_names_a_command_module_and_only_a_kernelwright_one(tmp_path):
    from kernelwright.judge.workers import ChildConfig

    base = dict(device="cpu", gpu_index=0, workdir=tmp_path, env={})
    ChildConfig(role="hosted", commands="kernelwright.synth.worker", **base)
    for role, commands in (("hosted", ""), ("hosted", "os"), ("candidate", "kernelwright.synth.worker")):
        with pytest.raises(ValueError, match="kernelwright module"):
            ChildConfig(role=role, commands=commands, **base)


def test_workers_are_fresh_per_job_unless_the_code_is_the_rule_composers(tmp_path, monkeypatch):
    from kernelwright.synth import pipeline, pool
    from kernelwright.synth.pipeline import SynthConfig

    assert SynthConfig(n=1, out=tmp_path).own_code
    assert not SynthConfig(n=1, out=tmp_path, composer="openai:some-model").own_code
    assert not SynthConfig(n=1, out=tmp_path, source=tmp_path / "tasks.jsonl").own_code
    seen = []

    class Spy(pool.Pool):
        def __init__(self, *args, **kw):
            seen.append(kw["fresh"])
            super().__init__(*args, **kw)

    class Composer:  # a model's composer handed in through the API, the config left at "rules"
        def job(self, seed, i, weights):
            return {"source": HONEST, "task": {"id": f"m{i}", "index": i, "name": f"m{i}", "ops": ["relu"], "n_ops": 1, "level": 1,
                                                "seed": seed, "device": "cpu"}}

    monkeypatch.setattr(pool, "Pool", Spy)
    pipeline.run_synth(SynthConfig(n=1, out=tmp_path / "rules", max_candidates=1, against=()))
    pipeline.run_synth(SynthConfig(n=1, out=tmp_path / "model", max_candidates=1, against=()), composer=Composer())
    assert seen[0] is False and seen[-1] is True, seen


def _run_with_starts(monkeypatch, n_jobs: int, fails) -> list[dict]:
    """n_jobs honest jobs in a fresh pool whose k-th start after the first (k from 1) raises where fails(k)."""
    pool = Pool(1, _ctx(), timeout_s=60, fresh=True)
    real, calls = pool._start, []

    def flaky():
        calls.append(1)
        if fails(len(calls)):
            raise RuntimeError(f"start {len(calls)}: the fork server is gone")
        return real()

    monkeypatch.setattr(pool, "_start", flaky)
    try:
        return sorted(pool.run(iter([_job(i, HONEST) for i in range(n_jobs)])), key=lambda r: r["index"])
    finally:
        pool.close()


def test_a_worker_that_does_not_start_mid_run_rejects_its_job_alone(monkeypatch):
    results = _run_with_starts(monkeypatch, 3, lambda k: k == 1)
    assert [r["status"] for r in results] == ["accepted", "rejected", "accepted"], results
    assert results[1]["stage"] == "error" and "fork server is gone" in results[1]["reason"], results[1]


def test_workers_that_never_start_mid_run_end_it(monkeypatch):
    pool = Pool(1, _ctx(), timeout_s=60, fresh=True)

    def broken():
        raise RuntimeError("no fork server")

    monkeypatch.setattr(pool, "_start", broken)
    got = []
    try:
        with pytest.raises(RuntimeError, match="3 synthesis workers in a row did not start"):
            for r in pool.run(iter([_job(i, HONEST) for i in range(6)])):
                got.append(r)
    finally:
        pool.close()
    assert [r["status"] for r in got] == ["accepted", "rejected", "rejected"], got


def test_start_failures_that_are_not_in_a_row_never_end_the_run(monkeypatch):
    results = _run_with_starts(monkeypatch, 7, lambda k: k % 2 == 1)
    # job 0 on the first worker; then a failure before each other start (two failures never follow each other)
    assert [r["status"] for r in results] == ["accepted", "rejected", "accepted", "rejected", "accepted", "rejected", "accepted"], results


def test_a_jobs_time_limit_does_not_count_its_workers_start(monkeypatch):
    """In fresh mode each job waits for a new worker: a slow start is not the job's timeout."""
    import time

    pool = Pool(1, _ctx(), timeout_s=8, fresh=True)  # a job takes 1.3 s here, its worker's start included
    real = pool._ready

    def slow(child):
        time.sleep(9)
        return real(child)

    monkeypatch.setattr(pool, "_ready", slow)
    try:
        results = sorted(pool.run(iter([_job(i, HONEST) for i in range(2)])), key=lambda r: r["index"])
    finally:
        pool.close()
    assert [r["status"] for r in results] == ["accepted", "accepted"], results
