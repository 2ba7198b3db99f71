"""GELU, tanh approximation written out as in GPT-2's MLP:
0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))), on (16, 2048, 3072). 403 MB read, 403 MB written."""
import math

import torch
import torch.nn as nn

CATEGORY = "activation"

BATCH, SEQ_LEN, FFN_DIM = 16, 2048, 3072
CPU_SIZE = {"BATCH": 2, "SEQ_LEN": 256, "FFN_DIM": 1536}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = math.sqrt(2.0 / math.pi)

    def forward(self, x):
        inner = self.k * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


def get_inputs():
    return [torch.randn(BATCH, SEQ_LEN, FFN_DIM)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(1, 7, 1000)],
        [torch.randn(3, 5, 333) * 6.0],
        [torch.randn(2, 40, 30).transpose(1, 2)],
    ]
