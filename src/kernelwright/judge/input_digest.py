"""The input check's keyed digest (judge.inputs.input_record and changed_inputs keep one per
input): by the judge's own kernel (judge.digest) where it loaded, else by torch operators.

Runs inside judge children only, imported with judge.inputs before any candidate code runs.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelwright.judge import digest  # bound at import: a lookup inside the check went through builtins.__import__

_T = torch._C.TensorBase  # tensor methods the candidate's objects are given through, never looked up on them

# Step inputs_unchanged asks whether the call left its inputs' bytes alone. It keeps a digest, not a
# copy of every input on the device (I more in the candidate child: judge.memory): the input's bytes
# read as 16-bit words x_j (bytes for one-byte dtypes), and
#     D = sum_j w_j * x_j, exactly (a Python integer),
# with weights w_j drawn uniformly from [1, 2**31) by a generator seeded from a key drawn fresh for
# every case. A change d (d_j = x'_j - x_j, not all zero) goes unseen only when sum_j w_j d_j = 0:
# fix every weight but one w_k with d_k != 0, and at most one of its 2**31 - 1 values does that, so
# whatever the change, the chance is at most 1 in 2**31 - 1 per changed input and case (the key is
# drawn after the inputs; like a copy would, it lives in the process the candidate runs in).
# Products stay below 2**47, sums of DIGEST_BLOCK of them below 2**63, and each block's sum is split
# into its high and low 31 bits before the blocks are added (on the device, fewer than 2**32 blocks
# of up to 2**32 each): no int64 ever wraps.

DIGEST_WORDS = 1 << 22  # words read at a time: 32 MiB of int64 weights, and room in the estimate for the words widened beside them ...
DIGEST_WORDS_CPU = 1 << 20  # ... at most this many on the CPU backend, where a chunk that fits the caches is faster
# (a 128 MiB tensor on 2 CPU cores: 0.41 s at 1 << 20, 0.52 s at 1 << 22). On the GPU a chunk costs
# three kernel launches. Whether CUDA's multiply of int64 by int16 widens a copy of the chunk first,
# as the CPU's does, is unmeasured, so the estimate (judge.memory.DIGEST_TEMP) holds room for it.
#
# The digest the check uses is the judge's own kernel's (judge.digest: the same form of sum, mod
# 2**61 - 1, in one pass and no temporaries), built before the candidate's import; the torch digest
# here is its fallback where that kernel cannot be built, and the estimate keeps room for it.
DIGEST_BLOCK = 1 << 16  # products summed in int64 before the split
_SPLIT = 1 << 31


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    t = _T.detach(t)  # a new tensor object: nothing the candidate set on the input's object is on it
    if t.is_quantized:
        t = _T.int_repr(t)  # its stored integers (a byte view of a quantized tensor is not one)
    if _T.is_conj(t):
        t = _T.conj(t)  # the same bytes with the lazy conjugation bit off (no copy); the bit itself is in judge.inputs._form
    if _T.is_neg(t):
        t = torch._C._VariableFunctions._neg_view(t)  # likewise the negative bit (a view of the same bytes)
    return t


def keyed(t: torch.Tensor, key: int, index: int) -> tuple[str, int]:
    """The keyed digest of a tensor's bytes by the judge's own kernel (judge.digest), or by torch
    operators (torch_digest) where that kernel did not load; which one is part of the value."""
    if not digest.available(t):
        return "torch", torch_digest(t, key, index)
    t = _bytes_of(t)
    if t.numel() == 0:
        return "native", 0
    k, total, first = key + 1_000_003 * index, 0, 0
    for slab in slabs(t):
        total += digest.digest_slab(slab, k, first)
        first += digest.words(slab)[0]
    return "native", total % digest.P


def torch_digest(t: torch.Tensor, key: int, index: int) -> int:
    """The keyed digest of a tensor's bytes in torch operators (above; the fallback of
    judge.digest's kernel); contiguous tensors are read in place, others a slab of their first
    dimension at a time."""
    t = _bytes_of(t)
    if t.numel() == 0:
        return 0
    gen = torch.Generator(device=t.device)
    chunk = 0
    weights = None  # one chunk's weights, times its words in place: freed, the block can take an output of its size (judge.memory)
    sums: list[torch.Tensor] = []  # every block's sum, split and added once at the end
    for slab in slabs(t):
        raw = slab.reshape(-1).view(torch.uint8)
        words = raw if t.element_size() == 1 else raw.view(torch.int16)  # a byte offset of a wider dtype is even
        step = DIGEST_WORDS if t.is_cuda else min(DIGEST_WORDS, DIGEST_WORDS_CPU)
        for start in range(0, words.numel(), step):
            part = words[start:start + step]
            gen.manual_seed((key + 1_000_003 * index + 7919 * chunk) % (1 << 63))
            chunk += 1
            n = part.numel()
            if weights is None:  # the first chunk of the first slab is the largest
                weights = torch.empty(n, dtype=torch.int64, device=t.device)
            prod = weights[:n].random_(1, _SPLIT, generator=gen)  # randint's own draw, in place
            prod.mul_(part)  # the words widened as they are multiplied (the CPU widens a copy of the chunk first)
            whole = n // DIGEST_BLOCK * DIGEST_BLOCK
            if whole:
                sums.append(prod[:whole].view(-1, DIGEST_BLOCK).sum(dim=1))
            if whole < n:
                sums.append(prod[whole:].sum(dim=0, keepdim=True))
    every = torch.cat(sums)
    hi, lo = every.floor_divide(_SPLIT).sum(), every.remainder(_SPLIT).sum()
    return int(hi.item()) * _SPLIT + int(lo.item())  # one synchronisation a tensor (two reads of two scalars)


SLAB_BYTES = 1 << 26  # a non-contiguous input is copied this much at a time (at least one index of its first dimension)


def slabs(t: torch.Tensor) -> Any:
    """The tensor itself when contiguous; else contiguous copies of SLAB_BYTES of its first dimension, one at a time."""
    if t.is_contiguous():  # 0-dim tensors included
        yield t
        return
    per = max(1, SLAB_BYTES // max(1, t[0].numel() * t.element_size()))
    for start in range(0, t.shape[0], per):
        yield t[start:start + per].contiguous()
