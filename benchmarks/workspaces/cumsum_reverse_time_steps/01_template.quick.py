"""Your candidate for cumsum_reverse_time: class ModelNew, with the same constructor and forward as the
reference's Model (reference/cumsum_reverse_time.py, read-only).

As written below it is the reference itself, computing with torch operators. Unless this workspace's
policy allows torch compute (see SKILL.md), the judge refuses that: replace the work with your own
kernels, e.g.

    from pathlib import Path
    from kernelwright import runtime
    lib = runtime.load(Path(__file__).parent / "kernels" / "cumsum_reverse_time.cu")   # extern "C" entry points
    ...
    lib.my_kernel(x, y, x.numel())                                       # tensors pass as pointers

Then: kernelwright check --quick (build + correctness), kernelwright check (+ timing), kernelwright
check --final (fresh seeds, baselines timed beside it). See SKILL.md and README.md.
"""

import torch
import torch.nn as nn

CATEGORY = "scan"

BATCH, TIME, FEATURES = 64, 4096, 512


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, rewards: torch.Tensor) -> torch.Tensor:
        flipped = torch.flip(rewards, dims=(1,))
        return torch.flip(torch.cumsum(flipped, dim=1), dims=(1,))
