"""Style-transfer style normalisation: InstanceNorm2d with affine parameters, then LeakyReLU (slope 0.2).
(48, 128, 128, 128) fp32: 403 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "norm_activation"

BATCH, CHANNELS, SIZE = 48, 128, 128
CPU_SIZE = {"BATCH": 4, "CHANNELS": 32, "SIZE": 64}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, channels: int, negative_slope: float):
        super().__init__()
        self.block = nn.Sequential(
            nn.InstanceNorm2d(channels, affine=True),
            nn.LeakyReLU(negative_slope),
        )
        with torch.no_grad():
            self.block[0].weight.normal_(1.0, 0.5)
            self.block[0].bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, 0.2]


def get_test_inputs():
    return [
        [torch.randn(1, CHANNELS, 2, 3)],
        [torch.randn(3, CHANNELS, 31, 17)],
        [torch.randn(2, CHANNELS, 16, 40)[:, :, :, ::4]],
    ]
