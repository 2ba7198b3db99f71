"""Conv 3x3 64 -> 128 (padding 1) whose output is gated by the sigmoid of its own global average per channel:
y * sigmoid(mean_hw(y)). Input (32, 64, 96, 96): 75 MB; output 151 MB; 43 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "conv_epilogue"

BATCH, C_IN, C_OUT, SIZE = 32, 64, 128, 96
CPU_SIZE = {"BATCH": 2, "C_IN": 16, "C_OUT": 32, "SIZE": 48}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1)
        with torch.no_grad():
            self.conv.bias.normal_(0.0, 1.0)  # channel means spread over the sigmoid's range

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        gate = torch.sigmoid(y.mean(dim=(2, 3), keepdim=True))
        return y * gate


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 5, 3)],
        [torch.randn(4, C_IN, 19, 29)],
        [torch.randn(2, C_IN, 24, 30)[:, :, ::2, ::3]],
    ]
