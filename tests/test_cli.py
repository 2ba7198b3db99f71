"""The command line: `python -m kernelwright.cli eval ...` in a subprocess (JSON on stdout, exit codes,
the store). Correctness only, so each judged eval costs one short evaluation."""

from __future__ import annotations

import json

import pytest

from conftest import JUDGE_TIMEOUT_S, candidate, cli, problem
from kernelwright.store import Store

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)

FAST = ("--device", "cpu", "--correctness-only", "--no-compile-baseline", "--baselines", "skip")


@pytest.fixture(scope="module")
def json_eval(tmp_path_factory):
    """One `eval --json --store TMP` of the honest rowsum candidate: (CompletedProcess, store path)."""
    store = tmp_path_factory.mktemp("cli") / "store.sqlite"
    res = cli("eval", str(problem("rowsum")), str(candidate("rowsum_correct")), *FAST, "--json", "--store", str(store))
    return res, store


def test_eval_json_prints_exactly_one_json_object(json_eval):
    res, _ = json_eval
    assert res.returncode == 0, res.stderr
    verdict = json.loads(res.stdout)  # nothing else on stdout, or this fails
    assert isinstance(verdict, dict)
    assert res.stdout.strip().startswith("{") and res.stdout.strip().endswith("}")
    assert verdict["status"] == "correct"
    assert verdict["problem"]["name"] == "rowsum" and verdict["schema_version"] == 1


def test_eval_verdict_lands_in_the_store(json_eval):
    res, store = json_eval
    verdict = json.loads(res.stdout)
    with Store.open(store) as db:
        rows = db.verdicts_for(candidate_hash=verdict["candidate"]["hash"])
        assert len(rows) == 1
        _, stored = rows[0]
        assert stored.status.value == "correct"
        assert stored.problem["hash"] == verdict["problem"]["hash"]
        assert "model_new.py" in db.get_candidate_files(verdict["candidate"]["hash"])
        assert db.get_problem(verdict["problem"]["hash"])["name"] == "rowsum"


def test_eval_of_a_single_file_stores_its_name_as_the_main_file(tmp_path):
    single = tmp_path / "fast_rowsum.py"
    single.write_text((candidate("rowsum_correct") / "model_new.py").read_text())
    store = tmp_path / "store.sqlite"
    res = cli("eval", str(problem("rowsum")), str(single), *FAST, "--json", "--store", str(store))
    assert res.returncode == 0, res.stderr
    with Store.open(store) as db:
        stored = db.get_candidate(json.loads(res.stdout)["candidate"]["hash"])
    assert stored["main"] == "fast_rowsum.py" and list(stored["files"]) == ["fast_rowsum.py"]


def test_incorrect_verdict_still_exits_0():
    res = cli("eval", str(problem("rowsum")), str(candidate("rowsum_wrong")), *FAST, "--json", "--no-store")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["status"] == "incorrect"


def test_unknown_device_exits_2():
    res = cli("eval", str(problem("rowsum")), str(candidate("rowsum_correct")), "--device", "tpu", "--no-store")
    assert res.returncode == 2
    assert "tpu" in res.stderr and res.stdout == ""


def test_missing_candidate_exits_2(tmp_path):
    missing = tmp_path / "no_such_candidate"
    res = cli("eval", str(problem("rowsum")), str(missing), *FAST, "--no-store")
    assert res.returncode == 2
    assert "no such candidate" in " ".join(res.stderr.split())
    assert res.stdout == ""


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_cached_baselines_missing_from_the_store_are_measured_and_the_verdict_says_so(tmp_path):
    res = cli("eval", str(problem("rowsum")), str(candidate("rowsum_correct")), "--device", "cpu", "--baselines", "cached",
              "--no-compile-baseline", "--timing-budget-s", "1", "--allow-torch-compute", "--json", "--store", str(tmp_path / "empty.sqlite"))
    assert res.returncode == 0, res.stderr[-2000:]
    verdict = json.loads(res.stdout)
    assert verdict["status"] == "correct" and verdict["baseline_source"] == "measured" and verdict["eager_ms"] > 0
    step = next(s for s in verdict["steps"] if s["name"] == "interleave")
    assert "no cached baselines" in step["reason"]


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_the_judges_own_process_never_imports_torch_on_the_way_to_a_verdict():
    """torch costs seconds to import; the judge's process needs none of it (children do the work)."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from kernelwright.judge.evaluate import evaluate\n"
        "from kernelwright.judge.policy import Policy\n"
        f"v = evaluate({str(problem('rowsum'))!r}, {str(candidate('rowsum_correct'))!r}, Policy(time_candidate=False), device='cpu')\n"
        "print(v.status.value, v.system.torch, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=JUDGE_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-2000:]
    status, torch_version, imported = out.stdout.split()
    assert status == "correct" and torch_version != "None" and imported == "False", out.stdout


def test_gpu_presence_needs_the_driver_and_the_device_nodes(tmp_path, monkeypatch):
    """A container on a GPU host sees the driver's /proc entries but, without GPUs passed in, no
    device nodes: that is not a GPU (the check then asks torch, which on this CPU build says no)."""
    from kernelwright.judge import evaluate as ev

    proc, dev = tmp_path / "gpus", tmp_path / "dev"
    (proc / "0000:01:00.0").mkdir(parents=True)
    dev.mkdir()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(ev, "NVIDIA_PROC", str(proc))
    monkeypatch.setattr(ev, "NVIDIA_CTL", str(dev / "nvidiactl"))
    import torch

    assert ev.gpu_seen_by_driver() is None  # serve's host-facts warm-up then warms the C++ facts only, torch never imported
    assert ev._gpu_present() is torch.cuda.is_available()
    (dev / "nvidiactl").touch()
    (dev / "nvidia0").touch()
    assert ev.gpu_seen_by_driver() is True and ev._gpu_present() is True
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert ev.gpu_seen_by_driver() is False and ev._gpu_present() is False
