"""The fork server (judge.forkserver, judge.forkpool): children forked in milliseconds, each a fresh
process of its own session, nothing carried from one candidate to the next, faults survived."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from conftest import JUDGE_TIMEOUT_S, correctness_policy, judge
from kernelwright.judge import forkpool, forkserver
from kernelwright.judge.workers import Child, ChildConfig, child_env

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...


def _config(tmp_path: Path, **env: str) -> ChildConfig:
    return ChildConfig(role="reference", device="cpu", gpu_index=0, workdir=tmp_path, env=env)


PROBE = """
import os, sys, torch
open(os.environ["KW_TEST_OUT"], "w").write(repr((os.environ.get("KW_TEST_MARKER"), os.getcwd(), "" in sys.path or os.getcwd() in sys.path)))
class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
"""


def test_children_are_forked_fresh_in_their_own_session(tmp_path):
    srv = forkpool.server()
    assert srv is not None
    srv.wait_ready()
    (tmp_path / "probe.py").write_text(PROBE)
    dirs = [tmp_path / "one", tmp_path / "two"]
    for d in dirs:
        d.mkdir()
    children = [Child(ChildConfig(role="reference", device="cpu", gpu_index=0, workdir=d, env={"KW_TEST_MARKER": d.name, "KW_TEST_OUT": str(d / "seen")}))
                for d in dirs]
    try:
        pids = [c._proc.pid for c in children]
        assert all(isinstance(c._proc, forkpool.Forked) for c in children) and len({*pids, srv.pid}) == 3
        for child, d in zip(children, dirs):
            pid = child._proc.pid
            state, ppid, pgrp, session = _stat(pid)[:4]
            assert int(ppid) == srv.pid  # forked by the server, not spawned by us
            assert int(pgrp) == pid and int(session) == pid  # a session of its own: kill() takes its whole group
            meta = child.call("setup", {"problem_path": str(tmp_path / "probe.py"), "device": "cpu", "precision": "fp32", "init_seed": 1,
                                        "atol": 1e-4, "rtol": 1e-4, "strict": True}, timeout_s=60)
            # the seconds from just before its fork to each step before its own code (judge.forkserver)
            steps = [meta["child_seconds"][f"fork_{k}"] for k in forkserver.FORK_STEP_NAMES]
            assert 0 <= steps[0] and steps[-1] < 30, meta["child_seconds"]
            assert (d / "seen").read_text() == repr((d.name, str(d), False))  # its own environment and folder; the folder not importable
            assert child._proc.poll() is None
    finally:
        for child in children:
            child.close()
    assert all(c._proc.returncode is not None for c in children)


def test_a_child_killed_reports_the_signal(tmp_path):
    child = Child(_config(tmp_path))
    try:
        os.killpg(child._proc.pid, signal.SIGKILL)
        assert child._proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        child.close()


def test_child_env_carries_the_pinning_and_extras(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    env = child_env(ChildConfig(role="candidate", device="cuda", gpu_index=1, workdir=tmp_path, env={"X_EXTRA": "1"}))
    assert env["CUDA_VISIBLE_DEVICES"] == "5" and env["X_EXTRA"] == "1" and env["PYTHONUNBUFFERED"] == "1"


def test_the_server_key_ignores_call_time_variables():
    base = {"PATH": "/bin", "TORCH_LOGS": "x"}
    assert forkpool.import_env_key(base) == forkpool.import_env_key({**base, "KERNELWRIGHT_CACHE": "/a", "CUDA_VISIBLE_DEVICES": "1",
                                                                     "TORCH_EXTENSIONS_DIR": "/b"})
    assert forkpool.import_env_key(base) != forkpool.import_env_key({**base, "TORCH_LOGS": "y"})


def test_the_state_the_health_check_reports(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_FORKSERVER", "0")
    assert forkpool.state() == "off"
    monkeypatch.setenv("KERNELWRIGHT_FORKSERVER", "1")
    srv = forkpool.server()
    assert srv is not None and forkpool.state() in ("starting", "ready")
    srv.wait_ready()
    assert forkpool.state() == "ready"


def test_disabled_spawns_afresh(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_FORKSERVER", "0")
    assert forkpool.server() is None
    with Child(_config(tmp_path)) as child:
        assert not isinstance(child._proc, forkpool.Forked)


def test_a_failing_server_falls_back_to_spawning(tmp_path, monkeypatch):
    def broken(self, **kw):
        raise forkpool.ForkServerError("the fork server did not start: simulated")

    monkeypatch.setenv("KW_TEST_FALLBACK", "1")  # not an import-time variable: the same server...
    monkeypatch.setenv("PYTHONKWTESTFALLBACK", "1")  # ...so this one gives the test a server of its own
    monkeypatch.setattr(forkpool.ForkServer, "spawn", broken)
    with Child(_config(tmp_path)) as child:
        assert not isinstance(child._proc, forkpool.Forked)
    assert forkpool.server() is None  # remembered: no second attempt for this environment


def test_a_candidate_cannot_taint_the_next_candidates_children():
    """The first candidate patches the judge's comparison and the reference's tolerances in its
    own process; the next (wrong) candidate is forked from the same server and must still fail."""
    srv = forkpool.server()
    first = judge("rowsum", "rowsum_taints_judge", correctness_policy())
    assert first.status.value in ("rejected", "incorrect"), first.log
    second = judge("rowsum", "rowsum_wrong", correctness_policy())
    assert second.status.value == "incorrect", second.log
    assert forkpool.server() is srv and not srv.lost  # both were forked from one server


def test_the_sandbox_keeps_a_candidate_from_killing_the_fork_server(monkeypatch):
    """Inside the sandbox the candidate's SIGKILL to its parent (the fork server) is refused: the
    server lives on and serves the next evaluation."""
    monkeypatch.setenv("PYTHONKWTESTKEEP", "1")  # a server of this test's own, not the session's shared one
    srv = forkpool.server()
    srv.wait_ready()
    verdict = judge("rowsum", "rowsum_kills_forkserver", correctness_policy())
    assert verdict.status.value == "correct", verdict.log
    if verdict.sandbox["full"]:
        time.sleep(0.5)
        assert not srv.lost and forkpool.server() is srv


def test_the_fork_server_killed_mid_verdict_loses_nothing(monkeypatch):
    """Without the sandbox, a candidate that kills the fork server at import: its children live on
    (sessions of their own), its verdict is reached, and the next evaluation starts a new server."""
    monkeypatch.setenv("PYTHONKWTESTKILL", "1")  # a server of this test's own, not the session's shared one
    srv = forkpool.server()
    srv.wait_ready()
    verdict = judge("rowsum", "rowsum_kills_forkserver", correctness_policy(sandbox="off"))
    assert verdict.status.value == "correct", verdict.log
    deadline = time.monotonic() + 10
    while not srv.lost and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.lost
    after = judge("rowsum", "rowsum_correct", correctness_policy())
    assert after.status.value == "correct", after.log
    assert forkpool.server() is not srv


def test_a_server_refused_for_an_optional_import_is_replaced_without_it(tmp_path, monkeypatch):
    """On the H200 an optional import (the inductor's) once initialised CUDA in the server: the
    judge then starts a server without optional imports, rather than spawning every child."""
    monkeypatch.setenv("PYTHONKWTESTOPTIONAL", "1")  # a server of this test's own
    srv = forkpool.server()
    srv.wait_ready()
    srv.cuda_touched = "torch._dynamo"  # as the server reports it when that import opened a device file
    forkpool.mark_failed(srv, "the fork server did not start: simulated")
    again = forkpool.server()
    assert again is not None and again is not srv and not again.optional_imports
    with Child(_config(tmp_path)) as child:
        assert isinstance(child._proc, forkpool.Forked) and child._proc.pid != srv.pid


def test_processes_of_one_environment_share_the_listening_server():
    """The session's shared server (conftest) forks the children of every process started under
    its environment; a process under another import-time environment starts its own."""
    import subprocess
    import sys

    path = os.environ.get(forkpool.SHARED_ENV)
    if not path:
        pytest.skip("the session's shared fork server did not come up")
    probe = "from kernelwright.judge import forkpool; s = forkpool.server(); s.wait_ready(); print(s.shared, s.pid)"
    same = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    other = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONKWOTHER": "1"})
    probe_conn = forkpool.ForkServer(shared=path)
    shared_pid = probe_conn.wait_ready(10)["pid"]
    probe_conn.close()
    assert same.stdout.split() == [path, str(shared_pid)], same.stderr
    assert other.stdout.split()[0] == "None" and other.stdout.split()[1] != str(shared_pid), other.stderr


def test_what_the_inductor_writes_into_the_environment_changes_no_key():
    base = {"PATH": "/bin"}
    assert forkpool.import_env_key(base) == forkpool.import_env_key({**base, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_x",
                                                                     "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR": "1234"})


def test_absolute_pythonpath_resolves_each_entry_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = forkpool.absolute_pythonpath({"PYTHONPATH": os.pathsep.join(["src", "", "/abs/lib"]), "OTHER": "x"})
    assert env == {"PYTHONPATH": os.pathsep.join([str(tmp_path / "src"), "/abs/lib"]), "OTHER": "x"}
    assert forkpool.absolute_pythonpath({"OTHER": "x"}) == {"OTHER": "x"}
    monkeypatch.setenv("PYTHONPATH", "src")
    assert child_env(_config(tmp_path))["PYTHONPATH"] == str(tmp_path / "src")


def test_a_judge_run_from_a_checkout_with_a_relative_pythonpath_judges(tmp_path):
    """`PYTHONPATH=src python -m kernelwright eval ...` from a checkout, with a Python that has torch
    but not kernelwright installed: the fork server (started in /) and the children (started in
    their work folders) must still import kernelwright. Up to fec5d40 every such
    verdict was an infra_error ("No module named 'kernelwright'")."""
    import subprocess
    import sys

    import torch

    root = Path(__file__).resolve().parents[1]
    venv = tmp_path / "torch-only"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "torch_only.pth").write_text(str(Path(torch.__file__).resolve().parents[1]) + "\n")  # torch and the rest, no .pth of theirs
    probe = subprocess.run([str(python), "-c", "import torch, kernelwright"], capture_output=True, text=True, cwd=tmp_path)
    if "No module named 'kernelwright'" not in probe.stderr:
        pytest.skip(f"could not build a Python with torch but without kernelwright: {probe.stderr[-300:]!r}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELWRIGHT_")}
    env.update(PYTHONPATH="src", KERNELWRIGHT_CACHE=str(tmp_path / "cache"), KERNELWRIGHT_STORE=str(tmp_path / "cache" / "store.sqlite"))
    out = subprocess.run([str(python), "-m", "kernelwright", "eval", "examples/cpu/softmax/problem.py", "examples/cpu/softmax",
                          "--correctness-only", "--json"], capture_output=True, text=True, cwd=root, env=env, timeout=JUDGE_TIMEOUT_S)
    import json

    verdict = json.loads(out.stdout)
    assert verdict["status"] == "correct", (verdict["status"], verdict.get("log"), out.stderr[-1000:])
