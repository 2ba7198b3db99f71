"""The static layer (judge.static): each rule fires on code that does the thing and stays quiet on
honest code that looks alike. Pure parsing, no children."""

from __future__ import annotations

import textwrap

import pytest

from conftest import judge
from kernelwright.judge.static import RULES, scan_candidate, scan_cuda, scan_python

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def rules(code: str) -> set[str]:
    return {f.rule for f in scan_python(textwrap.dedent(code), "model_new.py")}


# (rule, code that triggers it, honest code that must not)
PYTHON_CASES = [
    ("frame_access", "import sys\nf = sys._getframe(1).f_back.f_locals", "import sys\nprint(sys.version)"),
    ("frame_access", "import inspect as ins\nframe = ins.currentframe()", "import inspect\ninspect.signature(len)"),
    ("frame_access", "def f(e):\n    return e.__traceback__.tb_frame", "def f(e):\n    return e.args"),
    ("gc_access", "import gc\nobjs = gc.get_objects()", "x = [1, 2]"),
    ("gc_access", "from gc import get_referrers as gr\ngr(1)", "from math import sqrt\nsqrt(2)"),
    ("sys_modules", "import sys\nm = sys.modules['kernelwright']", "import sys\nsys.getrecursionlimit()"),
    ("builtins", "import builtins\nbuiltins.print = None", "print('x')"),
    ("dynamic_code", "exec('y = 1')", "y = 1"),
    ("dynamic_code", "import importlib\nm = importlib.import_module('torch')", "import torch"),
    ("dynamic_attribute", "import torch\nf = getattr(torch, 'all' + 'close')", "import torch\nf = getattr(torch, 'allclose')"),
    ("monkeypatch", "import torch\ntorch.allclose = lambda *a, **k: True", "import torch\nclass M:\n    allclose = None\nM.allclose = 1"),
    ("monkeypatch", "import torch\nsetattr(torch.cuda.Event, 'elapsed_time', lambda s, e: 0.001)", "class A: pass\nsetattr(A, 'x', 1)"),
    ("monkeypatch", "import time\ntime.perf_counter = lambda: 0.0", "import time\nt = time.perf_counter()"),
    ("alias", "import torch\nsync = torch.cuda.synchronize", "import torch\ny = torch.relu"),
    ("alias", "from time import perf_counter as pc", "from time import sleep"),
    ("alias", "import torch.testing as tt\nac = tt.assert_close", "import torch.nn as nn"),
    ("files", "with open('/tmp/x', 'w') as f:\n    f.write('1')", "import pathlib\np = pathlib.Path(__file__).parent / 'kernels'"),
    ("files", "import torch\ntorch.save({}, 'cache.pt')", "import torch\nt = torch.empty(3)"),
    ("files", "import pathlib\npathlib.Path('x').write_text('1')", "import pathlib\nname = pathlib.Path('x').name"),
    ("sockets", "import socket\ns = socket.socket()", "import struct"),
    ("subprocess", "import subprocess\nsubprocess.run(['ls'])", "import shlex"),
    ("subprocess", "import os\nos.system('ls')", "import os\nos.path.join('a', 'b')"),
    ("subprocess", "import os\nos.execv('/bin/true', ['x'])", "import os\nos.getpid()"),
    ("threads", "import threading\nthreading.Thread(target=print).start()", "import queue"),
    ("threads", "from concurrent.futures import ThreadPoolExecutor", "from functools import partial"),
    ("ctypes", "import ctypes\nctypes.CDLL('libx.so')", "from kernelwright import runtime"),
    ("side_stream", "import torch\ns = torch.cuda.Stream()", "import torch\ntorch.cuda.current_device()"),
    ("side_stream", "import torch.cuda as tc\nwith tc.stream(None):\n    pass", "import torch.cuda as tc\ntc.is_available()"),
    ("inherits_reference", "from problem import Model\nclass ModelNew(Model):\n    pass", "import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass"),
    ("exception_fallback", "try:\n    y = 1\nexcept Exception:\n    y = 2", "try:\n    y = 1\nexcept KeyError:\n    y = 2"),
    ("exception_fallback", "import contextlib\nwith contextlib.suppress(RuntimeError):\n    pass", "import contextlib\nwith contextlib.nullcontext():\n    pass"),
    ("exception_fallback", "try:\n    y = 1\nexcept:\n    y = 2", "try:\n    y = 1\nfinally:\n    y = 2"),
    ("reduced_precision", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True", "import torch\nx = torch.backends.cudnn.is_available()"),
    ("reduced_precision", "def f(x):\n    return x.half()", "def f(x):\n    return x.float()"),
    ("reduced_precision", "import torch\nwith torch.autocast('cuda'):\n    pass", "import torch\nwith torch.no_grad():\n    pass"),
    ("graph_capture", "import torch\ng = torch.cuda.CUDAGraph()", "import torch\ne = torch.cuda.Event()"),
    ("files", "import os\nos.remove('x')", "import pathlib\nsrc = (pathlib.Path(__file__).parent / 'k.cu').read_text()"),
]


@pytest.mark.parametrize("rule,bad,good", PYTHON_CASES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(PYTHON_CASES)])
def test_python_rule_fires_on_the_trick_and_not_on_honest_code(rule, bad, good):
    assert rule in RULES
    assert rule in rules(bad), (rule, rules(bad))
    assert rule not in rules(good), (rule, rules(good))


def test_every_python_rule_has_a_case():
    cuda_only = {r for r in RULES if r.startswith("cuda_")} | {"static_layer_failed"}
    assert set(RULES) - cuda_only == {r for r, _, _ in PYTHON_CASES}


def test_findings_name_file_and_line():
    found = scan_python("import torch\n\n\nsync = torch.cuda.synchronize\n", "helper.py")
    assert [(f.rule, f.file, f.line) for f in found] == [("alias", "helper.py", 4)]


CUDA_BAD = r"""
#include <cublas_v2.h>
#include <ATen/ops/mm.h>
#include <thread>
__global__ void k(float* x) { x[0] = 1.0f; }
extern "C" int run(float* x, cudaStream_t s) {
    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    k<<<1, 1, 0, side>>>(x);
    auto r = at::mm(a, b);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, x, 1, x, 1, nullptr, x, 1);
    std::thread t([] {});
    t.detach();
    FILE* f = fopen("/tmp/out", "w");
    return 0;
}
"""

CUDA_GOOD = r"""
#include <cuda_runtime.h>
#include <torch/extension.h>
template <typename T> using acc_t = at::acc_type<T, true>;
__global__ void k(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == at::ScalarType::Float, "fp32 only");
    for (auto i : c10::irange(x.dim())) { (void)i; }
    auto y = torch::empty_like(x);
    const c10::cuda::CUDAGuard guard(x.device());
    k<<<(x.numel() + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""


def test_cuda_rules_fire_on_library_calls_threads_streams_and_files():
    pytest.importorskip("tree_sitter_cuda")
    found = {(f.rule, f.detail) for f in scan_cuda(CUDA_BAD, "k.cu")}
    rules_seen = {r for r, _ in found}
    assert {"cuda_vendor_library", "cuda_torch_api", "cuda_host_thread", "cuda_stream", "cuda_process"} <= rules_seen, found
    assert ("cuda_torch_api", "at::mm(...)") in found and ("cuda_stream", "cudaStreamCreateWithFlags(...)") in found


def test_a_plain_extension_wrapper_is_clean():
    pytest.importorskip("tree_sitter_cuda")
    assert scan_cuda(CUDA_GOOD, "k.cu") == []


def test_without_the_cuda_parser_the_layer_says_so(monkeypatch):
    from kernelwright.judge import static

    monkeypatch.setattr(static, "_cuda_parser", lambda: None)
    found = static.scan_candidate(ROOT / "examples" / "cuda" / "softmax" / "model_new.py", [("k.cu", CUDA_BAD)])
    assert [f["rule"] for f in found] == ["cuda_parser_unavailable"]


def test_kernel_headers_and_sources_beside_the_model_are_scanned_by_relative_path(tmp_path):
    pytest.importorskip("tree_sitter_cuda")
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "gemm.cuh").write_text("#include <cublas_v2.h>\nvoid f() { cublasSgemm(h); }\n")
    (tmp_path / "model_new.py").write_text("import torch\n")
    found = {(f["rule"], f["file"]) for f in scan_candidate(tmp_path / "model_new.py")}
    assert ("cuda_vendor_library", "csrc/gemm.cuh") in found, found


def test_shipped_examples_have_no_findings():
    pytest.importorskip("tree_sitter_cuda")
    from kernelwright.judge.candidate import discover

    for folder in sorted((ROOT / "examples").glob("*/*/")):
        files = discover(folder)
        assert scan_candidate(files.model_new, [(s.name, s.text) for s in files.sources]) == [], folder


def test_findings_reach_the_verdict_without_deciding_it():
    v = judge("rowsum", "rowsum_patched_clock")
    assert any(f["rule"] in ("monkeypatch", "alias") for f in v.static_findings), v.static_findings
    honest = judge("rowsum", "rowsum_correct")
    assert honest.static_findings == () and honest.status.value == "correct"
