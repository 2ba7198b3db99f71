"""Synthesis: the registry, composition, the runtime proxy, every filter (a task it rejects and an
honest one it keeps), selection, resume, the CLI and the LLM composer (a scripted local server)."""

from __future__ import annotations

import json
import os
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from kernelwright.synth import compose as C  # noqa: E402
from kernelwright.synth import ops  # noqa: E402
from kernelwright.synth.cost import fit, load_calibration, measure, spearman  # noqa: E402
from kernelwright.synth.filters import examine  # noqa: E402
from kernelwright.synth.pipeline import SynthConfig, run_synth  # noqa: E402

pytestmark = pytest.mark.timeout(240)

HONEST = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.gelu(self.linear(x))


batch_size = 8
in_features = 64
out_features = 32


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

WIDE = [1e-9, 1e9]  # a window every tiny test task fits


def _ctx(**over):
    ctx = {"device": "cpu", "calibration": load_calibration(), "against": {}, "threshold": 0.9, "atol": 1e-4, "rtol": 1e-4,
           "backend": "aot_eager"}
    ctx.update(over)
    return ctx


def _judge(source: str, ctx=None, window=WIDE):
    return examine({"index": 0, "seed": 0, "window": window, "source": source, "task": {"id": "t", "name": "t"}}, ctx or _ctx())


# ---------------------------------------------------------------- registry and composition

def test_unary_functionals_are_deterministic_and_shape_keeping():
    names = ops.unary_functionals()
    assert {"relu", "silu", "mish", "hardswish"} <= set(names)
    assert not any(bad in n for n in names for bad in ("dropout", "rrelu", "gumbel", "softmax", "glu"))
    x = torch.randn(3, 5)
    for n in names:
        f = getattr(torch.nn.functional, n)
        assert f(x).shape == x.shape and torch.equal(f(x), f(x))


def test_compose_is_seeded_and_renders_kernelbench_format():
    a, b = C.compose(7, 3), C.compose(7, 3)
    assert a is not None and a.render(16) == b.render(16)
    from kernelwright.problems.similarity import tokens
    assert len({tuple(tokens(C.compose(7, i).render(16))) for i in range(20)}) >= 15  # different programs, not only sizes
    src = a.render(16)
    ns: dict = {}
    exec(compile(src, "t", "exec"), ns)  # noqa: S102 - our own composer's output, in the test process
    assert {"Model", "get_inputs", "get_init_inputs"} <= set(ns) and ns["batch_size"] == 16
    small = a.render(16, "small")
    assert "batch_size = 2" in small
    # the same program at another scale: only numbers differ
    assert tokens(small) == tokens(src)
    with pytest.raises(ValueError, match="scale"):
        a.render(1, "tiny")


def test_every_registry_operator_is_reachable_and_counts_follow_weights(monkeypatch):
    made, seen, counts = {}, set(), {}  # made: id of each step drawn -> (its registry entry, the step, kept alive)

    def counted(name, fn):
        def wrapper(rng, act, names):
            step = fn(rng, act, names)
            if step is not None:
                made[id(step)] = (name, step)
            return step
        return wrapper

    def renamed(step, *args, rename=C._rename):
        out = rename(step, *args)
        made[id(out)] = made[id(step)]
        return out

    for name, fn in list(ops.REGISTRY.items()):
        monkeypatch.setitem(ops.REGISTRY, name, counted(name, fn))
    monkeypatch.setattr(C, "_rename", renamed)
    for i in range(400):
        spec = C.compose(0, i)
        assert spec is not None
        seen |= {made[id(step)][0] for step in spec.steps}
        counts[len(spec.steps)] = counts.get(len(spec.steps), 0) + 1
    assert set(ops.REGISTRY) - seen == set()  # every registry entry is in some composed task
    assert set(counts) == {1, 2, 3, 4, 5} and counts[2] == max(counts.values())
    only_two = C.compose(0, 0, {2: 1.0})
    assert len(only_two.steps) == 2


def test_shape_rules_agree_with_torch_at_both_scales():
    for i in range(60):
        spec = C.compose(11, i)
        for scale, want in (("full", (3,) + spec.out.full[1:]), ("small", spec.out.small)):
            ns: dict = {}
            exec(compile(spec.render(3, scale), "t", "exec"), ns)  # noqa: S102
            with torch.device("meta"):
                model = ns["Model"](*ns["get_init_inputs"]()).eval()
                out = model(*ns["get_inputs"]())
            assert tuple(out.shape) == tuple(want), (i, scale, spec.name)


# ---------------------------------------------------------------- the runtime proxy

def test_proxy_counts_flops_and_bytes_of_a_linear():
    with torch.device("meta"):
        model = torch.nn.Linear(256, 128, bias=False)
        x = torch.randn(64, 256)
    cost, outs = measure(model, [x])
    assert cost.flops == 2 * 64 * 256 * 128
    assert cost.bytes >= 4 * (64 * 256 + 256 * 128 + 64 * 128)
    assert cost.kernels >= 1 and cost.proxy_ms > 0 and outs[0].shape == (64, 128)


def test_transposed_3d_convolutions_have_a_class_of_their_own():
    with torch.device("meta"):
        x = torch.randn(2, 4, 6, 6, 6)
        deconv, conv, deconv2d = torch.nn.ConvTranspose3d(4, 8, 3), torch.nn.Conv3d(4, 8, 3), torch.nn.ConvTranspose2d(4, 8, 3)
    parts = lambda model, inp: {k: v for k, v in measure(model, [inp])[0].parts if v > 0}  # noqa: E731
    assert "deconv3d" in parts(deconv, x) and "conv" not in parts(deconv, x)
    assert "conv" in parts(conv, x) and "deconv3d" not in parts(conv, x)
    assert "conv" in parts(deconv2d, x[:, :, 0]) and "deconv3d" not in parts(deconv2d, x[:, :, 0])


def test_sizing_meets_the_target_at_the_chosen_batch():
    """The batch is the smallest whose calibrated proxy, measured at that batch, reaches the target
    (weights and launches do not grow with the batch, so a cost at batch 1 scaled up misjudges it)."""
    from kernelwright.synth.filters import _calibrated, _meta_cost, _size, max_batch, size_target

    ctx, window = {"calibration": load_calibration()}, (1.0, 100.0)
    checked = 0
    for i in range(200):
        spec = C.compose(0, i)
        batch, cost = _size(spec, {"window": window}, ctx)
        if batch == max_batch(_meta_cost(spec.render(1), None)):
            continue  # the caps stopped the batch below the target
        assert _calibrated(cost, ctx) >= size_target(0, i, window), (i, spec.ops, batch)
        if batch > 1:
            assert _calibrated(_meta_cost(spec.render(batch - 1), None), ctx) < size_target(0, i, window), (i, spec.ops, batch)
        checked += 1
    assert checked >= 40, checked


def test_calibration_fit_and_rank_correlation():
    proxy = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    measured = [math.exp(0.3 + 0.8 * math.log(p)) for p in proxy]
    f = fit(proxy, measured)
    assert f["slope"] == pytest.approx(0.8) and f["intercept"] == pytest.approx(0.3) and f["spearman"] == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) > 0.9
    with pytest.raises(ValueError, match="at least 3"):
        fit([1.0], [1.0])


# ---------------------------------------------------------------- each filter: a task it rejects, an honest one it keeps

def test_honest_task_passes_every_filter():
    r = _judge(HONEST)
    assert r["status"] == "accepted", r["reason"]
    assert set(r["seconds"]) >= {"shape", "runtime", "contaminated", "eager", "deterministic", "compile", "degenerate"}
    assert r["task"]["flops"] == 2 * 8 * 64 * 32 and r["task"]["proxy_ms"] > 0


def test_shape_stage_rejects_a_model_that_fails_on_meta_tensors():
    bad = HONEST.replace("return F.gelu(self.linear(x))", "return F.gelu(self.linear(x)) * float(x.sum().item() > 0)")
    r = _judge(bad)
    assert r["stage"] == "shape", r


def test_runtime_window_rejects_a_task_outside_it():
    r = _judge(HONEST, window=[50.0, 100.0])
    assert r["stage"] == "runtime" and "outside" in r["reason"]


def test_contamination_rejects_a_copy_of_a_benchmark_program():
    from kernelwright.problems.similarity import tokens

    renamed = HONEST.replace("in_features", "n_in").replace("out_features", "n_out").replace("= 8", "= 128")
    r = _judge(renamed, _ctx(against={"bench/gelu_linear": tokens(HONEST)}))
    assert r["stage"] == "contaminated" and r["task"]["contamination"][0]["reference"] == "bench/gelu_linear"
    from kernelwright.problems.suite import builtin_problem

    other = builtin_problem("conv2d_batchnorm_relu").problem.source
    far = _judge(HONEST, _ctx(against={"bench/other": tokens(other)}))
    assert far["status"] == "accepted", far["reason"]


def test_eager_stage_rejects_a_model_that_crashes():
    r = _judge(HONEST.replace("return F.gelu(self.linear(x))", "return self.linear(x.t())"))
    assert r["stage"] in ("shape", "eager")
    # meta tensors pass but the real forward fails: a Cholesky factorisation of a matrix that is not positive definite
    r = _judge(HONEST.replace("return F.gelu(self.linear(x))", "return torch.linalg.cholesky(x[:, :8].T @ x[:, :8] - 100 * torch.eye(8, device=x.device))"))
    assert r["stage"] == "eager", r


def test_determinism_rejects_a_forward_that_draws_random_numbers():
    r = _judge(HONEST.replace("return F.gelu(self.linear(x))", "return F.gelu(self.linear(x)) + torch.rand_like(self.linear(x))"))
    assert r["stage"] == "deterministic", r


def test_compile_stage_rejects_a_compiled_model_that_disagrees():
    def wrong_backend(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return [o * 1.01 for o in out] if isinstance(out, (list, tuple)) else out * 1.01
        return run

    r = _judge(HONEST, _ctx(backend=wrong_backend))
    assert r["stage"] == "compile" and "disagrees" in r["reason"]


def test_degeneracy_gate_rejects_relu_of_positive_inputs():
    relu = HONEST.replace("return F.gelu(self.linear(x))", "return torch.relu(x)").replace("torch.randn(", "torch.rand(")
    r = _judge(relu)
    assert r["stage"] == "degenerate" and "input unchanged" in r["reason"]


# ---------------------------------------------------------------- the pipeline

def _run(tmp: Path, name: str, **kw) -> dict:
    cfg = dict(n=5, out=tmp / name, seed=5, workers=2, timeout_s=120)
    cfg.update(kw)
    return run_synth(SynthConfig(**cfg))


@pytest.mark.slow
def test_seeded_order_independent_and_resumable(tmp_path):
    two = _run(tmp_path, "two")
    _run(tmp_path, "one", workers=1)
    ids = lambda name: [json.loads(line)["hash"] for line in (tmp_path / name / "tasks.jsonl").read_text().splitlines()]  # noqa: E731
    assert two["n_accepted"] == 5 and ids("two") == ids("one")
    # a shorter run, then a resume to the full count, gives the same set
    _run(tmp_path, "resumed", n=3)
    with pytest.raises(ValueError, match="--resume"):
        _run(tmp_path, "resumed")
    with pytest.raises(ValueError, match="other settings"):
        _run(tmp_path, "resumed", seed=6, resume=True)
    log = tmp_path / "resumed" / "candidates.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:2]))  # as if it had crashed after two results
    before = [json.loads(line)["index"] for line in log.read_text().splitlines()]
    _run(tmp_path, "resumed", resume=True)
    assert ids("resumed") == ids("two")
    after = [json.loads(line)["index"] for line in (tmp_path / "resumed" / "candidates.jsonl").read_text().splitlines()]
    assert after[:len(before)] == before and len(after) == len(set(after)) > len(before)  # the resume examined only what was missing
    report = json.loads((tmp_path / "two" / "report.json").read_text())
    stages = [s["stage"] for s in report["stages"]]
    assert stages[:3] == ["compose", "shape", "runtime"] and stages[-1] == "duplicate"
    assert sum(report["n_ops_histogram"].values()) == 5 and report["decontamination"]["n_references"] > 50
    try:
        import pyarrow.parquet as pq
    except ModuleNotFoundError:  # the synth extra is missing: the run said it skipped train.parquet (tested below)
        assert not (tmp_path / "two" / "train.parquet").exists()
    else:
        assert pq.read_table(tmp_path / "two" / "train.parquet").num_rows == 5


@pytest.mark.slow
def test_refilter_removes_duplicates_and_reports_contamination(tmp_path):
    src = tmp_path / "given"
    src.mkdir()
    tasks = []
    for i, text in enumerate([HONEST, HONEST.replace("= 8", "= 16"), HONEST]):
        tasks.append({"id": f"g{i}", "index": i, "name": f"g{i}", "ops": ["linear"], "n_ops": 1, "level": 1, "source": text,
                      "hash": f"{i}", "seed": 0, "proxy_ms": None, "measured_ms": None, "device": "cpu"})
    (src / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "copy.py").write_text(HONEST.replace("F.gelu", "F.silu"))
    report = _run(tmp_path, "re", n=3, source=src, window_ms=tuple(WIDE), against=(str(folder),), threshold=0.999)
    assert report["n_accepted"] == 1
    assert [d["of"] for d in report["duplicates"]] == ["g0", "g0"]  # the same program, and the same up to its sizes
    report = _run(tmp_path, "re2", n=3, source=src, window_ms=tuple(WIDE), against=(str(folder),), threshold=0.9)
    assert report["decontamination"]["n_contaminated"] == 3 and report["n_accepted"] == 0
    assert report["decontamination"]["pairs"][0]["matches"][0]["reference"].endswith("copy.py")


def test_config_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="n must be at least 1"):
        SynthConfig(n=0, out=tmp_path)
    with pytest.raises(ValueError, match="window"):
        SynthConfig(n=1, out=tmp_path, window_ms=(5.0, 1.0))
    with pytest.raises(ValueError, match="device"):
        SynthConfig(n=1, out=tmp_path, device="tpu")
    with pytest.raises(ValueError, match="weights"):
        SynthConfig(n=1, out=tmp_path, weights={7: 1.0})


def test_cli_usage_errors(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "kernelwright", "synth", *args], capture_output=True, text=True, timeout=120)
    r = cli("--n", "0", "--out", str(tmp_path / "x"), "--device", "cpu")
    assert r.returncode == 2 and "n must be at least 1" in r.stderr
    r = cli("--n", "1", "--from", str(tmp_path / "nothing"), "--device", "cpu")
    assert r.returncode == 2 and "tasks.jsonl" in r.stderr
    r = cli("--n", "1", "--op-weights", "2=1", "--device", "cpu")
    assert r.returncode == 2 and "COUNT:WEIGHT" in r.stderr


# ---------------------------------------------------------------- the LLM composer (scripted local server, no LLM)

@pytest.mark.slow
def test_llm_composer_through_a_scripted_server(tmp_path):
    from kernelwright.llm.backend import make_backend
    from kernelwright.llm.scripted import ScriptedServer
    from kernelwright.synth.llm_composer import LLMComposer, program_of

    assert program_of("no code here")[0] is None
    assert "lacks" in program_of("```python\nx = 1\n```")[1]
    script = [{"text": "I would rather not."}, {"text": "```python\n" + HONEST + "```"}]
    with ScriptedServer(script) as server:
        composer = LLMComposer(make_backend("openai:scripted", base_url=server.url), window_ms=tuple(WIDE))
        report = run_synth(SynthConfig(n=1, out=tmp_path / "llm", seed=2, workers=1, window_ms=tuple(WIDE), composer="openai:scripted",
                                       max_candidates=2), composer=composer)
        prompts = [r["messages"][-1]["content"] for r in server.requests]
    assert report["n_accepted"] == 1
    assert "applies these operators in this order" in prompts[0] and C.compose(2, 0).steps[0].label in prompts[0]
    rows = [json.loads(line) for line in (tmp_path / "llm" / "candidates.jsonl").read_text().splitlines()]
    assert rows[0]["stage"] == "compose" and "no python block" in rows[0]["reason"]
    task = json.loads((tmp_path / "llm" / "tasks.jsonl").read_text().splitlines()[0])
    assert task["source"] == HONEST and task["composer"] == "openai:scripted"


@pytest.mark.slow
def test_timed_phase_measures_survivors_alone(tmp_path):
    """The GPU's two phases (parallel checks, then timing by one worker), run on the CPU's host clock."""
    src = tmp_path / "given"
    src.mkdir()
    degenerate = HONEST.replace("return F.gelu(self.linear(x))", "return torch.relu(x)").replace("torch.randn(", "torch.rand(")
    tasks = [{"id": f"g{i}", "index": i, "name": f"g{i}", "ops": ["x"], "n_ops": 1, "level": 1, "source": text, "hash": str(i),
              "seed": 0, "proxy_ms": 1.0, "proxy_raw_ms": 1.0, "measured_ms": None, "device": "cpu"}
             for i, text in enumerate([HONEST, degenerate, HONEST.replace("F.gelu", "F.silu")])]
    (src / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    report = _run(tmp_path, "timed", n=3, source=src, window_ms=tuple(WIDE), timed=True, dedup_threshold=0.999999)
    assert report["n_accepted"] == 2 and report["runtime_ms"]["source"] == "measured eager on cpu"
    rows = [json.loads(line) for line in (tmp_path / "timed" / "candidates.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows].count("time") == 2 and all(r["task"]["measured_ms"] > 0 for r in rows if r["phase"] == "time")
    assert [s["stage"] for s in report["stages"]][-2:] == ["runtime", "duplicate"]
    stage = {s["stage"]: s for s in report["stages"]}
    assert stage["degenerate"]["rejected"] == 1 and stage["runtime"]["entered"] == 2 and stage["compile"]["worker_seconds"] > 0
    narrow = _run(tmp_path, "narrow", n=3, source=src, window_ms=(1e4, 1e5), timed=True)
    assert narrow["n_accepted"] == 0 and {s["stage"]: s["rejected"] for s in narrow["stages"]}["runtime"] == 2


@pytest.mark.slow
def test_machine_errors_are_retried_once_and_kept_outside_the_funnel(tmp_path):
    src = tmp_path / "given"
    src.mkdir()
    oom = HONEST.replace("return F.gelu(self.linear(x))", 'raise RuntimeError("CUDA out of memory (simulated)")')
    tasks = [{"id": f"g{i}", "index": i, "name": f"g{i}", "ops": ["x"], "n_ops": 1, "level": 1, "source": text, "hash": str(i),
              "seed": 0, "proxy_ms": 1.0, "proxy_raw_ms": 1.0, "measured_ms": None, "device": "cpu"}
             for i, text in enumerate([oom, HONEST])]
    (src / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    report = _run(tmp_path, "oom", n=2, source=src, window_ms=tuple(WIDE))
    rows = [json.loads(line) for line in (tmp_path / "oom" / "candidates.jsonl").read_text().splitlines()]
    assert [(r["index"], r["stage"], r["retry"]) for r in rows if r["index"] == 0] == [(0, "error", False), (0, "error", True)]
    assert report["n_accepted"] == 1 and report["infrastructure"]["counts"]["error"] == 1 and report["infrastructure"]["retried"] == 1
    assert report["stages"][0]["entered"] == 1  # the machine's failure is not a filter's rejection


def test_the_committed_cpu_run_is_reproduced_by_its_seed():
    """benchmarks/results/synth_cpu_s0 holds the first tasks of `synth --n 1000 --seed 0`: the composer
    and the batch recorded give back each source byte for byte."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "synth_cpu_s0" / "tasks.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()[:40]]
    for row in rows:
        spec = C.compose(row["seed"], row["index"])
        assert spec.render(row["batch"]) == row["source"] and spec.render(row["batch"], "small") == row["check_source"], row["id"]


def _given(tmp_path: Path, sources: list[str]) -> Path:
    src = tmp_path / "given"
    src.mkdir(exist_ok=True)
    tasks = [{"id": f"g{i}", "index": i, "name": f"g{i}", "ops": ["x"], "n_ops": 1, "level": 1, "source": text, "hash": str(i),
              "seed": 0, "proxy_ms": 1.0, "proxy_raw_ms": 1.0, "measured_ms": None, "device": "cpu"} for i, text in enumerate(sources)]
    (src / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    return src


# the forward fails with a (simulated) out-of-memory while it is timed, the first time only
OOM_WHEN_TIMED = HONEST.replace("    def forward(self, x):\n", """    def forward(self, x):
        import os, sys
        frame, timed = sys._getframe(), False
        while frame is not None:
            timed, frame = timed or frame.f_code.co_name == "_time_eager", frame.f_back
        if timed and not os.path.exists(MARKER):
            open(MARKER, "w").close()
            raise RuntimeError("CUDA out of memory (simulated, while timed)")
""")


@pytest.mark.slow
def test_a_machine_error_while_timed_is_timed_again(tmp_path):
    """On a GPU a timing can run out of memory too: it is timed once more (its checks passed), and
    selection goes on past it instead of waiting for it for good."""
    marker = tmp_path / "timed-once"
    flaky = f"MARKER = {str(marker)!r}\n" + OOM_WHEN_TIMED
    src = _given(tmp_path, [HONEST, flaky.replace("F.gelu", "F.silu"), HONEST.replace("F.gelu", "F.mish")])
    # the task leaves a marker outside its folder: only without the workers' sandbox (its own test below)
    report = _run(tmp_path, "timed-oom", n=3, source=src, window_ms=tuple(WIDE), timed=True, dedup_threshold=0.999999, sandbox="off")
    rows = [json.loads(line) for line in (tmp_path / "timed-oom" / "candidates.jsonl").read_text().splitlines()]
    of_1 = [(r["phase"], r["stage"], r["retry"]) for r in rows if r["index"] == 1]
    assert of_1 == [("check", None, False), ("time", "error", False), ("time", None, True)], of_1
    assert marker.exists() and report["n_accepted"] == 3 and report["infrastructure"]["retried"] == 1


@pytest.mark.slow
def test_a_resumed_machine_error_is_tried_once_more_not_twice(tmp_path):
    oom = HONEST.replace("return F.gelu(self.linear(x))", 'raise RuntimeError("CUDA out of memory (simulated)")')
    src = _given(tmp_path, [oom, HONEST, HONEST.replace("F.gelu", "F.silu")])
    kw = dict(n=2, source=src, window_ms=tuple(WIDE), dedup_threshold=0.999999)
    _run(tmp_path, "cut", **kw)
    log = tmp_path / "cut" / "candidates.jsonl"
    first = [line for line in log.read_text().splitlines() if json.loads(line)["index"] == 0][:1]
    log.write_text(first[0] + "\n")  # the run stopped right after index 0's first try
    report = _run(tmp_path, "cut", resume=True, **kw)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["stage"], r["retry"]) for r in rows if r["index"] == 0] == [("error", False), ("error", True)]
    assert report["n_accepted"] == 2 and report["infrastructure"]["counts"]["error"] == 1


@pytest.mark.slow
def test_a_resumed_check_retry_that_passed_is_not_checked_again(tmp_path):
    """GPU phases (on the CPU's host clock): a run stopped after a check's retry passed and before its
    timing resumes with the timing, not a third check."""
    src = _given(tmp_path, [HONEST, HONEST.replace("F.gelu", "F.silu")])
    kw = dict(n=2, source=src, window_ms=tuple(WIDE), timed=True, dedup_threshold=0.999999)
    _run(tmp_path, "gpu-cut", **kw)
    log = tmp_path / "gpu-cut" / "candidates.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    check = next(r for r in rows if r["index"] == 0 and r["phase"] == "check")
    error = dict(check, status="rejected", stage="error", reason="OutOfMemoryError: simulated", retry=False)
    log.write_text("".join(json.dumps(r) + "\n" for r in (error, dict(check, retry=True))))  # stopped before any timing
    report = _run(tmp_path, "gpu-cut", resume=True, **kw)
    after = [(r["phase"], r["stage"], r["retry"]) for r in map(json.loads, log.read_text().splitlines()) if r["index"] == 0]
    assert after == [("check", "error", False), ("check", None, True), ("time", None, False)], after
    assert report["n_accepted"] == 2


def test_a_calibration_without_a_class_prices_it_as_the_class_it_came_from():
    from kernelwright.synth.cost import Cost, calibrated_ms, fit_parts

    cost = Cost(0, 0, 1, 3.0, 0, 0, (("conv", 1.0), ("deconv3d", 2.0)))
    assert calibrated_ms(cost, {"coefficients": {"conv": 1.5}}) == pytest.approx(1.5 + 3.0)  # an older file: deconv3d was conv
    assert "deconv3d" not in fit_parts([{"conv": 1.0, "memory": 0.5}, {"conv": 2.0, "memory": 0.2}], [2.0, 3.0])


def test_the_resume_identity_names_torch_and_the_calibration(tmp_path):
    from kernelwright.synth.cost import CALIBRATION

    identity = SynthConfig(n=1, out=tmp_path).identity()
    assert identity["torch"] == torch.__version__
    assert identity["calibration"] == __import__("hashlib").sha256(CALIBRATION.read_bytes()).hexdigest()[:16]


def test_a_given_source_is_held_to_the_memory_caps():
    """Sources from --from or an LLM get no sizing, but the same caps on any tensor."""
    huge = HONEST.replace("batch_size = 8", "batch_size = 600000").replace("in_features = 64", "in_features = 1024")
    r = _judge(huge)
    assert r["stage"] == "shape" and "exceeds the cap" in r["reason"], r
    with_proxy = examine({"index": 0, "seed": 0, "window": WIDE, "source": huge, "task": {"id": "t", "name": "t", "proxy_raw_ms": 1.0}}, _ctx())
    assert with_proxy["stage"] == "shape" and "exceeds the cap" in with_proxy["reason"]  # a --from record with its own proxy
    assert _judge(HONEST)["status"] == "accepted"


def test_a_lost_worker_keeps_its_phase(tmp_path):
    from kernelwright.synth.pool import Pool

    hang = HONEST.replace("return F.gelu(self.linear(x))", "import time; time.sleep(60)")
    pool = Pool(1, _ctx(), timeout_s=3)
    try:
        job = {"index": 4, "seed": 0, "window": WIDE, "phase": "time", "retry": True, "source": hang, "task": {"id": "t", "name": "t"}}
        (result,) = list(pool.run(iter([job])))
    finally:
        pool.close()
    assert (result["stage"], result["phase"], result["retry"]) == ("timeout", "time", True)


@pytest.mark.slow
def test_the_workers_run_task_code_sandboxed(tmp_path):
    """A composed task that writes outside its folder at import is refused there (the worker is
    confined like a candidate child) and leaves nothing behind; without the sandbox it would."""
    from kernelwright.judge import sandbox

    if sandbox.support().missing():
        pytest.skip(f"this machine does not give the full sandbox: {sandbox.support().missing()}")
    os.chmod(tmp_path, 0o777)
    outside = tmp_path / "written-by-a-task"
    writer = f"open({str(outside)!r}, 'w').write('x')\n" + HONEST
    src = _given(tmp_path, [writer, HONEST.replace("F.gelu", "F.silu")])
    report = _run(tmp_path, "boxed", n=1, source=src, window_ms=tuple(WIDE), dedup_threshold=0.999999)
    rows = [json.loads(line) for line in (tmp_path / "boxed" / "candidates.jsonl").read_text().splitlines()]
    assert not outside.exists() and report["n_accepted"] == 1
    assert [r["status"] for r in rows if r["index"] == 0] == ["rejected"], rows
    _run(tmp_path, "unboxed", n=1, source=src, window_ms=tuple(WIDE), dedup_threshold=0.999999, sandbox="off")
    assert outside.exists()  # the same task without the sandbox: the write is real


# ---------------------------------------------------------------- what a run says it wrote

def test_without_pyarrow_the_run_says_train_parquet_was_skipped_and_why_never_that_it_wrote_it(tmp_path, monkeypatch, capsys):
    from kernelwright.cli import main
    from kernelwright.synth import export, pipeline

    def no_pyarrow():
        raise export.PyarrowMissing("writing train.parquet needs pyarrow")

    monkeypatch.setattr(export, "_pyarrow", no_pyarrow)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "train.parquet").write_text("from an earlier export")
    task = {"id": "syn-s0-000000", "index": 0, "name": "Honest", "ops": ["linear"], "n_ops": 1, "level": 1, "source": HONEST,
            "hash": "h", "seed": 0, "proxy_ms": 1.0, "measured_ms": None, "device": "cpu"}
    summary = export.export_or_skip([task], tmp_path / "out")
    assert summary["files"] == {"kernelbench": "kernelbench", "jsonl": "tasks.jsonl"}
    assert summary["skipped"]["train.parquet"].startswith("pyarrow is not installed (pip install pyarrow")
    assert not (tmp_path / "out" / "train.parquet").exists()  # a stale one would not match tasks.jsonl

    def write_fails():
        raise NotImplementedError("a pyarrow write that failed")  # a RuntimeError too, but not a missing package

    (tmp_path / "out" / "train.parquet").write_text("from an earlier export")
    monkeypatch.setattr(export, "_pyarrow", write_fails)
    with pytest.raises(NotImplementedError):
        export.export_or_skip([task], tmp_path / "out")
    assert (tmp_path / "out" / "train.parquet").exists()  # not deleted as if pyarrow were missing
    report = {"export": summary, "n_accepted": 1, "wall_s": 0.1, "n_candidates": 1, "n_ops_histogram": {1: 1}, "stages": [],
              "decontamination": {"n_contaminated": 0}}
    monkeypatch.setattr(pipeline, "run_synth", lambda config, progress, composer: report)
    with pytest.raises(SystemExit) as done:
        main(["synth", "--n", "1", "--out", str(tmp_path / "out"), "--device", "cpu"])
    assert done.value.code == 0
    said = capsys.readouterr().err  # what a command wrote goes to stderr (kernelwright.written)
    wrote = next(line for line in said.splitlines() if line.startswith("wrote in "))
    assert "train.parquet" not in wrote and "tasks.jsonl" in wrote and "kernelbench/ (1 task file(s))" in wrote
    assert "skipped train.parquet: pyarrow is not installed (pip install pyarrow" in said
