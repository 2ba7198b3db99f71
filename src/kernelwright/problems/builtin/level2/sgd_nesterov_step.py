"""One fused SGD step with weight decay and Nesterov momentum over a flat parameter shard:
buf' = mu * buf + (g + wd * p); p' = p - lr * (g + wd * p + mu * buf'). p, g, buf, p', buf' (12288, 4096): 201 MB each."""
import torch
import torch.nn as nn

CATEGORY = "other_fusion"

ROWS, COLS = 12288, 4096
CPU_SIZE = {"ROWS": 512, "COLS": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, lr: float, momentum: float, weight_decay: float):
        super().__init__()
        self.lr = lr
        self.momentum = momentum
        self.weight_decay = weight_decay

    def forward(self, param: torch.Tensor, grad: torch.Tensor, momentum_buf: torch.Tensor):
        d = grad + self.weight_decay * param
        new_buf = self.momentum * momentum_buf + d
        new_param = param - self.lr * (d + self.momentum * new_buf)
        return new_param, new_buf


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [0.05, 0.9, 1e-4]


def get_test_inputs():
    return [
        [torch.randn(1), torch.randn(1), torch.randn(1)],
        [torch.randn(1000003), torch.randn(1000003), torch.randn(1000003)],
        [torch.randn(37, 11), torch.randn(11, 37).t(), torch.randn(37, 22)[:, ::2]],
    ]
