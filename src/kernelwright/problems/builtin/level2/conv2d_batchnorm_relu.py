"""Conv-BN-ReLU as in inference: 3x3 conv 64 -> 128 (no bias, padding 1), BatchNorm2d with running statistics, ReLU.
Input (32, 64, 112, 112): 103 MB; output 206 MB; 59 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "conv_epilogue"

BATCH, C_IN, C_OUT, SIZE = 32, 64, 128, 112
CPU_SIZE = {"BATCH": 2, "C_IN": 16, "C_OUT": 32, "SIZE": 56}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, eps: float):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out, eps=eps)
        with torch.no_grad():  # trained-looking statistics and affine terms
            self.bn.running_mean.normal_(0.0, 0.2)
            self.bn.running_var.uniform_(0.2, 0.6)
            self.bn.weight.normal_(1.0, 0.3)
            self.bn.bias.normal_(0.0, 0.3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT, 1e-5]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 7, 5)],
        [torch.randn(3, C_IN, 33, 47)],
        [torch.randn(2, C_IN, 20, 24).to(memory_format=torch.channels_last)],
    ]
