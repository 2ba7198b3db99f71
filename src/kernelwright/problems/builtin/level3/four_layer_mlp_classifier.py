"""Four-layer MLP classifier (2048 -> 4096 -> 4096 -> 4096 -> 1000, ReLU between layers) on a batch of 4096
feature vectors. Input 34 MB, weights 184 MB, logits 16 MB (234 MB); 377 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "mlp"

BATCH, IN_FEATURES, HIDDEN, NUM_CLASSES = 4096, 2048, 4096, 1000
CPU_SIZE = {"BATCH": 256, "IN_FEATURES": 512, "HIDDEN": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, in_features, hidden, num_classes):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )
        # He initialisation keeps the activations of order one through the ReLU stack
        with torch.no_grad():
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                    layer.bias.normal_(0.0, 0.1)

    def forward(self, features):
        return self.net(features)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, NUM_CLASSES]


def get_test_inputs():
    return [
        [torch.randn(7, IN_FEATURES)],
        [torch.randn(IN_FEATURES, 33).t()],
        [torch.randn(258, IN_FEATURES)[::2]],
    ]
