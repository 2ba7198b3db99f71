"""Sentence-embedding pooling over padded sequences: mean of the token vectors at positions < length, per batch row.
tokens (128, 2048, 768) fp32: 805 MB read; lengths (128,) int64; output (128, 768): 0.4 MB."""
import torch
import torch.nn as nn

CATEGORY = "elementwise_reduction"

BATCH, SEQ, HIDDEN = 128, 2048, 768
CPU_SIZE = {"BATCH": 8, "SEQ": 256, "HIDDEN": 384}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        mask = (positions[None, :] < lengths[:, None]).to(tokens.dtype)
        total = torch.einsum("bsh,bs->bh", tokens, mask)
        count = mask.sum(dim=1, keepdim=True).clamp_min(1.0)
        return total / count


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN), torch.randint(1, SEQ + 1, (BATCH,))]


def get_init_inputs():
    return []


def get_test_inputs():
    return [
        [torch.randn(3, 5, 7), torch.tensor([5, 1, 3])],
        [torch.randn(4, 300, 33), torch.randint(1, 301, (4,))],
        [torch.randn(2, 64, 100).transpose(1, 2), torch.tensor([100, 37])],
    ]
