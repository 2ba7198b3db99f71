"""The scripted model behind the shipped recordings and the agent's tests: a fixed sequence of
replies for an example problem, played by the scripted local server (llm.scripted). No LLM wrote
these turns; they exercise every path a real model's turns take: a reply with no code, a compile
error, a wrong kernel, a slow correct one (CUDA softmax), then tool calls that write, verify and
submit a good one.

The good candidates are the examples' own (examples/DEVICE/PROBLEM/model_new.py, with a kernels/
file folded in as a source string); the failing ones are small, realistic edits of a kernel (a
dropped semicolon, an off-by-one bound, a sign slip).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

NAIVE_CUDA = r'''"""Softmax over the last dimension: one block of 256 threads per row, three passes (max, sum, write)."""

import torch
import torch.nn as nn

from kernelwright import runtime

CUDA_SRC = r"""
#include <cuda_runtime.h>
#include <math.h>

__global__ void softmax_rows(const float* x, float* y, long cols) {
    __shared__ float red[256];
    const float* xr = x + blockIdx.x * cols;
    float* yr = y + blockIdx.x * cols;
    float m = -INFINITY;
    for (long c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (long c = threadIdx.x; c < COLS_BOUND; c += blockDim.x) sum += expf(xr[c] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = 1.0f / red[0];
    for (long c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) * inv;
}

extern "C" int softmax_forward(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return 0;
    softmax_rows<<<(unsigned)rows, 256, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
"""

lib = runtime.load(CUDA_SRC)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        if x.numel() == 0:
            return y
        cols = x.shape[-1] if x.dim() > 0 else 1
        lib.softmax_forward(x, y, x.numel() // cols, cols)
        return y
'''


def _block(code: str, words: str) -> str:
    return f"{words}\n\n```python\n{code.rstrip()}\n```\n"


def _inline(model_new: str, kernel: str, lang: str) -> str:
    """An example's model_new.py whose runtime.load reads kernels/FILE, rewritten to carry that
    file's text as a string constant (a model writes one file: model_new.py)."""
    load = re.search(r"lib = runtime\.load\(pathlib\.Path\(__file__\)\.parent / \"kernels\" / \"[^\"]+\"\)", model_new)
    assert load, "the example's model_new.py no longer loads a kernels/ file: update demo_script._inline"
    const = "CPP_SRC" if lang == "cpp" else "CUDA_SRC"
    text = model_new.replace(load.group(0), f'{const} = r"""\n{kernel.rstrip()}\n"""\n\nlib = runtime.load({const})')
    text = re.sub(r"The kernel is kernels/[\w.]+;", f"The kernel is {const} below;", text, count=1)
    return text.replace("import pathlib\n\n", "")


def triton_candidates(problem: str) -> dict[str, str]:
    """The scripted Triton candidates (examples/triton/PROBLEM): a Python syntax error in the kernel
    (what `compile()` catches for Triton: the kernels themselves build at their first call), a
    wrong kernel, the good one."""
    good = (EXAMPLES / "triton" / problem / "model_new.py").read_text()
    if problem == "softmax":
        broken = good.replace("def kw_softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):", "def kw_softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr)", 1)
        wrong = good.replace("tl.store(yr + c + offs, tl.exp(v - row_max) * inv, mask=mask)", "tl.store(yr + c + offs, tl.exp(v - row_max), mask=mask)", 1)
    elif problem == "elementwise_chain":
        broken = good.replace("    x = tl.load(x_ptr + i, mask=m, other=0.0)\n", "    x = tl.load(x_ptr + i, mask=m, other=0.0\n", 1)
        wrong = good.replace("tl.exp(-x)", "tl.exp(x)", 1)  # sigmoid(-x): a sign slip
    else:
        raise ValueError(f"no scripted Triton candidates for {problem}")
    assert broken != good and wrong != good, f"examples/triton/{problem} changed: update the scripted edits"
    return {"compile_error": broken, "wrong": wrong, "good": good}


def candidates(device: str, problem: str = "softmax", language: str = "cuda") -> dict[str, str]:
    """The scripted candidates for a device, example problem and language: compile_error, wrong, (slow,) good."""
    if language == "triton":
        return triton_candidates(problem)
    if problem == "elementwise_chain" and device == "cpu":
        folder = EXAMPLES / "cpu" / problem
        good = _inline((folder / "model_new.py").read_text(), (folder / "kernels" / "elementwise_chain.cpp").read_text(), "cpp")
        broken = good.replace("p = p * r + 0.5f;", "p = p * r + 0.5f", 1)
        wrong = good.replace("exp_poly(-v)", "exp_poly(v)", 1)  # sigmoid(-x): a sign slip
        assert broken != good and wrong != good, "examples/cpu/elementwise_chain changed: update the scripted edits"
        return {"compile_error": broken, "wrong": wrong, "good": good}
    if problem != "softmax":
        raise ValueError(f"no scripted candidates for {problem} on {device}")
    good = (EXAMPLES / device / "softmax" / "model_new.py").read_text()
    if device == "cpu":
        broken = good.replace("double s = 0.0;", "double s = 0.0", 1)
        wrong = good.replace("for (long c = 0; c < cols; ++c) {\n            const float e", "for (long c = 0; c < cols - 1; ++c) {\n            const float e", 1)
        assert broken != good and wrong != good, "examples/cpu/softmax/model_new.py changed: update the scripted edits"
        return {"compile_error": broken, "wrong": wrong, "good": good}
    slow = NAIVE_CUDA.replace("COLS_BOUND", "cols")
    broken = slow.replace("m = red[0];", "m = red[0]", 1)
    wrong = NAIVE_CUDA.replace("COLS_BOUND", "cols - 1")
    return {"compile_error": broken, "wrong": wrong, "slow": slow, "good": good}


WORDS = {
    "softmax": ("Softmax is memory bound: read each row once, keep it on chip, write once. I will write that kernel.",
                "One pass with the row held on chip should be faster.", "single pass, row on chip"),
    "elementwise_chain": ("Eager runs five passes over memory (mul, add, gelu, sigmoid, mul). One fused loop reads x once "
                          "and writes y once; erf and exp as polynomials let the compiler vectorize it.",
                          "The sigmoid takes exp(-x), not exp(x). Writing the fixed kernel and verifying it.",
                          "one fused, vectorized pass"),
}


WORDS_TRITON = {
    "softmax": ("Softmax is memory bound. In Triton: one program per row, an online max and sum over chunks of the row, "
                "then one pass that writes exp(x - max) / sum.",
                "The output was never divided by the row's sum. Writing the fixed kernel and verifying it.", "online softmax, two passes per row"),
    "elementwise_chain": ("Eager runs five passes over memory. One Triton kernel reads x once and writes y once.",
                          "The sigmoid takes exp(-x), not exp(x). Writing the fixed kernel and verifying it.", "one fused Triton pass"),
}


def optimize_script(device: str, problem: str = "softmax", language: str = "cuda") -> list[dict[str, Any]]:
    """The full flow: no code, a compile error, a wrong kernel, (a slow correct one,) then tool calls
    that write the good kernel, verify it, profile it and submit it (which ends the trajectory)."""
    c = candidates(device, problem, language)
    plan, fix, note = (WORDS_TRITON if language == "triton" else WORDS)[problem]
    script: list[dict[str, Any]] = [
        {"text": plan},
        {"text": _block(c["compile_error"], "Here is a first kernel.")},
        {"text": _block(c["wrong"], "Fixed the syntax error." if language == "cuda" else "Fixed the Python syntax error.")},
    ]
    if "slow" in c:
        script.append({"text": _block(c["slow"], "Fixed the bound of the sum loop. Three passes over each row for now.")})
    script += [
        {"text": fix,
         "tool_calls": [{"name": "write_file", "arguments": {"path": "model_new.py", "content": c["good"]}}, {"name": "verify", "arguments": {}}]},
        {"text": "Correct. Where does the time go?", "tool_calls": [{"name": "profile", "arguments": {}}]},
        {"tool_calls": [{"name": "submit", "arguments": {"note": note}}]},
    ]
    return script


def stall_script(device: str, hint_words: str) -> list[dict[str, Any]]:
    """A model that keeps sending the same wrong kernel until an engineer's hint (matched by
    `hint_words` in the request) arrives; then the good one."""
    c = candidates(device)
    wrong = {"text": _block(c["wrong"], "Here is the kernel.")}
    w = re.escape(hint_words)
    return [
        {"when": w, "text": _block(c["good"], "Following the hint.")},
        {"when": "(?s)^(?!.*" + w + ")", **wrong},
        {"when": "(?s)^(?!.*" + w + ")", **wrong},
        {"when": "(?s)^(?!.*" + w + ")", **wrong},
        {"text": "DONE"},
    ]


def write(path: Path, script: list[dict[str, Any]]) -> None:
    """A script file for `python -m kernelwright.llm.scripted`."""
    path.write_text(json.dumps({"entries": script}, indent=1) + "\n")
