"""GPT-style causal self-attention sublayer written out: LayerNorm, fused QKV projection, 12 heads of 64,
softmax(QK^T / sqrt(64) + causal mask) V, output projection (the residual add is left to the caller).
x (32, 1024, 768): 101 MB in, 101 MB out, 9 MB weights (211 MB); 258 GFLOP."""

import math

import torch
import torch.nn as nn

CATEGORY = "attention"

BATCH, SEQ, DIM, HEADS = 32, 1024, 768, 12
CPU_SIZE = {"BATCH": 2, "SEQ": 128, "DIM": 192}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        # weights of std dim^-0.5 give attention logits of order one (a peaked softmax, as in a trained model)
        with torch.no_grad():
            self.norm.weight.normal_(1.0, 0.2)
            self.norm.bias.normal_(0.0, 0.1)
            nn.init.normal_(self.qkv.weight, std=dim ** -0.5)
            nn.init.normal_(self.proj.weight, std=dim ** -0.5)
            self.qkv.bias.normal_(0.0, 0.1)

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.norm(x)).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        future = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = torch.matmul(weights, v).transpose(1, 2).reshape(b, s, d)
        return self.proj(context)


def get_inputs():
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    return [DIM, HEADS]


def get_test_inputs():
    return [
        [torch.randn(3, 77, DIM)],
        [torch.randn(1, 1, DIM)],
        [torch.randn(50, 2, DIM).transpose(0, 1)],
    ]
