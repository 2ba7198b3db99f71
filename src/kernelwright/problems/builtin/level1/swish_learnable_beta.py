"""Swish with a learnable per-feature beta: x * sigmoid(beta * x), beta of shape (3072,),
on (32768, 3072) fp32. 403 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "activation"

TOKENS = 32768
FEATURES = 3072
CPU_SIZE = {"TOKENS": 1024, "FEATURES": 768}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.beta = nn.Parameter(torch.ones(num_features))
        with torch.no_grad():
            self.beta.uniform_(0.25, 3.0)

    def forward(self, x):
        gate = torch.sigmoid(self.beta * x)
        return x * gate


def get_inputs():
    return [torch.randn(TOKENS, FEATURES)]


def get_init_inputs():
    return [FEATURES]


def get_test_inputs():
    x = torch.randn(FEATURES, 5)
    return [[torch.randn(7, FEATURES)], [torch.randn(2, 3, FEATURES) * 10.0], [x.t()]]
