"""A tiny problem (y = 2x + 1 on a 64 x 32 tensor) and a raw C++ candidate for it, written as text:
the tests of the agent's tools and of the MCP server give them to the tools as a model would."""

PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2 + 1


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
'''

CANDIDATE = '''
import torch
import torch.nn as nn

from kernelwright import runtime

SRC = r"""
extern "C" int affine(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] * 2.0f + BIAS;
    return 0;
}
"""

lib = runtime.load(SRC)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.affine(x, y, x.numel())
        return y
'''


def candidate(bias: str = "1.0f") -> str:
    """The candidate with its bias term (a wrong one for a wrong candidate, or text that breaks the build)."""
    return CANDIDATE.replace("BIAS", bias)
