"""BERT-style embedding layer: token-table lookup + learned position embedding, then LayerNorm.
ids (64, 2048) int64 (1 MB); table 50257 x 1024 (206 MB); positions 2048 x 1024 (8 MB); output (64, 2048, 1024): 537 MB."""
import torch
import torch.nn as nn

CATEGORY = "other_fusion"

BATCH, SEQ, VOCAB, HIDDEN = 64, 2048, 50257, 1024
CPU_SIZE = {"BATCH": 4, "SEQ": 256, "VOCAB": 5021, "HIDDEN": 256}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, vocab: int, max_positions: int, hidden: int, eps: float):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Parameter(0.5 * torch.randn(max_positions, hidden))
        self.ln = nn.LayerNorm(hidden, eps=eps)
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tokens(ids) + self.positions[: ids.shape[1]]
        return self.ln(x)


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return [VOCAB, SEQ, HIDDEN, 1e-12]


def get_test_inputs():
    return [
        [torch.randint(0, VOCAB, (1, 1))],
        [torch.randint(0, VOCAB, (3, 129))],
        [torch.randint(0, VOCAB, (40, 6)).t()],
    ]
