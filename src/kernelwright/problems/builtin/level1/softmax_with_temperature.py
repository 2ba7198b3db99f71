"""Sampling distribution over a vocabulary: softmax(logits / temperature) along dim 1 of
(4096, 32000) logits, temperature 0.5. 524 MB read, 524 MB written."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "softmax"

NUM_SEQUENCES = 4096
VOCAB_SIZE = 32000
CPU_SIZE = {"NUM_SEQUENCES": 128, "VOCAB_SIZE": 8000}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, temperature: float):
        super().__init__()
        if temperature <= 0:
            raise ValueError("temperature must be positive")
        self.inv_temperature = 1.0 / temperature

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return F.softmax(logits * self.inv_temperature, dim=1)


def get_inputs():
    return [torch.randn(NUM_SEQUENCES, VOCAB_SIZE)]


def get_init_inputs():
    return [0.5]


def get_test_inputs():
    wide = torch.randn(7, 1000)
    narrow = torch.randn(129, 31)
    transposed = torch.randn(500, 6).t()
    return [[wide], [narrow], [transposed]]
