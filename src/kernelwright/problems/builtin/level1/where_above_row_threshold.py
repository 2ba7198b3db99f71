"""torch.where with a broadcast comparison: keep x where it exceeds its row's threshold, else take
a per-column fallback value. x (12288, 8192), thresholds (12288, 1), fallback (8192,).
403 MB read, 403 MB written."""
import torch
import torch.nn as nn

CATEGORY = "broadcast"

ROWS, COLS = 12288, 8192
CPU_SIZE = {"ROWS": 768, "COLS": 1024}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, row_threshold, fallback):
        keep = x > row_threshold
        return torch.where(keep, x, fallback)


def get_inputs():
    x = torch.randn(ROWS, COLS)
    row_threshold = torch.randn(ROWS, 1)
    fallback = torch.randn(COLS)
    return [x, row_threshold, fallback]


def get_init_inputs():
    return []


def get_test_inputs():
    cases = []
    for rows, cols in ((7, 1000), (129, 3)):
        cases.append([torch.randn(rows, cols), torch.randn(rows, 1), torch.randn(cols)])
    cases.append([torch.randn(50, 6).t(), torch.randn(6, 1), torch.randn(50)])
    return cases
