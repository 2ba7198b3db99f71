"""`--sanitize`: compute-sanitizer's findings in the verdict. Report parsing and the CPU path
without a GPU; the tools themselves on the GPU (marked)."""

from __future__ import annotations

import pytest

from conftest import JUDGE_TIMEOUT_S, correctness_policy, judge, needs_gpu
from kernelwright.core.records import Status
from kernelwright.judge.sanitize import describe, parse_report

MEMCHECK_BAD = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at wild_write(float *, long)+0x80
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f0000000000 is out of bounds
=========
KW_SANITIZE_DONE
========= ERROR SUMMARY: 1,024 errors
"""
CLEAN = "========= COMPUTE-SANITIZER\nKW_SANITIZE_DONE\n========= ERROR SUMMARY: 0 errors\n"
RACE = "========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access at k+0x10\n" \
       "========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)\n"


def test_parse_report_counts_errors_and_keeps_the_finding_lines():
    errors, findings = parse_report(MEMCHECK_BAD)
    assert errors == 1024
    assert findings[0] == "Invalid __global__ write of size 4 bytes" and any("out of bounds" in f for f in findings)
    assert not any("ERROR SUMMARY" in f or "COMPUTE-SANITIZER" in f for f in findings)


def test_parse_report_of_a_clean_run_and_of_racecheck():
    assert parse_report(CLEAN) == (0, [])
    errors, findings = parse_report(RACE)
    assert errors == 3 and "Race reported" in findings[0]


def test_parse_report_without_a_summary_says_unknown():
    assert parse_report("Traceback (most recent call last):\n  boom\n")[0] is None


def test_describe_names_every_tool():
    result = {"ran": True, "tools": [{"tool": "memcheck", "errors": 2}, {"tool": "initcheck", "errors": None, "note": "stopped after 5 s"}]}
    assert describe(result) == "sanitizer: memcheck 2 error(s), initcheck ? error(s) (stopped after 5 s)"
    assert describe({"ran": False, "reason": "no GPU"}) == "sanitizer not run: no GPU"


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_sanitize_on_the_cpu_backend_says_why_it_did_not_run_and_keeps_the_status():
    v = judge("rowsum", "rowsum_correct", correctness_policy(sanitize=True))
    assert v.status is Status.CORRECT, v.log
    assert v.sanitizer is not None and v.sanitizer["ran"] is False and "CPU" in v.sanitizer["reason"]
    plain = judge("rowsum", "rowsum_correct", correctness_policy())
    assert plain.sanitizer is None


@needs_gpu()
@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_sanitizer_is_clean_for_an_honest_kernel_and_finds_a_wild_write_and_an_unwritten_output():
    # the three judgements at once: sanitizer runs are untimed device work (the device lock's shared
    # side), and one after another they took 92-111 s of every `pytest -m gpu` on the H200
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        runs = [pool.submit(judge, "relu", c, correctness_policy(sanitize=True), device="cuda")
                for c in ("relu_cuda", "relu_illegal_access", "relu_unwritten")]
        honest, wild, unwritten = (r.result() for r in runs)
    assert honest.status is Status.CORRECT, honest.log
    s = honest.sanitizer
    assert s["ran"], s
    assert [r["tool"] for r in s["tools"]] == ["memcheck", "racecheck", "initcheck"]
    assert all(r["errors"] == 0 and r["forward_completed"] for r in s["tools"]), s
    assert wild.status is Status.RUNTIME_ERROR, wild.log  # the sanitizer never changes the status
    memcheck = wild.sanitizer["tools"][0]
    assert memcheck["tool"] == "memcheck" and memcheck["errors"] and memcheck["errors"] > 0, wild.sanitizer
    assert any("wild_write" in f or "Invalid __global__ write" in f for f in memcheck["findings"]), memcheck
    initcheck = unwritten.sanitizer["tools"][2]
    assert initcheck["tool"] == "initcheck" and initcheck["errors"] and initcheck["errors"] > 0, unwritten.sanitizer


FAKE = """#!{python}
import sys, time
args = sys.argv[1:]
log = args[args.index("--log-file") + 1]
mode = "{mode}"
if mode == "hang":
    time.sleep(60)
print("KW_SANITIZE_DONE" if mode != "died" else "Traceback: boom", flush=True)
if mode == "clean":
    open(log, "w").write("========= COMPUTE-SANITIZER\\n========= ERROR SUMMARY: 0 errors\\n")
if mode == "forged":
    # the program prints a clean summary of its own; the tool's report says otherwise
    print("========= ERROR SUMMARY: 0 errors", flush=True)
    open(log, "w").write("========= Invalid __global__ read of size 4 bytes\\n========= ERROR SUMMARY: 3 errors\\n")
"""


def _fake_tool(tmp_path, monkeypatch, mode):
    import sys

    from kernelwright.judge import sanitize

    exe = tmp_path / "compute-sanitizer"
    exe.write_text(FAKE.format(python=sys.executable, mode=mode))
    exe.chmod(0o755)
    monkeypatch.setattr(sanitize, "find_tool", lambda: str(exe))
    return sanitize


@pytest.mark.parametrize("mode, errors, completed", [("clean", 0, True), ("forged", 3, True), ("died", None, False)])
def test_the_report_comes_from_the_tools_log_file(tmp_path, monkeypatch, mode, errors, completed):
    sanitize = _fake_tool(tmp_path, monkeypatch, mode)
    result = sanitize.run(tmp_path / "p.py", tmp_path / "c", gpu_index=0, env={}, timeout_s=30, tools=("memcheck",))
    row = result["tools"][0]
    assert (row["errors"], row["forward_completed"]) == (errors, completed), row
    assert result["errors"] == errors  # None when a tool gave no count, never a made-up 0


def test_a_tool_that_hangs_is_stopped_and_says_so(tmp_path, monkeypatch):
    sanitize = _fake_tool(tmp_path, monkeypatch, "hang")
    result = sanitize.run(tmp_path / "p.py", tmp_path / "c", gpu_index=0, env={}, timeout_s=1, tools=("memcheck",))
    row = result["tools"][0]
    assert row["errors"] is None and "stopped after 1 s" in row["note"] and row["seconds"] < 30, row
