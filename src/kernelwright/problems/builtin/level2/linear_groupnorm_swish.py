"""Linear 2048 -> 4096 (with bias), GroupNorm with 32 groups over the 4096 features, then swish y * sigmoid(y).
x (8192, 2048): 67 MB; weight 34 MB; output 134 MB (235 MB in all); 137 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "gemm_epilogue"

ROWS, IN_FEATURES, OUT_FEATURES, GROUPS = 8192, 2048, 4096, 32
CPU_SIZE = {"ROWS": 512, "IN_FEATURES": 256, "OUT_FEATURES": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, groups: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.GroupNorm(groups, out_features, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(self.linear(x))
        return y * torch.sigmoid(y)


def get_inputs():
    return [torch.randn(ROWS, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES, GROUPS, 1e-5]


def get_test_inputs():
    return [
        [torch.randn(1, IN_FEATURES)],
        [torch.randn(37, IN_FEATURES)],
        [torch.randn(IN_FEATURES, 9).t()],
    ]
