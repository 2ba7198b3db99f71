"""The agent's tools on the CPU: workspace confinement, extraction from replies, feedback texts,
tool-call errors, and real judging of tiny C++ raw candidates through the tools (children, g++)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from kernelwright.agent import feedback
from kernelwright.agent.extract import extract_candidate, extract_ideas, extraction_problem
from kernelwright.agent.judging import BuildReport, Judge, Judged
from kernelwright.agent.objective import Objective
from kernelwright.agent.profile import breakdown_table, ncu_metrics, ncu_table, parse_ncu_csv, reference_breakdown
from kernelwright.core.runs import ToolCall
from kernelwright.agent.skill import render_skill
from kernelwright.agent.tools import TOOL_SPECS, Tools
from kernelwright.agent.workspace import MAX_WRITE_BYTES, Workspace
from kernelwright.core.records import Guard, Status, Timing, Verdict
from kernelwright.problems.loader import load_problem

from affine_fixture import PROBLEM, candidate  # the tiny problem and raw C++ candidate, shared with test_mcp.py
from conftest import JUDGE_TIMEOUT_S, needs_gpu


FAST = Objective(compile_baseline=False, seeds=1, timing_budget_s=1.0)


@pytest.fixture(scope="module")
def problem(tmp_path_factory):
    path = tmp_path_factory.mktemp("agent-problem") / "affine.py"
    path.write_text(PROBLEM)
    return load_problem(path)


def make_tools(tmp_path: Path, problem, objective: Objective = FAST, target: float | None = 1.0) -> Tools:
    judge = Judge(problem, objective, device="cpu", store=tmp_path / "store.sqlite")
    return Tools(Workspace(tmp_path / "ws"), judge, target_speedup=target)


def call(tools: Tools, name: str, **arguments):
    return tools.run(ToolCall(id=f"c-{name}", name=name, arguments=arguments))


# -- workspace ----------------------------------------------------------------------------------------


def test_workspace_writes_reads_and_lists_inside_its_root(tmp_path):
    ws = Workspace(tmp_path / "ws")
    ws.write("model_new.py", "class ModelNew: pass\n")
    ws.write("kernels/add.cu", "// kernel\n")
    (ws.root / "__pycache__").mkdir()
    (ws.root / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert ws.list() == ["kernels/add.cu", "model_new.py"]
    assert ws.list("kernels") == ["kernels/add.cu"]
    assert ws.read("model_new.py") == "class ModelNew: pass\n"
    assert set(ws.files()) == {"model_new.py", "kernels/add.cu"}
    assert len(ws.hash()) == 64
    ws.load({"model_new.py": "class ModelNew: x = 1\n"})
    assert ws.list() == ["model_new.py"]
    copy = ws.snapshot_to(tmp_path / "copy")
    assert (copy / "model_new.py").read_text() == "class ModelNew: x = 1\n"


@pytest.mark.parametrize("rel", ["../evil.py", "kernels/../../evil.py", "/etc/passwd", "~/x.py", ".hidden.py", "a\\b.py", "", "-rf.py"])
def test_workspace_refuses_paths_that_are_not_plain_relative_names(tmp_path, rel):
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(ValueError):
        ws.write(rel, "x = 1\n")


def test_workspace_refuses_symlinks_that_lead_out(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("secret = 1\n")
    ws = Workspace(tmp_path / "ws")
    os.symlink(outside, ws.root / "link")
    with pytest.raises(ValueError, match="outside the workspace"):
        ws.read("link/secret.py")
    with pytest.raises(ValueError, match="outside the workspace"):
        ws.write("link/new.py", "x = 1\n")
    assert not (outside / "new.py").exists()


def test_workspace_refuses_large_files_and_other_suffixes(tmp_path):
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(ValueError, match="byte limit"):
        ws.write("model_new.py", "x" * (MAX_WRITE_BYTES + 1))
    with pytest.raises(ValueError, match="only source and text files"):
        ws.write("run.sh", "echo hi\n")
    with pytest.raises(ValueError, match="workspace has no model_new.py"):
        ws.hash()
    assert ws.files() == {}


# -- extraction ---------------------------------------------------------------------------------------

GOOD = "class ModelNew:\n    pass\n"


def test_extract_takes_the_python_block_defining_model_new():
    reply = f"Plan: fuse.\n\n```cpp\nint x;\n```\n\n```python\n{GOOD}```\nDone."
    assert extract_candidate(reply) == GOOD
    assert extraction_problem(reply) == ""


def test_extract_takes_the_last_of_several_blocks():
    later = "class ModelNew:\n    x = 2\n"
    reply = f"```python\n{GOOD}```\nbetter:\n```py\n{later}```"
    assert extract_candidate(reply) == later


def test_extract_explains_a_reply_without_code():
    assert extract_candidate("I would use shared memory.") is None
    assert "no fenced code block" in extraction_problem("I would use shared memory.")


def test_extract_explains_blocks_without_model_new():
    reply = "```python\nprint(1)\n```\n```cuda\n__global__ void k() {}\n```"
    assert extract_candidate(reply) is None
    assert "no ```python block with a line 'class ModelNew'" in extraction_problem(reply)


def test_extract_gives_the_line_of_a_syntax_error():
    reply = "Here:\n```python\nimport torch\n\nclass ModelNew:\n    def f(self:\n        pass\n```"
    assert extract_candidate(reply) is None
    problem = extraction_problem(reply)
    assert "does not parse" in problem and "line 4" in problem


def test_extract_notices_a_reply_cut_off_inside_the_block():
    reply = f"```python\n{GOOD}def more("
    assert extract_candidate(reply) is None
    assert "not closed" in extraction_problem(reply)


def test_extract_ideas_reads_numbered_and_bulleted_lists():
    reply = textwrap.dedent("""\
        Ideas:
        1. **Fuse** the bias into the GEMM epilogue
           so the output is written once.
        2) Use float4 loads
        - Tile rows over warps

        ```python
        - not an idea
        ```
        """)
    assert extract_ideas(reply, 5) == ["Fuse the bias into the GEMM epilogue so the output is written once.", "Use float4 loads",
                                       "Tile rows over warps"]
    assert extract_ideas(reply, 2) == ["Fuse the bias into the GEMM epilogue so the output is written once.", "Use float4 loads"]
    assert extract_ideas("no list here", 3) == []


# -- feedback -----------------------------------------------------------------------------------------


def verdict(status: Status, **kw) -> Judged:
    v = Verdict(status=status, problem={"name": "affine", "hash": "p" * 64}, candidate={"hash": "c" * 64, "build_path": "raw"},
                policy={}, **kw)
    return Judged("full", v, None, "c" * 64, {})


def test_feedback_for_a_compile_error_shows_the_compiler_log_first_lines():
    log = "affine.cpp:3:5: error: expected ';' before 'return'\n" + "\n".join(f"note {i}" for i in range(2000))
    text = feedback.describe(verdict(Status.COMPILE_ERROR, log=log), target_speedup=None)
    assert text.startswith("status: compile_error")
    assert "expected ';' before 'return'" in text and "more line(s) not shown" in text
    assert len(text) <= feedback.DEFAULT_LIMIT


def test_feedback_for_incorrect_gives_the_mismatch_and_errors():
    j = verdict(Status.INCORRECT, max_abs_error=1.0, max_rel_error=9999.0, log="case native-s1: 2048 of 2048 elements differ; first (0, 0)",
                guards=(Guard("distributions", True, "case uniform-s3: 2048 elements differ"),))
    text = feedback.describe(j, target_speedup=2.0)
    assert "max abs error 1" in text and "2048 of 2048 elements differ" in text
    assert "failed check distributions" in text


def test_feedback_for_rejected_names_the_guard():
    j = verdict(Status.REJECTED, guards=(Guard("inputs_unchanged", True, "case native-s1: input(s) at position(s) [0] modified"),
                                        Guard("op_audit", False, "allocation only")))
    text = feedback.describe(j, target_speedup=None)
    assert "refused by guard inputs_unchanged" in text and "op_audit" not in text


def test_feedback_for_correct_gives_times_speedups_and_target():
    j = verdict(Status.CORRECT, runtime_ms=0.5, eager_ms=1.0, compile_ms=0.8, speedup_vs_eager=2.0, speedup_vs_compile=1.6,
                speedup_vs_best=1.6, efficiency=0.42, floor_ms=0.1, max_abs_error=1e-6, max_rel_error=0.01,
                timing=Timing(n=40, median_ms=0.5, iqr_ms=0.01), baseline_source="cached",
                static_findings=({"rule": "side_stream", "file": "model_new.py", "line": 7, "detail": "torch.cuda.Stream"},))
    text = feedback.describe(j, target_speedup=1.5)
    assert "time: 0.5 ms (median of 40 calls" in text and "eager 1 ms" in text and "torch.compile 0.8 ms" in text
    assert "2x vs eager" in text and "1.6x vs the faster" in text and "42.0%" in text
    assert "target 1.5x: met (1.6x, 7% above it)" in text
    assert "static findings (advisory): side_stream at model_new.py:7" in text
    assert "not met (1.6x; 25% faster needed)" in feedback.describe(j, target_speedup=2.0)


def test_feedback_for_a_build_report():
    ok = feedback.describe_build(BuildReport(True, "", 0.4, [{"name": "inline", "cached": True, "registers": 32}], "raw"))
    assert "build ok (raw)" in ok and "registers 32" in ok
    bad = feedback.describe_build(BuildReport(False, "k.cu(3): error: identifier \"x\" is undefined", 1.2))
    assert bad.startswith("build failed") and "is undefined" in bad


def test_sanitize_strips_escapes_paths_and_length(tmp_path):
    from kernelwright.judge.build import cache_dir

    text = ("\x1b[31merror\x1b[0m\x07 in /dev/shm/kw-eval-a1b2c3d4/candidate/model_new.py line 3\r\n"
            f"{cache_dir()}/builds/abc/lib.so and {Path.home()}/x and {tmp_path}/ws/model_new.py")
    out = feedback.sanitize(text, 4000, paths={str(tmp_path / "ws"): "<workspace>"})
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "<candidate>/model_new.py" in out and "<cache>/builds/abc/lib.so" in out and "<workspace>/model_new.py" in out
    assert str(Path.home()) not in out and str(tmp_path) not in out
    assert feedback.sanitize("at /tmp/kw-run-1a2b3c4d-x_9/main/model_new.py:3") == "at <workdir>/main/model_new.py:3"
    long = feedback.sanitize("y" * 10_000, 500)
    assert len(long) <= 500 and "characters cut" in long


# -- tool calls that fail -----------------------------------------------------------------------------


def test_tool_errors_come_back_as_results(tmp_path, problem):
    tools = make_tools(tmp_path, problem)
    unknown = call(tools, "rm_rf")
    assert not unknown.ok and "unknown tool 'rm_rf'" in unknown.text
    bad = tools.run(ToolCall(id="1", name="write_file", arguments={}, raw_arguments="{path: x", parse_error="Expecting property name"))
    assert not bad.ok and "did not parse as a JSON object" in bad.text
    missing = call(tools, "write_file", path="model_new.py")
    assert not missing.ok and "needs the argument(s) content" in missing.text
    escape = call(tools, "read_file", path="../../etc/passwd")
    assert not escape.ok and "'..' is not allowed" in escape.text
    typed = call(tools, "read_file", path=3)
    assert not typed.ok and "must be strings" in typed.text
    early = call(tools, "verify")
    assert not early.ok and "no model_new.py yet" in early.text
    assert {s.name for s in TOOL_SPECS} == {"list_files", "read_file", "write_file", "compile", "verify", "profile", "submit"}
    assert all(s.to_openai()["function"]["parameters"]["type"] == "object" for s in TOOL_SPECS)


def test_write_file_warns_about_python_that_does_not_parse(tmp_path, problem):
    tools = make_tools(tmp_path, problem)
    res = call(tools, "write_file", path="model_new.py", content="class ModelNew(:\n")
    assert res.ok and "does not parse: line 1" in res.text
    assert call(tools, "list_files").text == "model_new.py"


def test_skill_is_rendered_for_the_objective():
    text = render_skill(Objective(target_speedup=1.5, libraries=("cublas",)), "cuda")
    assert "{policy_rules}" not in text and "{target}" not in text and "{device}" not in text
    assert "at least 1.5x faster" in text and "library kernels allowed: cublas" in text and "H200" in text
    assert "ONE fenced ```python block" in text
    assert "C++ built by g++" in render_skill(FAST, "cpu")


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("language", ["cuda", "triton"])
def test_the_skill_speaks_the_objectives_language(device, language):
    from kernelwright.agent.skill import PLACEHOLDERS

    text = render_skill(Objective(language=language), device)
    assert not [p for p in PLACEHOLDERS if p in text]
    assert ("@triton.jit" in text) == (language == "triton") and ("runtime.load(SRC)" in text) == (language == "cuda")
    if language == "triton":
        assert "never `triton_...`" in text
        assert ("which checks results but says nothing about speed" in text) == (device == "cpu") != ("compiled by Triton's JIT" in text)


def test_an_unknown_language_is_refused_by_name():
    with pytest.raises(ValueError, match="language must be one of"):
        Objective(language="cute")


# -- ncu parsing (no GPU needed) ----------------------------------------------------------------------

NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "affine_kernel" - 0: 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","affine_kernel(const float *, float *, long)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","81.52"
"0","4242","python3.12","127.0.0.1","affine_kernel(const float *, float *, long)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","12.74"
"0","4242","python3.12","127.0.0.1","affine_kernel(const float *, float *, long)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","launch__registers_per_thread","register/thread","16"
"0","4242","python3.12","127.0.0.1","affine_kernel(const float *, float *, long)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","22.10"
"0","4242","python3.12","127.0.0.1","affine_kernel(const float *, float *, long)","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0","Command line profiler metrics","sm__warps_active.avg.pct_of_peak_sustained_active","%","88.3"
"1","4242","python3.12","127.0.0.1","reduce_rows(const float *, float *)","1","7","(1024, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","2,048"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_is_parsed_per_kernel_launch():
    kernels = parse_ncu_csv(NCU_CSV)
    assert [k["name"].split("(")[0] for k in kernels] == ["affine_kernel", "reduce_rows"]
    first = kernels[0]
    assert first["duration_ms"] == pytest.approx(0.01274) and first["dram_pct"] == 81.52 and first["sm_pct"] == 22.10
    assert first["occupancy_pct"] == 88.3 and first["registers"] == 16
    assert kernels[1]["duration_ms"] == pytest.approx(0.002048) and "dram_pct" not in kernels[1]
    table = ncu_table({"ran": True, "kernels": kernels})
    assert "affine_kernel" in table and "81.5" in table
    assert parse_ncu_csv("==PROF== nothing profiled\n") == []


def test_ncu_is_not_run_on_the_cpu(problem, tmp_path):
    res = ncu_metrics(problem, tmp_path, device="cpu", timeout_s=10)
    assert res == {"ran": False, "reason": "CPU backend: ncu measures CUDA kernels"}


def test_ncu_is_run_at_the_size_the_verdict_used(problem, tmp_path, monkeypatch):
    # the tools' and the workspace's ncu figures: the problem at the verdict's size (--size cpu on a GPU)
    from types import SimpleNamespace

    from kernelwright.agent import tools as tools_module

    asked = []
    monkeypatch.setattr(tools_module, "ncu_metrics", lambda *a, **kw: asked.append(kw["size"]) or {"ran": True, "kernels": []})
    tools = make_tools(tmp_path, problem)
    for size in ("cpu", "cpu", "full"):
        tools._ncu_for(SimpleNamespace(candidate_hash="c0ffee", verdict=SimpleNamespace(problem={"size": size})))
    assert asked == ["cpu", "full"]  # measured once per candidate and size


def test_ncu_runs_through_the_judges_tool_launcher_under_the_policys_sandbox(problem, tmp_path, monkeypatch):
    # started as compute-sanitizer is (judge.sandbox.run_tool), confined by the policy's mode, not always auto
    from kernelwright.agent import profile
    from kernelwright.judge import sandbox

    seen = []
    monkeypatch.setattr(profile, "find_ncu", lambda: "/nowhere/ncu")
    monkeypatch.setattr(sandbox, "refusal", lambda mode: "")
    monkeypatch.setattr(sandbox, "run_tool", lambda cmd, **kw: seen.append((cmd[-4], kw["mode"])) or (False, ""))
    for mode in ("off", "strict"):
        ncu_metrics(problem, tmp_path, device="cuda", timeout_s=1, sandbox_mode=mode)
    assert seen == [("kernelwright.agent.profile", "off"), ("kernelwright.agent.profile", "strict")]
    monkeypatch.setattr(sandbox, "refusal", lambda mode: f"--sandbox {mode}: refused here")
    assert ncu_metrics(problem, tmp_path, device="cuda", timeout_s=1, sandbox_mode="strict") == {"ran": False, "reason": "--sandbox strict: refused here"}
    assert len(seen) == 2  # a refused mode starts nothing


def test_the_tools_hand_ncu_the_policys_sandbox(problem, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from kernelwright.agent import tools as tools_module
    from kernelwright.judge.policy import Policy

    asked = []
    monkeypatch.setattr(tools_module, "ncu_metrics", lambda *a, **kw: asked.append(kw["sandbox_mode"]) or {"ran": True, "kernels": []})
    tools = make_tools(tmp_path, problem)
    tools.judge.objective = SimpleNamespace(policy=lambda: Policy(sandbox="off"))
    tools._ncu_for(SimpleNamespace(candidate_hash="c0ffee", verdict=SimpleNamespace(problem={"size": "full"})))
    assert asked == ["off"]


# -- real judging on the CPU backend (children, g++) ---------------------------------------------------


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_a_correct_candidate_compiles_verifies_and_is_stored(tmp_path, problem):
    tools = make_tools(tmp_path, problem)
    assert call(tools, "write_file", path="model_new.py", content=candidate()).ok
    built = call(tools, "compile")
    assert built.ok and "build ok (raw)" in built.text, built.text
    res = call(tools, "verify")
    assert res.ok and res.verdict["status"] == "correct", res.text
    assert res.text.startswith("status: correct (correctness check") and res.candidate_hash == tools.workspace.hash()
    assert res.data["verdict_id"] is not None
    from kernelwright.store import Store

    with Store.open(tmp_path / "store.sqlite") as db:
        assert db.get_verdict(res.data["verdict_id"]).status == Status.CORRECT
        assert db.get_candidate_files(res.verdict["candidate"]["hash"])["model_new.py"] == candidate()
    again = tools.judge.verify(tools.workspace.root)  # cached by hash: the same judgement, no new evaluation
    assert again.verdict_id == res.data["verdict_id"]


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_a_compile_error_comes_back_with_the_compilers_message(tmp_path, problem):
    tools = make_tools(tmp_path, problem)
    call(tools, "write_file", path="model_new.py", content=candidate("1.0f return"))
    res = call(tools, "compile")
    assert not res.ok and res.text.startswith("build failed") and "error" in res.text, res.text
    assert str(tmp_path) not in res.text


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_a_wrong_candidate_is_incorrect(tmp_path, problem):
    tools = make_tools(tmp_path, problem)
    call(tools, "write_file", path="model_new.py", content=candidate("0.0f"))
    res = call(tools, "verify")
    assert res.verdict["status"] == "incorrect", res.text
    assert "max abs error 1" in res.text and "elements differ" in res.text


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_reference_breakdown_runs_in_a_child_on_the_cpu(problem):
    res = reference_breakdown(problem, device="cpu", timeout_s=JUDGE_TIMEOUT_S)
    assert res["ran"] and res["unit"] == "operator" and res["forwards"] == 3, res
    names = [row[0] for row in res["rows"]]
    assert any("mul" in n for n in names) and any("add" in n for n in names), names
    assert all(0 <= row[3] <= 1 for row in res["rows"]) and len(res["rows"]) <= 15
    assert "reference time by operator" in breakdown_table(res)


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_profile_times_against_baselines_measured_once_and_submit_reuses_the_verdict(tmp_path, problem):
    tools = make_tools(tmp_path, problem, target=100.0)
    call(tools, "write_file", path="model_new.py", content=candidate())
    res = call(tools, "profile")
    assert res.verdict["status"] == "correct", res.text
    assert res.verdict["baseline_source"] == "cached" and res.verdict["runtime_ms"] > 0
    assert "target 100x: not met" in res.text and "reference time by operator" in res.text
    assert res.data["breakdown"]["ran"] and "ncu" not in res.data
    assert tools.judge.ensure_baselines()["eager_ms"] > 0  # measured once, kept
    sub = call(tools, "submit", note="a plain loop")
    assert sub.submitted and sub.data["verdict_id"] == res.data["verdict_id"] and sub.data["note"] == "a plain loop"
    final = tools.judge.final(tools.workspace.root)
    assert final.mode == "final" and final.verdict.policy["seeds"] == "secret"
    assert getattr(final.verdict.baseline_source, "value", None) == "measured"


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_prebuild_fills_the_build_cache(tmp_path, problem):
    judge = Judge(problem, FAST, device="cpu", store=None, record=False)
    folders = []
    for i, bias in enumerate(("3.0f", "4.0f")):
        ws = Workspace(tmp_path / f"b{i}")
        ws.write("model_new.py", candidate(bias))
        folders.append(ws.root)
    judge.prebuild(folders + [tmp_path / "missing"])  # a bad folder is left for the judge to report
    reports = [judge.compile(f) for f in folders]
    assert all(r.ok and r.resources[0]["cached"] for r in reports), reports
    assert judge.store is None and judge.baseline_mode() == "measured"


@needs_gpu()
@pytest.mark.gpu
@pytest.mark.timeout(600)
@pytest.mark.parametrize("size", ["full", "cpu"])
def test_gpu_ncu_profiles_the_candidates_kernel_at_the_verdicts_size(size, tmp_path):
    # the agent's profile tool on a real GPU, confined as the judge's tools are: the shipped CUDA softmax at its full
    # size (its kernel not yet in the session's build cache: built in the tool's own folder), and a built-in problem
    # at its CPU size with the reference as the candidate (torch's softmax kernel)
    if size == "full":
        root = Path(__file__).resolve().parents[1] / "examples" / "cuda" / "softmax"
        problem, cand = load_problem(root / "problem.py"), root
    else:
        from kernelwright.problems.suite import load_suite

        problem = next(e.problem for e in load_suite("builtin") if e.problem.name == "softmax_with_temperature")
        cand = tmp_path / "cand"
        cand.mkdir()
        (cand / "model_new.py").write_text(Path(problem.path).read_text() + "\n\nclass ModelNew(Model):\n    pass\n")
    res = ncu_metrics(problem, cand, device="cuda", timeout_s=300, size=size, sandbox_mode="auto")
    assert res["ran"], res
    assert "note" not in res, res  # the forward completed and ncu reported its kernels
    assert any("softmax" in k["name"].lower() for k in res["kernels"]), res["kernels"]
    assert all(k["duration_ms"] is None or k["duration_ms"] > 0 for k in res["kernels"])
