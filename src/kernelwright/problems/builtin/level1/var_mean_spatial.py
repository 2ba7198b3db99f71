"""Per-channel spatial variance (with Bessel's correction) and mean of an NCHW feature map:
torch.var_mean over (H, W) of (256, 256, 56, 56) -> two (256, 256) tensors. 822 MB read, 0.5 MB written."""
import torch
import torch.nn as nn

CATEGORY = "reduction"

N, C, H, W = 256, 256, 56, 56
CPU_SIZE = {"N": 4, "C": 64}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, correction):
        super().__init__()
        self.correction = correction

    def forward(self, images):
        var, mean = torch.var_mean(images, dim=(2, 3), correction=self.correction)
        return var, mean


def get_inputs():
    return [torch.randn(N, C, H, W)]


def get_init_inputs():
    return [1]


def get_test_inputs():
    return [
        [torch.randn(2, 3, 17, 31)],
        [torch.randn(1, 5, 100, 7)],
        [torch.randn(3, 40, 40, 4).permute(0, 3, 1, 2)],
    ]
