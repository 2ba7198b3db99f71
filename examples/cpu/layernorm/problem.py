"""LayerNorm over the last dimension (nn.LayerNorm((1024,))), fp32, at a size for the CPU backend.

The affine parameters are drawn at random (from the judge's seed) so that a kernel ignoring
weight or bias fails.
"""

import torch
import torch.nn as nn

ROWS, COLS = 512, 1024


class Model(nn.Module):
    def __init__(self, normalized_shape):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape)
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.float32)]


def get_init_inputs():
    return [(COLS,)]


def get_test_inputs():
    """Further shapes for correctness only (the normalized width is fixed by the init inputs)."""
    return [
        [torch.randn(7, COLS, dtype=torch.float32)],
        [torch.randn(3, 5, COLS, dtype=torch.float32)],
        [torch.randn(COLS, 33, dtype=torch.float32).t()],  # non-contiguous (33, 1024) view
        [torch.randn(16, COLS, dtype=torch.float32) * 100.0 + 50.0],  # large mean: cancellation
    ]
