"""Mamba-style selective SSM block: in-projection to (u, z), causal depthwise conv1d + SiLU, input-dependent
delta, B, C; discretised scan h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t as a Python loop over 256 steps;
y = C_t h_t + D u_t, gated by SiLU(z), out-projection. x (16, 256, 768): 12.6 MB in, 12.6 MB out, 15 MB weights;
40 MB in all, below 3x L2 on purpose: the 256 dependent steps, not the data, bound its time (several ms eager)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "ssm"

SIZE_NOTE = ("A recurrent scan over time is bound by its 256 sequential steps, not by the 40 MB of data, and "
             "already takes several ms eager (the 31 GFLOP of projections alone give a 0.6 ms ceiling).")

BATCH, SEQ, D_MODEL, D_INNER, D_STATE, DT_RANK, CONV_KERNEL = 16, 256, 768, 1536, 16, 48, 4
CPU_SIZE = {"BATCH": 2, "SEQ": 64, "D_MODEL": 128, "D_INNER": 256, "DT_RANK": 8}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, d_model, d_inner, d_state, dt_rank, conv_kernel):
        super().__init__()
        self.dt_rank, self.d_state = dt_rank, d_state
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv = nn.Conv1d(d_inner, d_inner, conv_kernel, groups=d_inner, padding=conv_kernel - 1)
        self.x_proj = nn.Linear(d_inner, dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, d_inner)
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(d_inner, 1))
        self.D = nn.Parameter(torch.empty(d_inner))
        with torch.no_grad():
            nn.init.normal_(self.in_proj.weight, std=d_model ** -0.5)
            nn.init.normal_(self.out_proj.weight, std=d_inner ** -0.5)
            self.D.normal_(1.0, 0.5)
            # time steps log-uniform in [1e-3, 1e-1]; the bias is their inverse softplus
            dt = torch.exp(torch.rand(d_inner) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))

    def forward(self, x):
        length = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = F.silu(self.conv(u.transpose(1, 2))[..., :length]).transpose(1, 2)  # causal conv, (B, L, E)
        dt, b_in, c_out = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt))  # (B, L, E)
        A = -torch.exp(self.A_log)  # (E, N)
        decay = torch.exp(delta.unsqueeze(-1) * A)  # (B, L, E, N)
        drive = (delta * u).unsqueeze(-1) * b_in.unsqueeze(2)  # (B, L, E, N)
        h = torch.zeros_like(drive[:, 0])
        states = []
        for t in range(length):
            h = decay[:, t] * h + drive[:, t]
            states.append(h)
        y = torch.einsum("blen,bln->ble", torch.stack(states, dim=1), c_out) + u * self.D
        return self.out_proj(y * F.silu(z))


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]


def get_init_inputs():
    return [D_MODEL, D_INNER, D_STATE, DT_RANK, CONV_KERNEL]


def get_test_inputs():
    return [
        [torch.randn(2, 37, D_MODEL)],
        [torch.randn(1, 1, D_MODEL)],
        [torch.randn(9, 3, D_MODEL).transpose(0, 1)],
    ]
