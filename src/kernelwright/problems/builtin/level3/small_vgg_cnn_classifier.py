"""Small VGG-style image classifier: four conv3x3-BN-ReLU-maxpool stages (3 -> 16 -> 32 -> 64 -> 128 channels),
adaptive average pooling to 4x4 and a two-layer head (2048 -> 256 -> ReLU -> 10 classes).
Images (1024, 3, 128, 128): 201 MB in, 2 MB weights; 131 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "cnn"

BATCH, IMAGE_SIZE, HEAD_HIDDEN, NUM_CLASSES = 1024, 128, 256, 10
CPU_SIZE = {"BATCH": 8, "IMAGE_SIZE": 64}  # the CPU backend's size (problems.sizes)
WIDTHS = [3, 16, 32, 64, 128]


class Model(nn.Module):
    def __init__(self, widths, head_hidden, num_classes):
        super().__init__()
        stages = []
        for c_in, c_out in zip(widths[:-1], widths[1:]):
            bn = nn.BatchNorm2d(c_out)
            with torch.no_grad():
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.normal_(0.0, 0.2)
                bn.running_mean.normal_(0.0, 0.2)
                bn.running_var.uniform_(0.1, 0.5)
            stages += [nn.Conv2d(c_in, c_out, 3, padding=1), bn, nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.classifier = nn.Sequential(
            nn.Linear(widths[-1] * 16, head_hidden), nn.ReLU(inplace=True), nn.Linear(head_hidden, num_classes))

    def forward(self, images):
        h = self.features(images)
        h = torch.flatten(self.pool(h), 1)
        return self.classifier(h)


def get_inputs():
    return [torch.randn(BATCH, 3, IMAGE_SIZE, IMAGE_SIZE)]


def get_init_inputs():
    return [WIDTHS, HEAD_HIDDEN, NUM_CLASSES]


def get_test_inputs():
    return [
        [torch.randn(5, 3, 50, 70)],
        [torch.randn(1, 3, 16, 16)],
        [torch.randn(3, 66, 40, 3).permute(0, 3, 1, 2)],
    ]
