"""LayerNorm over the hidden size of a (16, 1024, 6144) activation, with non-trivial weight and bias.
403 MB read, 403 MB written (+ 49 KB of parameters)."""
import torch
import torch.nn as nn

CATEGORY = "normalization"

BATCH, SEQ, HIDDEN = 16, 1024, 6144
CPU_SIZE = {"BATCH": 2, "SEQ": 128, "HIDDEN": 3072}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.5)
            self.norm.bias.normal_(0.0, 0.5)

    def forward(self, hidden_states):
        return self.norm(hidden_states)


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, 1e-5]


def get_test_inputs():
    return [
        [torch.randn(7, HIDDEN)],
        [torch.randn(3, 5, HIDDEN)],
        [torch.randn(2, 9, 2 * HIDDEN)[:, :, ::2]],
    ]
