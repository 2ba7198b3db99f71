"""Index of the smallest element in every column of a tall matrix: argmin over dim 0,
(49152, 4096) -> (4096,) int64. 805 MB read, 32 KB written."""
import torch
import torch.nn as nn

CATEGORY = "reduction"

N_SAMPLES = 49152
N_FEATURES = 4096
CPU_SIZE = {"N_SAMPLES": 2048, "N_FEATURES": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    """Returns, for every feature, the row holding its minimum (first one on a tie)."""

    def forward(self, samples):
        return samples.argmin(dim=0)


def get_inputs():
    return [torch.randn(N_SAMPLES, N_FEATURES)]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(1000, 7)],
        [torch.randn(333, 129)],
        [torch.randn(50, 777).t()],
    ]
