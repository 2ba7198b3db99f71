"""Pre-norm mixture-of-experts FFN with dense soft routing: RMSNorm, softmax gate over 8 experts, every expert
(1024 -> 512 -> GELU -> 1024) runs on every normalised token and the outputs are summed with the gate weights.
x (8, 2500, 1024): 82 MB in, 82 MB out, 34 MB weights (198 MB); 336 GFLOP."""

import torch
import torch.nn as nn

CATEGORY = "other_arch"

BATCH, SEQ, DIM, EXPERT_HIDDEN, NUM_EXPERTS = 8, 2500, 1024, 512, 8
CPU_SIZE = {"BATCH": 2, "SEQ": 250, "DIM": 256, "EXPERT_HIDDEN": 128}  # the CPU backend's size (problems.sizes)
RMS_EPS = 1e-5


class Model(nn.Module):
    def __init__(self, dim, expert_hidden, num_experts, eps):
        super().__init__()
        self.eps = eps
        self.norm_weight = nn.Parameter(torch.empty(dim))
        self.gate = nn.Linear(dim, num_experts, bias=False)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, expert_hidden), nn.GELU(), nn.Linear(expert_hidden, dim))
            for _ in range(num_experts)
        )
        with torch.no_grad():
            nn.init.normal_(self.gate.weight, std=dim ** -0.5)  # gate logits of order one
            self.norm_weight.normal_(1.0, 0.25)

    def forward(self, x):
        h = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.norm_weight
        gate = torch.softmax(self.gate(h), dim=-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            out = out + gate[..., i:i + 1] * expert(h)
        return out


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, EXPERT_HIDDEN, NUM_EXPERTS, RMS_EPS]


def get_test_inputs():
    return [
        [torch.randn(1, 333, DIM)],
        [torch.randn(3, 1, DIM)],
        [torch.randn(DIM, 2, 21).permute(1, 2, 0)],
    ]
