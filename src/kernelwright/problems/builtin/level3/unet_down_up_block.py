"""One U-Net level: double conv3x3-BN-ReLU encoder (kept as the skip), maxpool and a double conv at half
resolution with 2x the channels, 2x2 transposed-conv upsampling, concatenation with the skip and a decoder
double conv. x (24, 64, 128, 128): 101 MB in, 101 MB out, 1.8 MB weights (203 MB); 195 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "cnn"

BATCH, CHANNELS, HEIGHT, WIDTH = 24, 64, 128, 128
CPU_SIZE = {"BATCH": 2, "CHANNELS": 16, "HEIGHT": 64, "WIDTH": 64}  # the CPU backend's size (problems.sizes)


def double_conv(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
        nn.Conv2d(c_out, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True),
    )


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.encode = double_conv(channels, channels)
        self.down = nn.Sequential(nn.MaxPool2d(2), double_conv(channels, 2 * channels))
        self.up = nn.ConvTranspose2d(2 * channels, channels, kernel_size=2, stride=2)
        self.decode = double_conv(2 * channels, channels)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.weight.uniform_(0.6, 1.6)
                    m.bias.normal_(0.0, 0.3)
                    m.running_mean.normal_(0.0, 0.2)
                    m.running_var.uniform_(0.1, 0.6)

    def forward(self, x):
        skip = self.encode(x)
        upsampled = self.up(self.down(skip))
        return self.decode(torch.cat([skip, upsampled], dim=1))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


def get_test_inputs():
    return [
        [torch.randn(2, CHANNELS, 30, 46)],
        [torch.randn(1, CHANNELS, 2, 2)],
        [torch.randn(3, 18, 64, CHANNELS).permute(0, 3, 2, 1)],
    ]
