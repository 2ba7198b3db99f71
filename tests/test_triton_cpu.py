"""Triton candidates on the CPU backend (issue 31): the judge runs a candidate's @triton.jit
kernels through Triton's interpreter (TRITON_INTERPRET=1, set for CPU children; removed for GPU
children, whose times must be compiled code). The interpreter checks correctness and the guards
that do not need a GPU; timing on the CPU is never a claim."""

from __future__ import annotations

import pytest

pytest.importorskip("triton", reason="Triton is not installed: pip install -e '.[test]'")

from conftest import JUDGE_TIMEOUT_S, correctness_policy, judge  # noqa: E402
from kernelwright.core.records import Status  # noqa: E402
from kernelwright.judge.workers import ChildConfig, child_env  # noqa: E402

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


def test_triton_runs_interpreted_in_cpu_children_and_compiled_in_gpu_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # a user's setting must not reach a GPU verdict
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    cpu = child_env(ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env={}))
    gpu = child_env(ChildConfig(role="candidate", device="cuda", gpu_index=0, workdir=tmp_path, env={}))
    assert cpu["TRITON_INTERPRET"] == "1" and "TRITON_INTERPRET" not in gpu


STRICT = dict(allow_torch_compute=False)  # the default policy's rule: the candidate's own kernels do the work


def test_an_honest_triton_kernel_is_correct_under_the_strict_op_audit():
    """The interpreter's own tensor plumbing (set_, copy_, new_empty) is not torch compute."""
    v = judge("relu", "relu_triton", correctness_policy(**STRICT))
    assert v.status is Status.CORRECT, v.log


def test_a_wrong_triton_kernel_is_incorrect():
    v = judge("relu", "relu_triton_wrong", correctness_policy(**STRICT))
    assert v.status is Status.INCORRECT, v.log


def test_a_triton_launcher_that_has_torch_do_the_work_is_rejected_by_the_op_audit():
    v = judge("relu", "relu_triton_calls_torch", correctness_policy(**STRICT))
    assert v.status is Status.REJECTED and "aten::relu" in v.log, v.log


def test_an_rl_episode_in_triton_on_the_cpu(tmp_path):
    """The language choice reaches the environment: the skill shows Triton, compile() says where a
    Triton kernel is built, and a submit of the honest kernel is paid its final verdict's milestone."""
    from conftest import CANDIDATES, PROBLEMS
    from kernelwright.agent.objective import Objective
    from kernelwright.rl import EnvConfig, KernelEnv, milestone

    code = (CANDIDATES / "relu_triton" / "model_new.py").read_text()
    objective = Objective(language="triton", compile_baseline=False, seeds=1, timing_budget_s=1.0, allow_torch_compute=False)
    with KernelEnv(EnvConfig(device="cpu", objective=objective, store=tmp_path / "s.sqlite", workroot=tmp_path / "eps")) as env:
        obs = env.reset(PROBLEMS / "relu.py")
        assert "@triton.jit" in obs["system"] and "interpreter" in obs["system"]
        env.step({"name": "write_file", "arguments": {"path": "model_new.py", "content": code}})
        compiled, _, _ = env.step({"name": "compile", "arguments": {}})
        assert "Triton kernels found (kw_relu_kernel)" in compiled["text"]
        _, done, info = env.step({"name": "submit", "arguments": {}})
        assert done and info["verdict"]["status"] == "correct"
        assert info["reward"]["value"] == milestone(info["verdict"]).value >= 1


def test_a_workspace_in_triton(tmp_path):
    """`workspace init --language triton`: its SKILL.md and model_new.py speak Triton, and its
    checks judge a Triton kernel on the CPU."""
    from conftest import CANDIDATES, PROBLEMS
    from kernelwright.cli import main

    ws = tmp_path / "ws"
    with pytest.raises(SystemExit, match="0"):
        main(["workspace", "init", str(PROBLEMS / "relu.py"), str(ws), "--language", "triton", "--device", "cpu",
              "--store", str(tmp_path / "s.sqlite")])
    assert "@triton.jit" in (ws / "SKILL.md").read_text() and "runtime.load(SRC)" not in (ws / "SKILL.md").read_text()
    assert "@triton.jit" in (ws / "model_new.py").read_text()
    (ws / "model_new.py").write_text((CANDIDATES / "relu_triton" / "model_new.py").read_text())
    with pytest.raises(SystemExit, match="0"):
        main(["check", "--quick", "--workspace", str(ws), "--store", str(tmp_path / "s.sqlite")])


def test_compile_tells_a_triton_kernel_under_torch_compiles_prefix_to_be_renamed(tmp_path):
    from conftest import CANDIDATES, PROBLEMS
    from kernelwright.agent.judging import Judge
    from kernelwright.agent.objective import Objective
    from kernelwright.problems.loader import load_problem

    (tmp_path / "model_new.py").write_text((CANDIDATES / "relu_triton" / "model_new.py").read_text().replace("kw_relu_kernel", "triton_relu"))
    report = Judge(load_problem(PROBLEMS / "relu.py"), Objective(language="triton"), device="cpu", store=None, record=False).compile(tmp_path)
    assert not report.ok and "triton_relu" in report.log and "rename" in report.log


def test_a_replay_takes_the_recordings_language(tmp_path):
    """A recording made in Triton replays with the Triton skill text, not the default's."""
    import json
    from types import SimpleNamespace

    from pathlib import Path

    from kernelwright.agent.commands import _objective

    recording = json.loads((Path(__file__).resolve().parents[1] / "examples" / "recordings" / "cpu_elementwise_chain.json").read_text())
    recording.setdefault("objective", {})["language"] = "triton"
    (tmp_path / "r.json").write_text(json.dumps(recording))
    args = SimpleNamespace(config=None)
    assert _objective(args, f"replay:{tmp_path / 'r.json'}").language == "triton"
    args.language = "cuda"  # a flag still wins over the recording
    assert _objective(args, f"replay:{tmp_path / 'r.json'}").language == "cuda"


def test_a_forked_cpu_child_interprets_tritons_standard_library_too():
    """tl.zeros is itself a @triton.jit function of Triton's, defined when the fork server imported
    Triton (torch.utils.flop_counter imports it) without the interpreter; a forked CPU child must
    import Triton afresh, or an interpreted kernel calls a compiled tl.zeros and fails."""
    from conftest import PROBLEMS, CANDIDATES
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.forkserver import _interprets

    assert _interprets({"TRITON_INTERPRET": "1"}) and _interprets({"TRITON_INTERPRET": "True"}) and not _interprets({})
    v = evaluate(PROBLEMS / "matmul.py", CANDIDATES / "zoo_triton_matmul_ieee", correctness_policy(**STRICT), device="cpu")
    assert v.status is Status.CORRECT, v.log


def test_kernelbench_style_triton_candidates_are_discovered_with_their_kernels():
    """KernelBench's Triton backend: one file per problem, launchers named triton_* that are plain
    Python (not kernels), kernels under @triton.jit. Discovery finds the kernels, not the launchers;
    the files assert CUDA inputs, so they are judged on the GPU (tests/test_triton_gpu.py)."""
    from pathlib import Path

    from kernelwright.judge.candidate import triton_kernels_of

    root = Path(__file__).resolve().parent / "fixtures" / "kernelbench_triton"
    assert triton_kernels_of(root / "level1") == {"relu_kernel", "matmul_kernel"}  # triton_relu, triton_matmul: launchers
    assert triton_kernels_of(root / "level2") == {"linear_relu_scale_kernel"}


def test_the_demo_in_triton_replays_the_triton_recording_for_the_device():
    """`optimize --demo --language triton` takes examples/recordings/DEVICE_PROBLEM_triton.json, whose
    objective says triton, and whose last candidate is the shipped Triton example."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from kernelwright.agent.commands import _demo

    root = Path(__file__).resolve().parents[1] / "examples"
    problem, model = _demo(SimpleNamespace(device="cpu", language="triton"))
    assert problem.endswith("examples/cpu/elementwise_chain/problem.py") and model.endswith("cpu_elementwise_chain_triton.json")
    assert _demo(SimpleNamespace(device="cpu", language=None))[1].endswith("cpu_elementwise_chain.json")
    for device, name in (("cpu", "elementwise_chain"), ("cuda", "softmax")):
        rec = json.loads((root / "recordings" / f"{device}_{name}_triton.json").read_text())
        assert rec["objective"]["language"] == "triton"
        good = (root / "triton" / name / "model_new.py").read_text()
        written = [tc["arguments"].get("content") for turn in rec["turns"] for tc in turn["reply"].get("tool_calls") or () if tc["name"] == "write_file"]
        assert written and written[-1] == good, f"{device}: examples/triton/{name} changed since the recording"
