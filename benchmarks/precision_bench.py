"""Calibrate the precision policy on the GPU: does the strict fp32 tolerance refuse TF32, fp16 and
bf16 shortcuts on normal inputs while exact fp32 in another summation order passes, and do the
allowances (policy.PRECISION_TOLERANCE) accept the shortcut they allow?

    PYTHONPATH=src python3 benchmarks/precision_bench.py --out DIR [--device cuda] [--commit SHA]

Every output is compared with the judge's own function (judge.correctness.compare) against the
strict fp32 reference (TF32 off), under the strict tolerance and under each allowance. Writes
DIR/precision_DEVICE.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from kernelwright.judge.correctness import compare
from kernelwright.judge.reference_timing import tf32
from kernelwright.judge.policy import DEFAULT_TOLERANCE, PRECISION_TOLERANCE


def _split_k(a: torch.Tensor, b: torch.Tensor, parts: int = 8) -> torch.Tensor:
    """a @ b in fp32 as the sum of `parts` partial products over K, added last to first."""
    ks = torch.chunk(torch.arange(a.shape[1], device=a.device), parts)
    out = torch.zeros(a.shape[0], b.shape[1], device=a.device)
    for k in reversed(ks):
        out += a[:, k] @ b[k, :]
    return out


def _conv_im2col(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """3x3 convolution, padding 1, as unfold and a matrix product (another summation order)."""
    n, _, h, wd = x.shape
    cols = F.unfold(x, 3, padding=1)  # n, c*9, h*w
    out = w.reshape(w.shape[0], -1) @ cols  # n, o, h*w
    return out.reshape(n, w.shape[0], h, wd)


def _chunked_sum(x: torch.Tensor, parts: int = 16) -> torch.Tensor:
    return torch.stack([c.sum(-1) for c in torch.chunk(x, parts, dim=-1)][::-1], -1).sum(-1)


def _softmax_two_pass(x: torch.Tensor) -> torch.Tensor:
    m = x.max(-1, keepdim=True).values
    e = torch.exp(x - m)
    return e / _chunked_sum(e).unsqueeze(-1)


def _layernorm_manual(x: torch.Tensor) -> torch.Tensor:
    mean = _chunked_sum(x).unsqueeze(-1) / x.shape[-1]
    var = _chunked_sum((x - mean) ** 2).unsqueeze(-1) / x.shape[-1]
    return (x - mean) / torch.sqrt(var + 1e-5)


def _half(fn: Callable[..., torch.Tensor], dtype: torch.dtype) -> Callable[..., torch.Tensor]:
    return lambda *xs: fn(*(x.to(dtype) for x in xs)).float()


def cases(dev: torch.device) -> list[dict]:
    """(name, make inputs, reference op, exact other-order op)."""
    mm = lambda a, b: a @ b  # noqa: E731
    conv = lambda x, w: F.conv2d(x, w, padding=1)  # noqa: E731
    out = []
    for k in (256, 1024, 4096, 16384):
        out.append(dict(name=f"matmul 1024x{k}x1024", shapes=[(1024, k), (k, 1024)], op=mm, other=_split_k))
    out.append(dict(name="conv2d 16x64x64x64, 3x3, 64 out", shapes=[(16, 64, 64, 64), (64, 64, 3, 3)], op=conv, other=_conv_im2col))
    out.append(dict(name="row sum 4096x32768", shapes=[(4096, 32768)], op=lambda x: x.sum(-1), other=_chunked_sum))
    out.append(dict(name="softmax 4096x32768", shapes=[(4096, 32768)], op=lambda x: torch.softmax(x, -1), other=_softmax_two_pass))
    out.append(dict(name="layernorm 8192x8192", shapes=[(8192, 8192)], op=lambda x: F.layer_norm(x, x.shape[-1:]), other=_layernorm_manual))
    return out


def inputs(shapes: list[tuple[int, ...]], dist: str, seed: int, dev: torch.device) -> list[torch.Tensor]:
    g = torch.Generator(device=dev).manual_seed(seed)
    xs = []
    for s in shapes:
        if dist == "normal":
            xs.append(torch.randn(s, generator=g, device=dev))
        else:
            xs.append(torch.rand(s, generator=g, device=dev) * 2 - 1)
    return xs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--small", action="store_true", help="shapes divided by 8 (a CPU smoke run; not the calibration)")
    args = ap.parse_args()
    dev = torch.device(args.device)
    strict = (DEFAULT_TOLERANCE["float32"]["atol"], DEFAULT_TOLERANCE["float32"]["rtol"])
    tols = {"strict fp32": strict, **{p: (t["atol"], t["rtol"]) for p, t in PRECISION_TOLERANCE.items()}}
    rows = []
    for case in cases(dev):
        for dist in ("normal", "uniform"):
            for seed in (1, 2):
                shapes = [tuple(max(1, d // 8) if d >= 64 else d for d in sh) for sh in case["shapes"]] if args.small else case["shapes"]
                xs = inputs(shapes, dist, seed, dev)
                with tf32(False), torch.no_grad():
                    ref = case["op"](*xs)
                    variants = {
                        "fp64, rounded": lambda: case["op"](*(x.double() for x in xs)).float(),
                        "fp32, other order": lambda: case["other"](*xs),
                        "fp16 inputs": lambda: _half(case["op"], torch.float16)(*xs),
                        "bf16 inputs": lambda: _half(case["op"], torch.bfloat16)(*xs),
                    }
                    outs = {name: fn() for name, fn in variants.items()}
                with tf32(True), torch.no_grad():
                    outs["tf32"] = case["op"](*xs)
                for variant, o in outs.items():
                    row = {"case": case["name"], "dist": dist, "seed": seed, "variant": variant}
                    for tname, (atol, rtol) in tols.items():
                        c = compare(ref, o, atol, rtol)
                        row[tname] = {"ok": c.ok, "n_bad": c.n_bad, "max_abs": c.max_abs_error, "max_rel": c.max_rel_error}
                    rows.append(row)
                    print(f"{case['name']:<32} {dist:<8} {seed} {variant:<18} " + " ".join(
                        f"{t}:{'pass' if row[t]['ok'] else 'FAIL'}({row[t]['n_bad']})" for t in tols), flush=True)
    prov = {"device": args.device, "gpu": torch.cuda.get_device_name(0) if dev.type == "cuda" else platform.processor(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "commit": args.commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv), "tolerances": tols}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"precision_{args.device}.json"
    path.write_text(json.dumps({"provenance": prov, "rows": rows}, indent=1))
    # the summary: per variant and tolerance, in how many of the cases it passes
    print("\nvariant             " + " ".join(f"{t:>12}" for t in tols))
    for variant in outs:
        sel = [r for r in rows if r["variant"] == variant]
        print(f"{variant:<20}" + " ".join(f"{sum(r[t]['ok'] for r in sel):>6}/{len(sel):<5}" for t in tols))
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
