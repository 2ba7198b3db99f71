"""The offline HTML report of a bench: structure, escaping, offline-only, warnings and null tolerance.

CPU only and fast: the bench is written by hand here, nothing is judged.
"""

from __future__ import annotations

import copy
import sys
import re
from typing import Any

import pytest

from kernelwright.report.formats import fmt_ms, fmt_pct, fmt_x
from kernelwright.report.html import render_report  # imports jinja2 only when it renders

MALICIOUS = "</pre><script>alert(1)</script>"
REFERENCE = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def _metrics(n: int, correct: int) -> dict[str, Any]:
    """One group's metrics, shaped as report.metrics writes them."""
    pass_rate = correct / n
    curve = {"0": 1.0, "0.5": 1.0, "0.8": 1.0, "1": 0.75, "1.2": 0.5, "1.5": 0.5, "2": 0.0}  # share of the correct ones
    scale = {"eager": 1.0, "compile": 0.75, "best": 0.5}
    geo = {"correct": {"value": 1.8, "ci95": [1.4, 2.3], "n": correct}, "all": {"value": 1.3, "ci95": [0.9, 1.9], "n": n}}
    return {"n_problems": n, "n_judged": n - 1, "n_missing": 1, "n_correct": correct, "n_infra_error": 0,
            "status_counts": {"correct": correct, "incorrect": 1, "missing": 1}, "pass_rate": pass_rate,
            "faster_than": {k: {"over_1x": 0.5, "over_5pct": 0.43} for k in ("eager", "compile", "both")},
            "fast_p": {k: {p: pass_rate * (1.0 if p == "0" else c * f) for p, c in curve.items()} for k, f in scale.items()},
            "geomean_speedup": {k: copy.deepcopy(geo) for k in ("eager", "compile", "best")},
            "n_missing_baseline": {"eager": 0, "compile": 1}}


def _verdict(status: str, runtime: float | None, speedup: float | None, log: str = "") -> dict[str, Any]:
    """A judge verdict with the keys the report reads."""
    return {"status": status, "runtime_ms": runtime, "eager_ms": 0.5, "compile_ms": 0.4, "baseline_source": "measured",
            "speedup_vs_eager": None if runtime is None else 0.5 / runtime,
            "speedup_vs_compile": None if runtime is None else 0.4 / runtime, "speedup_vs_best": speedup,
            "max_abs_error": 1.2e-6, "max_rel_error": 0.01, "floor_ms": 0.05, "efficiency": 0.4, "build_s": 1.5,
            "guards": [{"name": "physics_floor", "fired": status == "rejected", "detail": "too fast"}],
            "static_findings": [{"rule": "torch_op", "file": "model_new.py", "line": 3, "detail": "torch.relu"}],
            "steps": [{"name": "l2_flush", "ran": True, "reason": ""}, {"name": "ncu", "ran": False, "reason": "not on a GPU"}],
            "timing": None if runtime is None else {"n": 200, "median_ms": runtime, "iqr_ms": 0.002, "wall_ms": None},
            "resources": {"registers": 32, "shared_bytes": 0, "spills": 0}, "log": log, "system": {"gpu": "NVIDIA H200"},
            "sanitizer": {"ran": True, "reason": "", "tools": [{"tool": "memcheck", "errors": 0, "findings": []}]},
            "candidate": {"hash": "c0ffee", "build_path": "load_inline"}, "problem": {"name": "x", "hash": "h"},
            "created_at": "2026-12-01T09:00:00Z"}


def _problem(name: str, level: int, status: str, verdict: dict | None, source: str | None = None,
             run: dict | None = None) -> dict[str, Any]:
    solution = None if source is None else {
        "source": "path", "ref": f"benchmarks/solutions/h200/{name}.py", "main": "model_new.py",
        "files": {"model_new.py": source, "kernels/x.cu": "__global__ void k() {}\n"}}
    return {"name": name, "spec": f"builtin:{name}", "level": level, "category": "activation", "problem_hash": "sha256:ab",
            "reference_source": REFERENCE, "solution": solution, "status": status, "verdict": verdict,
            "verdict_id": None if verdict is None else f"v-{name}", "run": run}


def _run() -> dict[str, Any]:
    rounds = [(0, 4, 2, 1.05, 1.05), (1, 4, 3, 0.9, 1.05), (2, 4, 4, 1.4, 1.4)]
    return {"id": "run-1a2b3c4d", "status": "finished", "strategy": "tree", "model": "openai:x",
            "progress": [{"round": r, "label": f"r{r}", "candidates": c, "correct": k, "best_speedup_vs_best": b,
                          "best_so_far": s} for r, c, k, b, s in rounds]}


def sample_bench() -> dict[str, Any]:
    """Four problems on levels 1 and 2: two correct, one incorrect with a log, one missing."""
    fast = REFERENCE.replace("torch.relu(x)", "relu_cuda(x)")
    problems = [
        _problem("gelu_tanh_approx", 1, "correct", _verdict("correct", 0.25, 1.6), fast, _run()),
        _problem("softmax", 1, "correct", _verdict("correct", 0.5, 0.8), MALICIOUS),
        _problem("conv_bias_relu", 2, "incorrect", _verdict("incorrect", None, None, "1024 of 4096 elements differ"), fast),
        _problem("layernorm_gelu", 2, "missing", None),
    ]
    return {"kind": "kernelwright.bench", "schema_version": 1, "created_at": "2026-12-01T09:00:00Z", "suite": "builtin:1",
            "solutions": ["benchmarks/solutions/h200", "run-1a2b3c4d"], "device": "cuda",
            "system": {"gpu": "NVIDIA H200", "driver": "580.1", "cuda": "13.0", "torch": "2.11.0", "python": "3.11.9",
                       "kernelwright": "0.1.0", "commit": "abc1234"},
            "policy": {"precision": "fp32", "preset": None, "n_seeds": 3, "baselines": "measured", "compile_mode": "default",
                       "libraries": [], "allow_torch_compute": False, "timing": {"min_runs": 20}},
            "bootstrap": {"resamples": 10000, "seed": 0, "confidence": 0.95}, "problems": problems,
            "metrics": {"overall": _metrics(4, 2), "levels": {"1": _metrics(2, 2), "2": _metrics(2, 0)}}}


@pytest.fixture(scope="module")
def jinja2() -> Any:
    """The template engine (the report extra): a test that renders skips without it; the test of the
    missing-package message and the formats run either way."""
    return pytest.importorskip("jinja2")


@pytest.fixture(scope="module")
def page(jinja2: Any) -> str:
    return render_report(sample_bench())


def test_document_has_every_section_in_order(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>")
    marks = ['id="header"', 'id="summary"', 'id="fast-p"', 'id="distribution"', 'id="problems"', 'id="details"',
             'id="runs"', 'id="footer"']
    positions = [page.index(m) for m in marks]
    assert positions == sorted(positions)
    assert "fast_p" in page and page.count("<svg") >= 2


def test_problems_statuses_and_numbers(page: str) -> None:
    for name in ("gelu_tanh_approx", "softmax", "conv_bias_relu", "layernorm_gelu"):
        assert name in page and f'href="#p-{name}"' in page and f'id="p-{name}"' in page
    for status in ("correct", "incorrect", "missing"):
        assert f">{status}<" in page
    assert "50.0%" in page  # overall pass rate 2/4
    assert "50.0% / 43.0%" in page  # faster than: over 1x / t < 0.95 t0
    assert "1.800x <small>[1.400x, 2.300x] n=2</small>" in page
    assert "no solution found" in page
    assert "1024 of 4096 elements differ" in page  # the incorrect one's log
    assert "ncu" in page and "not on a GPU" in page  # a step that did not run, with its reason
    assert "10000 resamples, seed 0, 95% confidence" in page


def test_rows_sorted_by_level_then_name(page: str) -> None:
    table = page[page.index('id="problem-table"'):page.index('id="details"')]
    names = re.findall(r'<a href="#p-([a-z_]+)">', table)
    assert names == ["gelu_tanh_approx", "softmax", "conv_bias_relu", "layernorm_gelu"]


def test_diff_against_the_reference(page: str) -> None:
    assert '<span class="del">-        return torch.relu(x)</span>' in page
    assert '<span class="add">+        return relu_cuda(x)</span>' in page
    assert "+++ model_new.py" in page and 'class="hunk"' in page


def test_offline_only(page: str) -> None:
    assert "http://" not in page and "https://" not in page
    assert "<script src" not in page and "<link" not in page


def test_untrusted_source_is_escaped(page: str) -> None:
    assert MALICIOUS not in page
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_run_progress(page: str) -> None:
    runs = page[page.index('id="runs"'):page.index('id="footer"')]
    assert "run-1a2b3c4d" in runs and "<svg" in runs and "1.400x" in runs
    assert "no agent runs in this bench" not in page


@pytest.mark.usefixtures("jinja2")
def test_untrusted_problem_name_is_escaped_in_tables_and_charts() -> None:
    bench = sample_bench()
    bad = "<img src=x onerror=alert(1)>"
    bench["problems"][0]["name"] = bad  # a correct problem with a run: it reaches the strip chart and the run chart
    page = render_report(bench)
    assert bad not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert 'id="p-img-src-x-onerror-alert-1"' in page


@pytest.mark.usefixtures("jinja2")
def test_cpu_bench_warns_and_no_runs_said() -> None:
    bench = sample_bench()
    bench["device"], bench["system"]["gpu"] = "cpu", None
    for p in bench["problems"]:
        p["run"] = None
    page = render_report(bench)
    assert "CPU times check the flow and are never claims" in page
    assert "no agent runs in this bench" in page


def test_gpu_bench_has_no_cpu_warning(page: str) -> None:
    assert "never claims" not in page


@pytest.mark.usefixtures("jinja2")
def test_incomplete_bench_says_so() -> None:
    bench = sample_bench()
    bench.update(complete=False, pending=["layernorm_gelu"])
    bench["problems"][3]["note"] = "no solution found in benchmarks/solutions/h200"
    page = render_report(bench)
    assert "This bench is incomplete" in page and "Not judged yet: layernorm_gelu." in page
    assert "note: no solution found in benchmarks/solutions/h200" in page


@pytest.mark.usefixtures("jinja2")
def test_preset_is_stated() -> None:
    bench = sample_bench()
    bench["policy"]["preset"] = "kernelbench"
    assert "preset kernelbench: the verdicts follow that preset&#39;s settings" in render_report(bench)


@pytest.mark.usefixtures("jinja2")
def test_nulls_everywhere_do_not_crash() -> None:
    bench = sample_bench()
    bench["system"] = {k: None for k in bench["system"]}
    bench["policy"] = None
    bench["bootstrap"] = None
    for p in bench["problems"]:
        p.update(verdict=None, level=None, category=None, reference_source=None)
    bench["problems"][0]["run"]["progress"] = [{"round": None, "best_so_far": None}]
    bench["problems"][1]["solution"] = {"source": None, "ref": None, "main": None, "files": None}
    nulled = {"value": None, "ci95": None, "n": 0}
    for m in [bench["metrics"]["overall"], *bench["metrics"]["levels"].values()]:
        for key in ("pass_rate", "n_correct", "faster_than", "fast_p"):
            m[key] = None
        m["geomean_speedup"]["best"] = {"correct": nulled, "all": nulled}
    page = render_report(bench)
    assert page.startswith("<!DOCTYPE html>") and "CPU times check the flow" in page
    assert render_report({}).startswith("<!DOCTYPE html>")


def test_formats() -> None:
    assert (fmt_ms(0.123456), fmt_ms(12.3456), fmt_ms(None)) == ("0.1235", "12.35", "–")
    assert (fmt_x(1.2341), fmt_pct(0.71428), fmt_pct(float("nan"))) == ("1.234x", "71.4%", "–")


def test_missing_jinja2_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import jinja2 now raises ImportError, installed or not
    with pytest.raises(ImportError, match=r"pip install -e '\.\[report\]'"):
        render_report(sample_bench())
