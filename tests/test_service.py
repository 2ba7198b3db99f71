"""`kernelwright serve` and the client (kernelwright.client): the same verdict as in process, a
private socket or a token, a queue whose waiting counts against nothing, cancellation."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
import threading
import time

import pytest

from conftest import JUDGE_TIMEOUT_S, candidate, correctness_policy, problem
from kernelwright.client import Judge, ServiceError
from kernelwright.client.judge import wait_for
from kernelwright.client.service import JudgeService, make_server
from kernelwright.judge.policy import Policy, TimingConfig, policy_from_wire, policy_to_wire
from kernelwright.problems.loader import ProblemError

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


@pytest.fixture
def service(tmp_path):
    svc = JudgeService(workers=1, root=tmp_path)
    server, url = make_server(svc, socket_path=tmp_path / "sock" / "judge.sock")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield svc, url
    server.shutdown()
    server.server_close()
    svc.close()


def test_the_policy_crosses_the_wire_whole():
    policy = Policy(seeds=(3, 5), n_seeds=2, atol=1e-3, libraries=("cublas",), disabled_steps=frozenset({"l2_flush"}),
                    timing=TimingConfig(budget_s=3), baselines="skip", compile_baseline=False)
    assert policy_from_wire(json.loads(json.dumps(policy_to_wire(policy)))) == policy
    with pytest.raises(ValueError, match="unknown policy fields"):
        policy_from_wire({"tolerance": 1})
    with pytest.raises(ValueError, match="n_seeds must be at least 1"):
        policy_from_wire({"n_seeds": 0})


def test_the_service_answers_what_the_process_answers(service):
    svc, url = service
    sock = url.removeprefix("unix://")
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600 and stat.S_IMODE(os.stat(os.path.dirname(sock)).st_mode) == 0o700
    remote = Judge(url, device="cpu")
    local = Judge(None, device="cpu") if not os.environ.get("KERNELWRIGHT_SERVICE") else None
    for cand, status in (("rowsum_correct", "correct"), ("rowsum_wrong", "incorrect")):
        v = remote.evaluate(problem("rowsum"), candidate(cand), correctness_policy())
        assert v.status.value == status, v.log
        if local is not None:
            mine = local.evaluate(problem("rowsum"), candidate(cand), correctness_policy())
            assert (mine.status, mine.problem, mine.candidate, [s.name for s in mine.steps if s.ran]) == \
                   (v.status, v.problem, v.candidate, [s.name for s in v.steps if s.ran])
    assert remote.health()["done"] == 2
    again = remote.evaluate(problem("rowsum"), candidate("rowsum_correct"), correctness_policy())
    assert again.workers["reference"] == "warm"  # the service keeps the problem's reference child between requests
    job = remote.last_job  # the service's own times and progress, for whoever asks where the time went
    assert "verdict" not in job and job["state"] == "done" and 0 < job["judged_s"] < JUDGE_TIMEOUT_S
    times = [t for t, _ in job["progress_log"]]
    messages = [m for _, m in job["progress_log"]]
    assert times == sorted(times) and times[-1] <= job["judged_s"] + 0.01
    assert messages[0] == "request materialized" and messages[-1] == "verdict serialized" and "verdict correct" in messages


def test_a_jobs_progress_log_keeps_its_first_and_last_messages():
    from kernelwright.client import service as svc_mod

    job = svc_mod.Job(id="eval-x", request={})
    job.times["queued"] = job.times["started"] = time.time()
    for k in range(svc_mod.MAX_PROGRESS + 50):
        job.said(f"m{k}")
    log = job.to_dict()["progress_log"]
    assert len(log) == svc_mod.MAX_PROGRESS and log[0][1] == "m0" and log[-2][1] == f"m{svc_mod.MAX_PROGRESS - 2}"
    assert log[-1][1] == f"m{svc_mod.MAX_PROGRESS + 49}" and job.progress == log[-1][1]


def test_a_malformed_problem_or_request_is_the_callers_error(service, tmp_path):
    _, url = service
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    raise RuntimeError('no')\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(ProblemError, match="get_inputs"):
        Judge(url, device="cpu").evaluate(bad, candidate("rowsum_correct"), correctness_policy())
    with pytest.raises(ValueError, match="a service is"):
        Judge("ftp://x")
    with pytest.raises(ServiceError, match="did not answer"):
        Judge(f"unix://{tmp_path}/nobody.sock").health()


def test_queued_and_running_evaluations_can_be_cancelled(service):
    svc, url = service
    from kernelwright.client.judge import _UnixConnection  # noqa: F401 - the client's transport, exercised below
    judge = Judge(url, device="cpu")
    request = _request("rowsum_infinite_loop", correctness_policy(run_timeout_s=60))
    running = judge._call("POST", "/v1/evaluations", request)
    queued = judge._call("POST", "/v1/evaluations", _request("rowsum_correct", correctness_policy()))
    deadline = time.monotonic() + 60
    while svc.get(running["id"]).progress.find("checking correctness") < 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert svc.get(queued["id"]).state == "queued"  # one worker: the second waits its turn
    assert judge._call("DELETE", f"/v1/evaluations/{queued['id']}")["state"] == "cancelled"
    t0 = time.monotonic()
    judge._call("DELETE", f"/v1/evaluations/{running['id']}")
    job = judge._call("GET", f"/v1/evaluations/{running['id']}?wait=30")
    assert job["state"] == "cancelled" and job["verdict"] is None and time.monotonic() - t0 < 20
    assert svc.get(queued["id"]).times.get("started") is None  # never judged
    after = judge.evaluate(problem("rowsum"), candidate("rowsum_correct"), correctness_policy())
    assert after.status.value == "correct"


def test_time_in_the_queue_counts_against_nothing(service):
    """Two evaluations on one worker: the second waits for the first, longer than its own run
    timeout, and is still judged on its merits."""
    svc, url = service
    judge = Judge(url, device="cpu")
    slow = judge._call("POST", "/v1/evaluations", _request("rowsum_infinite_loop", correctness_policy(run_timeout_s=4)))
    quick = judge._call("POST", "/v1/evaluations", _request("rowsum_correct", correctness_policy(run_timeout_s=2)))
    first = judge._call("GET", f"/v1/evaluations/{slow['id']}?wait=60")
    second = judge._call("GET", f"/v1/evaluations/{quick['id']}?wait=60")
    assert first["verdict"]["status"] == "timeout"
    assert second["verdict"]["status"] == "correct" and second["queued_s"] > 2


def test_tcp_needs_a_token(tmp_path):
    svc = JudgeService(workers=1, root=tmp_path)
    with pytest.raises(ValueError, match="needs a token"):
        make_server(svc, port=0)
    server, url = make_server(svc, port=0, token="s3cret")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with pytest.raises(ServiceError, match="401"):
            Judge(url, token="wrong").health()
        assert Judge(url, token="s3cret").health()["ok"]
    finally:
        server.shutdown()
        server.server_close()
        svc.close()


def test_cli_eval_through_serve(tmp_path):
    sock = tmp_path / "s" / "judge.sock"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "kernelwright", "serve", "--socket", str(sock), "--workers", "1"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(f"unix://{sock}", timeout_s=60)
        out = subprocess.run([sys.executable, "-m", "kernelwright", "eval", str(problem("rowsum")), str(candidate("rowsum_correct")),
                              "--device", "cpu", "--json", "--no-store", "--correctness-only", "--allow-torch-compute", "--baselines", "skip",
                              "--service", f"unix://{sock}"], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["status"] == "correct"
        assert "judged by the service" in out.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not sock.exists()


def _request(cand: str, policy: Policy) -> dict:
    import base64

    from kernelwright.judge.snapshot import read_candidate

    return {"problem": {"name": "rowsum", "source_b64": base64.b64encode(problem("rowsum").read_bytes()).decode()},
            "candidate": {"files": read_candidate(candidate(cand))}, "policy": policy_to_wire(policy), "device": "cpu"}


def test_a_single_file_of_any_name_is_judged_as_eval_judges_it(service, tmp_path):
    """`eval PROBLEM fast_rowsum.py` works on a file of any name; so does the service, with the
    same candidate id (the file's name is part of it), beside another candidate's file."""
    from kernelwright.judge.snapshot import files_hash

    svc, url = service
    folder = tmp_path / "mine"
    folder.mkdir()
    single = folder / "fast_rowsum.py"
    single.write_text((candidate("rowsum_correct") / "model_new.py").read_text())
    (folder / "slow_rowsum.py").write_text((candidate("rowsum_wrong") / "model_new.py").read_text())
    v = Judge(url, device="cpu").evaluate(problem("rowsum"), single, correctness_policy())
    assert v.status.value == "correct", v.log
    assert v.candidate["hash"] == files_hash(single)  # what eval's in-process judge gives the file
    request = _request("rowsum_correct", correctness_policy())
    for main in ("other.py", "kernels/k.py", 3):
        with pytest.raises(ValueError, match="candidate.main must name"):
            svc.submit({**request, "candidate": {**request["candidate"], "main": main}})


def test_requests_with_unsafe_names_are_refused(service):
    svc, _ = service
    request = _request("rowsum_correct", correctness_policy())
    request["candidate"]["files"]["../escape.py"] = "x = 1"
    with pytest.raises(ValueError, match="plain relative path"):
        svc.submit(request)
    broken = _request("rowsum_correct", correctness_policy())
    broken["problem"]["source_b64"] = "not base64!"
    with pytest.raises(ValueError, match="malformed request"):
        svc.submit(broken)
    odd = _request("rowsum_correct", correctness_policy())
    odd["policy"]["timing"]["no_such_knob"] = 1
    with pytest.raises(ValueError, match="malformed request"):
        svc.submit(odd)
    assert dataclasses.is_dataclass(svc.submit(_request("rowsum_correct", correctness_policy())))


def test_check_through_the_service(service, tmp_path):
    """`check --service URL` judges in the service (its count goes up), with check's own exit code."""
    from test_workspace import _ws

    svc, url = service
    root = _ws(tmp_path)
    before = svc.counts()["done"]
    proc = subprocess.run([sys.executable, "-m", "kernelwright", "check", "-C", str(root), "--quick", "--json", "-q",
                           "--store", str(tmp_path / "s.sqlite"), "--service", url], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["status"] == "correct"
    assert svc.counts()["done"] == before + 1
    bad = subprocess.run([sys.executable, "-m", "kernelwright", "check", "-C", str(root), "--quick", "--service", "ftp://nowhere"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "a service is" in bad.stderr
