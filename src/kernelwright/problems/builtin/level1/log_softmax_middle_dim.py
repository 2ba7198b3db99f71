"""log_softmax over the middle (class) dim of a (64, 1000, 2048) tensor, as for per-position
class scores laid out (batch, classes, positions). 524 MB read, 524 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "softmax"

BATCH = 64
CLASSES = 1000
POSITIONS = 2048
CPU_SIZE = {"BATCH": 4, "POSITIONS": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, class_dim):
        super().__init__()
        self.class_dim = class_dim

    def forward(self, scores):
        return F.log_softmax(scores, dim=self.class_dim)


def get_inputs():
    scores = torch.randn(BATCH, CLASSES, POSITIONS)
    return [scores]


def get_init_inputs():
    return [1]


def get_test_inputs():
    return [
        [torch.randn(2, 1000, 7)],
        [torch.randn(5, 33, 3)],
        [torch.randn(3, 65, 20).permute(0, 2, 1)],
    ]
