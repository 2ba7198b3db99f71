"""The judge's pool (client.pool) under the commands that take `--ray` / `--pool`: optimize's tree
branches judged at once, a rollout's episodes, `kernelwright serve`, and a bench that records
each verdict as it comes back. Local worker processes on the CPU stand in for GPUs; the Ray
backend itself is tested in test_pool.py."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from conftest import CANDIDATES, JUDGE_TIMEOUT_S, candidate, cli, correctness_policy, problem, timing_policy
from kernelwright.agent import demo_script, optimize
from kernelwright.agent.objective import Objective
from kernelwright.client.pool import Pool
from kernelwright.llm.scripted import ScriptedServer
from kernelwright.store import Store

pytestmark = pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)

ROOT = Path(__file__).resolve().parents[1]
FAST = dict(compile_baseline=False, seeds=1, timing_budget_s=1.0)  # no torch.compile on the 2-core box


def _peak(pool: Pool) -> list[int]:
    """Wrap the pool's workers so that the most requests in flight at once is counted in [0]."""
    peak, now, lock, call = [0], [0], threading.Lock(), pool._workers.call

    def counted(slot, request, timeout=None):
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        try:
            return call(slot, request, timeout)
        finally:
            with lock:
                now[0] -= 1

    pool._workers.call = counted
    return peak


def test_a_tree_search_judges_its_branches_at_once_on_the_pool_with_baselines_beside_each(tmp_path):
    c = demo_script.candidates("cpu")
    block = lambda code: f"```python\n{code}\n```"  # noqa: E731
    script = [{"when": "Propose", "text": "1. hold the row in cache and fuse the passes"},
              {"when": "Implement this idea", "text": block(c["wrong"])}, {"when": "Implement this idea", "text": block(c["good"])}]
    script += [{"when": "Fix the problem", "text": block(c["good"])}] * 2
    with Pool("local", workers=2, device="cpu") as pool, ScriptedServer(script) as server:
        peak = _peak(pool)
        req = optimize.RunRequest(problem_spec=str(ROOT / "examples" / "cpu" / "softmax" / "problem.py"), model="openai:scripted",
                                  base_url=server.url, device="cpu", pool=pool, timeout_s=30, out_dir=tmp_path / "out", store=tmp_path / "s.sqlite",
                                  objective=Objective(**FAST, strategy="tree", rounds=1, ideas=1, branches=2, parallel_builds=2))
        result = optimize.start(req)
        sent = pool.sent
        assert not pool._closing.is_set()  # a pool passed in is its owner's to close
    assert result.final is not None and result.final["status"] == "correct", result.summary
    assert peak[0] == 2  # the two branches' verdicts were judged at the same time, one per worker
    with Store.open(tmp_path / "s.sqlite") as db:
        steps = db.run_steps(result.run_id)
    judged = [s["payload"]["verdict"] for s in steps if isinstance(s.get("payload"), dict) and isinstance(s["payload"].get("verdict"), dict)]
    assert {v["status"] for v in judged} >= {"incorrect", "correct"} and sent >= 3  # two branches and the final, each sent to the pool
    timed = [v for v in judged if v.get("runtime_ms") is not None]
    assert timed and all(v["policy"]["baselines"] == "measured" and v.get("eager_ms") for v in timed), [v["policy"]["baselines"] for v in timed]
    assert result.final["policy"]["baselines"] == "measured" and result.final.get("eager_ms")


def test_a_rollout_on_the_pool_records_every_episode_once_and_pays_the_judged_one(tmp_path):
    from kernelwright.llm.backend import make_backend
    from kernelwright.rl.env import EnvConfig
    from kernelwright.rl.rollout import EPISODES, run_rollout
    from kernelwright.rl.tasks import load_tasks

    folder = tmp_path / "problems"
    folder.mkdir()
    for n in ("relu", "rowsum"):
        (folder / f"{n}.py").write_text(problem(n).read_text())
    good = (CANDIDATES / "relu_correct" / "model_new.py").read_text()
    script = [{"when": "`relu`", "text": f"```python\n{good}\n```"}] * 2 + [{"text": "I have no kernel yet."}] * 2
    with Pool("local", workers=2, device="cpu") as pool, ScriptedServer(script) as server:
        peak = _peak(pool)
        config = EnvConfig(device="cpu", objective=Objective(**FAST, max_turns=1), tools=False, reply_submits=True,
                           store=tmp_path / "s.sqlite", workroot=tmp_path / "eps", pool=pool)
        backend = make_backend("openai:scripted", base_url=server.url, max_retries=0)
        result = run_rollout(load_tasks(folder, heldout=0.0), backend, config, episodes=4, concurrency=4, out=tmp_path / "out")
        sent = pool.sent
    rows = [json.loads(x) for x in (tmp_path / "out" / EPISODES).read_text().splitlines()]
    assert sorted(r["seq"] for r in rows) == [0, 1, 2, 3] and result["recorded"] == 4
    judged = [r for r in rows if r["final"]["verdict"]]
    assert len(judged) == 2 and {r["task"]["id"] for r in judged} == {"relu"}
    assert sent == 2 and peak[0] == 2  # each judged episode's final went to the pool, the two at the same time
    for r in judged:
        assert r["final"]["verdict"]["status"] == "correct" and r["reward"]["milestone"] >= 1
    assert all(r["reward"]["value"] == -1.0 for r in rows if not r["final"]["verdict"])


def test_serve_on_a_pool_answers_as_the_judge_in_process_and_says_so_in_its_health():
    from kernelwright.client.judge import _answer, request_for
    from kernelwright.client.service import JudgeService
    from kernelwright.problems.loader import load_problem

    with Pool("local", workers=1, device="cpu") as pool:
        service = JudgeService(pool=pool)
        try:
            jobs = [service.submit(request_for(load_problem(problem(p)), candidate(c), correctness_policy(), "cpu"))
                    for p, c in (("relu", "relu_correct"), ("relu", "relu_identity"))]
            for j in jobs:
                assert j.finished.wait(JUDGE_TIMEOUT_S)
            assert [_answer(j.to_dict()).status.value for j in jobs] == ["correct", "incorrect"]
            assert service.counts()["pool"] == {"size": 1, "device": "cpu", "replaced": 0, "retried": 0}
            assert service.counts()["workers"] == 1 and pool.sent == 2
            bad = service.submit(request_for(load_problem(problem("relu")), candidate("relu_correct"), correctness_policy(gpu_index=1), "cpu"))
            assert bad.finished.wait(30) and bad.state == "failed" and bad.error["kind"] == "usage" and pool.sent == 2
            # what an agent's judge asks for by default (cached baselines): measured beside the candidate by the worker
            cached = service.submit(request_for(load_problem(problem("relu")), candidate("relu_correct"),
                                                timing_policy(baselines="cached"), "cpu"))
            assert cached.finished.wait(JUDGE_TIMEOUT_S) and cached.state == "done", cached.error
            assert cached.verdict["policy"]["baselines"] == "measured" and cached.verdict.get("eager_ms")
            assert any("measured beside the candidate" in m for _, m in cached.progress_log)
        finally:
            service.close()


def test_serve_refuses_workers_beside_a_pool():
    res = cli("serve", "--workers", "2", "--pool", "1")
    assert res.returncode == 2 and "--workers" in res.stderr and "pool" in res.stderr


def test_a_pooled_bench_records_each_verdict_as_it_comes_back(tmp_path):
    """One candidate's verdict held back: the others are in the bench's file and the store before
    it comes, so a driver that died then would lose only that one."""
    from kernelwright.report.bench import BenchConfig, run_bench

    out, store, release = tmp_path / "b.json", tmp_path / "s.sqlite", threading.Event()
    with Pool("local", workers=2, device="cpu") as pool:
        call = pool._workers.call

        def held(slot, request, timeout=None):
            got = call(slot, request, timeout)
            if request["problem"]["name"] == "softmax":
                release.wait(JUDGE_TIMEOUT_S)
            return got

        pool._workers.call = held
        done: dict = {}
        t = threading.Thread(target=lambda: done.update(doc=run_bench(BenchConfig(suite="examples/cpu", sources=(), device="cpu", store=store,
                                                                                   out=out, pool=pool), correctness_policy())))
        t.start()
        deadline = time.monotonic() + 3 * JUDGE_TIMEOUT_S
        while True:
            doc = json.loads(out.read_text()) if out.is_file() else {"problems": [], "pending": ["?"]}
            if doc["pending"] == ["softmax"]:
                break
            assert time.monotonic() < deadline and t.is_alive(), doc.get("pending")
            time.sleep(0.2)
        names = [r["name"] for r in doc["problems"]]
        assert "softmax" not in names and len(names) >= 3 and all(r["verdict_id"] for r in doc["problems"])
        assert not doc["complete"]
        release.set()
        t.join(3 * JUDGE_TIMEOUT_S)
    final = done["doc"]
    assert final["complete"] and {r["status"] for r in final["problems"]} == {"correct"}
    from kernelwright.problems.suite import load_suite

    assert [r["name"] for r in final["problems"]] == [e.problem.name for e in load_suite("examples/cpu")]  # suite order
    with Store.open(store) as db:
        assert len({r["verdict_id"] for r in final["problems"]}) == len(final["problems"])
        assert all(db.get_verdict(r["verdict_id"]) for r in final["problems"])


class _FakePool:
    device, size = "cuda", 2

    def __init__(self, gpus):
        self._gpus, self.closed = gpus, False

    def gpus(self):
        return self._gpus

    def close(self):
        self.closed = True


def test_optimize_starts_its_pool_only_once_the_request_checks_out_and_refuses_mixed_gpus(tmp_path):
    made = []

    def factory(gpus=("NVIDIA H100 80GB HBM3", "NVIDIA H200")):
        made.append(_FakePool(sorted(gpus)))
        return made[-1]

    def request(spec, **kw):
        return optimize.RunRequest(problem_spec=spec, model="replay:" + str(ROOT / "examples" / "recordings" / "cpu_softmax.json"), device="cpu",
                                   objective=Objective(**FAST), store=tmp_path / "s.sqlite", pool=factory, **kw)

    softmax = str(ROOT / "examples" / "cpu" / "softmax" / "problem.py")
    with pytest.raises(ValueError):
        optimize.start(request(str(tmp_path / "no_such_problem.py")))
    bad_model = dataclasses.replace(request(softmax), model="openai:none", base_url="http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(ValueError):
        optimize.start(bad_model)
    assert made == []  # a bad problem, an unreachable model: no worker started
    with pytest.raises(ValueError, match="different GPUs"):
        optimize.start(request(softmax))
    assert len(made) == 1 and made[0].closed  # the pool start made, closed again
    with Store.open(tmp_path / "s.sqlite") as db:
        assert db.list_runs() == []  # refused before a run was made


def test_serve_and_bench_refuse_bad_input_before_a_pool_starts(tmp_path, monkeypatch, capsys):
    """A port already taken (`serve`) and a --resume file judged under another policy (`bench`) are
    usage errors before any worker starts; the same commands with good input do start one."""
    import socket

    from kernelwright.cli import main
    from kernelwright.client import pool as pool_module
    from kernelwright.report.bench import KIND, SCHEMA_VERSION

    started = []

    class NoPool:
        check = staticmethod(Pool.check)

        def __init__(self, *a, **k):
            started.append(a)
            raise RuntimeError("a pool was asked for")

    monkeypatch.setattr(pool_module, "Pool", NoPool)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(SystemExit) as done:
            main(["serve", "--pool", "1", "--port", str(taken.getsockname()[1]), "--token-file", str(tmp_path / "token")])
    finally:
        taken.close()
    assert done.value.code == 2 and "in use" in capsys.readouterr().err and started == []
    old = tmp_path / "bench.json"
    old.write_text(json.dumps({"kind": KIND, "schema_version": SCHEMA_VERSION, "policy": {"precision": "other"}, "device": "cpu", "problems": []}))
    bench = ["bench", "--suite", "examples/cpu", "--device", "cpu", "--pool", "1", "-o", str(old)]
    with pytest.raises(SystemExit) as done:
        main([*bench, "--resume"])
    assert done.value.code == 2 and "another policy" in capsys.readouterr().err and started == []
    with pytest.raises(SystemExit) as done:  # without --resume the file is no obstacle: the pool is asked for
        main(bench)
    assert done.value.code == 2 and "did not start" in capsys.readouterr().err and len(started) == 1
    sock = tmp_path / "serve" / "judge.sock"
    with pytest.raises(SystemExit) as done:  # bound, then the pool fails: the socket this serve bound goes with it
        main(["serve", "--pool", "1", "--socket", str(sock)])
    assert done.value.code == 2 and "did not start" in capsys.readouterr().err and len(started) == 2
    assert sock.parent.is_dir() and not sock.exists()
