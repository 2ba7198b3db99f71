"""Row softmax of attention scores over the key dimension: (8, 16, 1024, 1024) fp32.
537 MB read, 537 MB written."""
import torch
import torch.nn as nn

CATEGORY = "softmax"

BATCH, HEADS, QUERIES, KEYS = 8, 16, 1024, 1024
CPU_SIZE = {"BATCH": 2, "HEADS": 4, "QUERIES": 256, "KEYS": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, scores):
        return torch.softmax(scores, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, HEADS, QUERIES, KEYS)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(1, 2, 7, 1000)],
        [torch.randn(3, 1, 5, 333)],
        [torch.randn(2, 3, 64, 9).transpose(2, 3)],
    ]
