"""Per-sample cross-entropy with label smoothing over a 32000-class vocabulary:
logits (8192, 32000) fp32 + int64 labels -> (8192,) losses. 1049 MB read."""
import torch
import torch.nn as nn
import torch.nn.functional as F

CATEGORY = "reduction"

TOKENS, VOCAB = 8192, 32000
CPU_SIZE = {"TOKENS": 512, "VOCAB": 2000}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, label_smoothing):
        super().__init__()
        self.label_smoothing = label_smoothing

    def forward(self, logits, labels):
        return F.cross_entropy(logits, labels, reduction="none", label_smoothing=self.label_smoothing)


def get_inputs():
    logits = torch.randn(TOKENS, VOCAB)
    labels = torch.randint(0, VOCAB, (TOKENS,))
    return [logits, labels]


def get_init_inputs():
    return [0.1]


def get_test_inputs():
    return [
        [torch.randn(7, 1000), torch.randint(0, 1000, (7,))],
        [torch.randn(129, 3), torch.randint(0, 3, (129,))],
        [torch.randn(77, 40)[::2], torch.randint(0, 40, (39,))],
    ]
