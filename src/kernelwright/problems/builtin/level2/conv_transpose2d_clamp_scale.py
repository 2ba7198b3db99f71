"""U-Net decoder upsampling: ConvTranspose2d 256 -> 128 with kernel 2 and stride 2 (non-overlapping), clamp to
[lo, hi], multiply by a scale. Input (32, 256, 64, 64): 134 MB; output (32, 128, 128, 128): 268 MB; 34 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "conv_epilogue"

BATCH, C_IN, C_OUT, SIZE = 32, 256, 128, 64
CPU_SIZE = {"BATCH": 2, "C_IN": 64, "C_OUT": 32, "SIZE": 32}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, padding: int,
                 lo: float, hi: float, scale: float):
        super().__init__()
        self.deconv = nn.ConvTranspose2d(c_in, c_out, kernel, stride=stride, padding=padding)
        self.lo, self.hi, self.scale = lo, hi, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.clamp(self.deconv(x), min=self.lo, max=self.hi)
        return y * self.scale


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT, 2, 2, 0, -0.25, 0.4, 2.5]


def get_test_inputs():
    return [
        [torch.randn(1, C_IN, 3, 5)],
        [torch.randn(2, C_IN, 17, 11)],
        [torch.randn(2, 9, 13, C_IN).permute(0, 3, 1, 2)],
    ]
