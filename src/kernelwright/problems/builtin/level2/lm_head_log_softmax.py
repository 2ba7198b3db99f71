"""Language-model head: bias-free projection 1024 -> 32000 vocabulary, logits divided by a temperature,
then log-softmax over the vocabulary. Hidden (4, 512, 1024): 8 MB; weight 131 MB; output 262 MB; 134 GFLOP."""
import torch
import torch.nn as nn

CATEGORY = "gemm_epilogue"

BATCH, SEQ, D_MODEL, VOCAB = 4, 512, 1024, 32000
CPU_SIZE = {"BATCH": 1, "SEQ": 128, "D_MODEL": 256, "VOCAB": 4000}  # the CPU backend's size (problems.sizes)


class Model(nn.Module):
    def __init__(self, d_model: int, vocab_size: int, temperature: float):
        super().__init__()
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        self.temperature = temperature

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden) / self.temperature
        return torch.log_softmax(logits, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, SEQ, D_MODEL)]


def get_init_inputs():
    return [D_MODEL, VOCAB, 0.7]


def get_test_inputs():
    return [
        [torch.randn(1, 3, D_MODEL)],
        [torch.randn(2, 45, D_MODEL)],
        [torch.randn(D_MODEL, 11).t()],
    ]
