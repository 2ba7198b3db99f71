"""Per-sample mean squared error between predictions and targets: two (16384, 8192) inputs,
mean over the feature dim -> (16384,). 1074 MB read, 64 KB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "reduction"

BATCH_SIZE = 16384
FEATURES = 8192
CPU_SIZE = {"BATCH_SIZE": 512, "FEATURES": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        squared = F.mse_loss(predictions, targets, reduction="none")
        return squared.mean(dim=1)


def get_inputs():
    return [torch.randn(BATCH_SIZE, FEATURES), torch.randn(BATCH_SIZE, FEATURES)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(7, 1000), torch.randn(7, 1000)],
        [torch.randn(33, 5), torch.randn(33, 5)],
        [torch.randn(300, 11).t(), torch.randn(11, 300)],
    ]
