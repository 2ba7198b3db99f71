"""Pre-LayerNorm transformer encoder layer written out: x + MHSA(LN(x)) with 8 heads of 64 through
F.scaled_dot_product_attention, then x + MLP(LN(x)) with a 4x GELU MLP. x (128, 384, 512): 101 MB in,
101 MB out, 12.6 MB weights (214 MB); 348 GFLOP."""

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "transformer"

BATCH, SEQ, D_MODEL, N_HEADS, MLP_RATIO = 128, 384, 512, 8, 4
CPU_SIZE = {"BATCH": 4, "SEQ": 64, "D_MODEL": 128}  # the CPU backend's size (problems.sizes)
LN_EPS = 1e-6


class Model(nn.Module):
    def __init__(self, d_model, n_heads, mlp_ratio, eps):
        super().__init__()
        self.n_heads = n_heads
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.in_proj = nn.Linear(d_model, 3 * d_model)
        self.out_proj = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.fc1 = nn.Linear(d_model, mlp_ratio * d_model)
        self.fc2 = nn.Linear(mlp_ratio * d_model, d_model)
        with torch.no_grad():
            for norm in (self.norm1, self.norm2):
                norm.weight.normal_(1.0, 0.3)
                norm.bias.normal_(0.0, 0.1)
            nn.init.xavier_normal_(self.in_proj.weight)

    def forward(self, x):
        b, s, d = x.shape
        h = self.norm1(x)
        q, k, v = self.in_proj(h).split(d, dim=-1)
        q = q.reshape(b, s, self.n_heads, -1).transpose(1, 2)
        k = k.reshape(b, s, self.n_heads, -1).transpose(1, 2)
        v = v.reshape(b, s, self.n_heads, -1).transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.out_proj(attn.transpose(1, 2).reshape(b, s, d))
        x = x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]


def get_init_inputs():
    return [D_MODEL, N_HEADS, MLP_RATIO, LN_EPS]


def get_test_inputs():
    return [
        [torch.randn(2, 45, D_MODEL)],
        [torch.randn(3, 1, D_MODEL)],
        [torch.randn(19, 4, D_MODEL).transpose(0, 1)],
    ]
