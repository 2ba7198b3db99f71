"""Scaled cosine similarity of paired rows (contrastive-loss logits), written out:
scale * <a, b> / max(|a| |b|, eps) over 2048 features. a, b (65536, 2048) fp32: 1074 MB read; output 256 KB."""
import torch
import torch.nn as nn

CATEGORY = "elementwise_reduction"

PAIRS, FEATURES = 65536, 2048
CPU_SIZE = {"PAIRS": 1024, "FEATURES": 512}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, logit_scale: float, eps: float):
        super().__init__()
        self.logit_scale = logit_scale
        self.eps = eps

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        dot = (a * b).sum(-1)
        norms = a.norm(dim=-1) * b.norm(dim=-1)
        return self.logit_scale * dot / norms.clamp_min(self.eps)


def get_inputs():
    return [torch.randn(PAIRS, FEATURES), torch.randn(PAIRS, FEATURES)]


def get_init_inputs():
    return [20.0, 1e-8]


def get_test_inputs():
    return [
        [torch.randn(4, 3), torch.randn(4, 3)],
        [torch.randn(3, 17, 515), torch.randn(3, 17, 515)],
        [torch.randn(FEATURES, 6).t(), torch.randn(6, FEATURES)],
    ]
