"""ConvMixer image classifier: 8x8 patch-embedding conv to 192 channels, 3 mixer layers (residual depthwise
7x7 conv + GELU + BN, then pointwise conv + GELU + BN), global average pool and a 1000-way linear head.
Images (256, 3, 256, 256): 201 MB in, 1 MB out, 1.4 MB weights; 92 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "other_arch"

BATCH, IMAGE_SIZE = 256, 256
DIM, DEPTH, KERNEL_SIZE, PATCH_SIZE, NUM_CLASSES = 192, 3, 7, 8, 1000
CPU_SIZE = {"BATCH": 2, "IMAGE_SIZE": 64, "DIM": 64}  # the CPU backend's size (problems.sizes)


def conv_gelu_bn(conv, dim):
    bn = nn.BatchNorm2d(dim)
    with torch.no_grad():
        bn.weight.normal_(1.0, 0.3)
        bn.bias.normal_(0.0, 0.2)
        bn.running_mean.normal_(0.0, 0.1)
        bn.running_var.uniform_(0.05, 0.3)
    return nn.Sequential(conv, nn.GELU(), bn)


class Model(nn.Module):
    def __init__(self, dim, depth, kernel_size, patch_size, num_classes):
        super().__init__()
        self.stem = conv_gelu_bn(nn.Conv2d(3, dim, patch_size, stride=patch_size), dim)
        self.spatial = nn.ModuleList(
            conv_gelu_bn(nn.Conv2d(dim, dim, kernel_size, groups=dim, padding="same"), dim) for _ in range(depth))
        self.channel = nn.ModuleList(conv_gelu_bn(nn.Conv2d(dim, dim, 1), dim) for _ in range(depth))
        self.head = nn.Linear(dim, num_classes)

    def forward(self, images):
        h = self.stem(images)
        for spatial, channel in zip(self.spatial, self.channel):
            h = channel(h + spatial(h))
        return self.head(h.mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)]


def get_init_inputs():
    return [DIM, DEPTH, KERNEL_SIZE, PATCH_SIZE, NUM_CLASSES]


def get_test_inputs():
    return [
        [torch.randn(3, 3, 40, 72)],
        [torch.randn(1, 3, 8, 8)],
        [torch.randn(2, 3, 96, 48).transpose(2, 3)],
    ]
