"""The seed operators: torch.nn modules and functional/tensor ops that composition may stack.

Every operator is a function `(rng, act, names) -> Step | None`: given the activation flowing through
the model (its layout and its shapes at both scales), it draws its arguments and returns the lines it
adds to `__init__` and `forward`, the constructor arguments it needs, and the activation it produces
(its shape rule), or None when it does not apply to that activation.

Activations have a layout that says which dimensions are which:

    vec (B, F)   seq (B, L, F)   ncl (B, C, L)   nchw (B, C, H, W)   ncdhw (B, C, D, H, W)   end (any)

The batch dimension and the spatial/sequence ones (B, L, H, W, D) are *scaled*: they take small values
when the execution filters run on a CPU (`small`) and full ones in the exported task (`full`). Channel
and feature dimensions are the same at both scales, so every constructor argument is too: an operator
never turns a scaled dimension into a constructor argument (no Linear over a flattened image).
`full` shapes are per sample (batch 1); the batch size is chosen later, by the runtime proxy.

Stochastic operators (dropout, rrelu, anything sampling) are excluded. The unary elementwise
functionals come from introspecting `torch.nn.functional` (`unary_functionals`): every function whose
arguments all have defaults, whose name says nothing stochastic or structural, and which, probed on a
small tensor, keeps its shape and gives the same output twice.
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

LAYOUTS = ("vec", "seq", "ncl", "nchw", "ncdhw")
CHANNEL_LAYOUTS = ("ncl", "nchw", "ncdhw")  # channel at dim 1, spatial after it
SPATIAL_NAMES = {"seq": ("seq_len",), "ncl": ("length",), "nchw": ("height", "width"), "ncdhw": ("depth", "height", "width")}
SMALL_SPATIAL = {"seq": 12, "ncl": 48, "nchw": 24, "ncdhw": 10}  # the check scale's spatial size per layout
SMALL_BATCH = 2
MAX_WEIGHT_ELEMENTS = 1 << 24  # 64 MB of fp32 weights per operator at most


@dataclass(frozen=True)
class Act:
    """The activation between two operators."""

    layout: str  # one of LAYOUTS or "end" (after a reduction that ends the stack)
    full: tuple[int, ...]  # shape in the exported task, batch 1
    small: tuple[int, ...]  # shape at the check scale (batch SMALL_BATCH)

    @property
    def feature(self) -> int:
        """The channel/feature size (unscaled): dim 1 for channel layouts, the last dim otherwise."""
        return self.full[1] if self.layout in CHANNEL_LAYOUTS else self.full[-1]

    def spatial_ok(self) -> bool:
        return all(d >= 1 for d in self.full) and all(d >= 1 for d in self.small)


@dataclass(frozen=True)
class Step:
    """One operator applied: what it adds to the model's source and what comes out."""

    op: str  # the operator's registry name
    label: str  # its short name in the task's name (Conv2d, GELU, ...)
    forward: tuple[str, ...]  # lines of forward(), acting on `x`
    out: Act
    init: tuple[str, ...] = ()  # lines of __init__
    args: tuple[tuple[str, object], ...] = ()  # constructor arguments: (name, value), also module constants
    uses_identity: bool = False  # forward reads `identity`, the model's input


@dataclass
class Names:
    """Unique names for attributes and constructor arguments within one model."""

    used: set[str] = field(default_factory=set)

    def __call__(self, base: str) -> str:
        name, k = base, 2
        while name in self.used:
            name, k = f"{base}_{k}", k + 1
        self.used.add(name)
        return name


Op = Callable[[random.Random, Act, Names], "Step | None"]
REGISTRY: dict[str, Op] = {}
HEAVY: set[str] = set()  # compute-heavy operators, preferred first
START: dict[str, tuple[str, ...]] = {}  # operator -> layouts it may start a model from


def op(name: str, *, heavy: bool = False, start: tuple[str, ...] = ()) -> Callable[[Op], Op]:
    def register(fn: Op) -> Op:
        REGISTRY[name] = fn
        if heavy:
            HEAVY.add(name)
        START[name] = start
        return fn
    return register


def _with(act: Act, dim: int, full: int, small: int) -> Act:
    f, s = list(act.full), list(act.small)
    f[dim], s[dim] = full, small
    return Act(act.layout, tuple(f), tuple(s))


def _conv_len(n: int, k: int, stride: int, pad: int, dilation: int = 1) -> int:
    return (n + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _deconv_len(n: int, k: int, stride: int, pad: int) -> int:
    return (n - 1) * stride - 2 * pad + k


# ---------------------------------------------------------------- heavy operators

@op("linear", heavy=True, start=("vec", "seq"))
def linear(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout not in ("vec", "seq"):
        return None
    out_f = rng.choice([256, 512, 1024, 2048, 4096, 8192])
    if act.feature * out_f > MAX_WEIGHT_ELEMENTS:
        return None
    attr, fin, fout = names("linear"), names("in_features"), names("out_features")
    bias = rng.random() < 0.8
    line = f"self.{attr} = nn.Linear({fin}, {fout}" + ("" if bias else ", bias=False") + ")"
    dim = len(act.full) - 1
    return Step("linear", "Gemm" if act.layout == "vec" else "Linear", (f"x = self.{attr}(x)",), _with(act, dim, out_f, out_f),
                (line,), ((fin, act.feature), (fout, out_f)))


def _conv(nd: int, transposed: bool) -> Op:
    layout = {1: "ncl", 2: "nchw", 3: "ncdhw"}[nd]
    cls = f"ConvTranspose{nd}d" if transposed else f"Conv{nd}d"

    def conv(rng: random.Random, act: Act, names: Names) -> Step | None:
        if act.layout != layout:
            return None
        c_out = rng.choice({1: [32, 64, 128, 256], 2: [16, 32, 64, 128], 3: [8, 16, 32]}[nd])
        k = rng.choice([2, 3, 4] if transposed else ([3, 5, 7] if nd == 1 else [1, 3, 5] if nd == 2 else [3]))
        stride = rng.choice([1, 2])
        pad = rng.choice([0, k // 2]) if not transposed else rng.choice([0, 1]) if k > 2 else 0
        if act.feature * c_out * k**nd > MAX_WEIGHT_ELEMENTS:
            return None
        length = (lambda n: _deconv_len(n, k, stride, pad)) if transposed else (lambda n: _conv_len(n, k, stride, pad))
        full = (1, c_out) + tuple(length(n) for n in act.full[2:])
        small = (act.small[0], c_out) + tuple(length(n) for n in act.small[2:])
        out = Act(layout, full, small)
        if not out.spatial_ok() or min(small[2:]) < 2:
            return None
        attr, cin, cout, ks = names("conv_transpose" if transposed else "conv"), names("in_channels"), names("out_channels"), names("kernel_size")
        extra = (f", stride={stride}" if stride != 1 else "") + (f", padding={pad}" if pad else "")
        line = f"self.{attr} = nn.{cls}({cin}, {cout}, {ks}{extra})"
        return Step(cls.lower(), cls, (f"x = self.{attr}(x)",), out, (line,), ((cin, act.feature), (cout, c_out), (ks, k)))
    return conv


for _nd in (1, 2, 3):
    op(f"conv{_nd}d", heavy=True, start=({1: "ncl", 2: "nchw", 3: "ncdhw"}[_nd],))(_conv(_nd, False))
    op(f"convtranspose{_nd}d", heavy=True, start=({1: "ncl", 2: "nchw", 3: "ncdhw"}[_nd],))(_conv(_nd, True))


@op("conv2d_depthwise", heavy=True, start=("nchw",))
def conv2d_depthwise(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout != "nchw" or act.feature < 8:
        return None
    k = rng.choice([3, 5, 7])
    attr, ch, ks = names("depthwise"), names("in_channels"), names("kernel_size")
    line = f"self.{attr} = nn.Conv2d({ch}, {ch}, {ks}, padding={ks} // 2, groups={ch})"
    return Step("conv2d_depthwise", "DepthwiseConv2d", (f"x = self.{attr}(x)",), act, (line,), ((ch, act.feature), (ks, k)))


@op("attention", heavy=True, start=("seq",))
def attention(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout != "seq" or act.feature > 1024:
        return None
    causal = rng.random() < 0.5
    return Step("attention", "CausalSelfAttention" if causal else "SelfAttention",
                (f"x = F.scaled_dot_product_attention(x, x, x{', is_causal=True' if causal else ''})",), act)


@op("bmm_gram", heavy=True, start=("seq",))
def bmm_gram(rng: random.Random, act: Act, names: Names) -> Step | None:
    """x^T x over the sequence: (B, L, F) -> (B, F, F), a covariance-like matrix (features stay unscaled)."""
    if act.layout != "seq" or act.feature > 2048:
        return None
    f = act.feature
    return Step("bmm_gram", "Gram", ("x = torch.bmm(x.transpose(1, 2), x)",), Act("seq", (1, f, f), (act.small[0], f, f)))


# ---------------------------------------------------------------- normalisation

@op("batchnorm", start=("vec", "ncl", "nchw", "ncdhw"))
def batchnorm(rng: random.Random, act: Act, names: Names) -> Step | None:
    nd = {"vec": 1, "ncl": 1, "nchw": 2, "ncdhw": 3}.get(act.layout)
    if nd is None:
        return None
    attr, ch = names("bn"), names("num_features")
    init = (f"self.{attr} = nn.BatchNorm{nd}d({ch})",
            "with torch.no_grad():  # running statistics that are not the identity",
            f"    self.{attr}.running_mean.uniform_(-0.5, 0.5)",
            f"    self.{attr}.running_var.uniform_(0.5, 2.0)")
    return Step("batchnorm", f"BatchNorm{nd}d", (f"x = self.{attr}(x)",), act, init, ((ch, act.feature),))


@op("layernorm", start=("vec", "seq"))
def layernorm(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout not in ("vec", "seq") or act.feature < 16:
        return None
    attr, f = names("norm"), names("normalized_shape")
    rms = rng.random() < 0.35
    cls = "RMSNorm" if rms else "LayerNorm"
    return Step("rmsnorm" if rms else "layernorm", cls, (f"x = self.{attr}(x)",), act, (f"self.{attr} = nn.{cls}({f})",), ((f, act.feature),))


@op("groupnorm", start=CHANNEL_LAYOUTS)
def groupnorm(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout not in CHANNEL_LAYOUTS or act.feature < 4:
        return None
    groups = rng.choice([g for g in (2, 4, 8, 16) if act.feature % g == 0 and act.feature // g >= 2] or [1])
    attr, g, ch = names("group_norm"), names("num_groups"), names("num_channels")
    return Step("groupnorm", "GroupNorm", (f"x = self.{attr}(x)",), act, (f"self.{attr} = nn.GroupNorm({g}, {ch})",), ((g, groups), (ch, act.feature)))


@op("instancenorm", start=CHANNEL_LAYOUTS)
def instancenorm(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout not in CHANNEL_LAYOUTS or min(act.small[2:]) < 2:
        return None
    nd = len(act.full) - 2
    attr, ch = names("instance_norm"), names("num_features")
    return Step("instancenorm", f"InstanceNorm{nd}d", (f"x = self.{attr}(x)",), act,
                (f"self.{attr} = nn.InstanceNorm{nd}d({ch}, affine=True)",), ((ch, act.feature),))


def _along_features(act: Act) -> int | None:
    """The dim an operator along the channels/features acts on (None when it does not apply)."""
    if act.layout not in LAYOUTS or act.feature < 2:
        return None
    return 1 if act.layout in CHANNEL_LAYOUTS else -1


@op("l2_normalize", start=LAYOUTS)
def l2_normalize(rng: random.Random, act: Act, names: Names) -> Step | None:
    dim = _along_features(act)
    return None if dim is None else Step("l2_normalize", "L2Normalize", (f"x = F.normalize(x, dim={dim})",), act)


# ---------------------------------------------------------------- softmax and friends

@op("softmax", start=LAYOUTS)
def softmax(rng: random.Random, act: Act, names: Names) -> Step | None:
    dim = _along_features(act)
    if dim is None:
        return None
    fn = rng.choice(["softmax", "log_softmax"])
    return Step(fn, "Softmax" if fn == "softmax" else "LogSoftmax", (f"x = torch.{fn}(x, dim={dim})",), act)


# ---------------------------------------------------------------- elementwise

@lru_cache(maxsize=1)
def unary_functionals() -> tuple[str, ...]:
    """torch.nn.functional's deterministic, shape-keeping functions whose arguments all have defaults."""
    import torch
    import torch.nn.functional as F

    deny = ("dropout", "rrelu", "gumbel", "sample", "pool", "norm", "loss", "soft" + "max", "softmin", "pad", "embedding",
            "one_hot", "interpolate", "upsample", "grid", "affine", "fold", "pixel", "shuffle", "bilinear", "linear",
            "conv", "attention", "threshold", "glu", "has_torch", "handle", "boolean", "assert", "tensor", "divide")
    found = []
    probe = torch.linspace(-3.0, 3.0, 24).reshape(2, 3, 4)
    for name in sorted(dir(F)):
        fn = getattr(F, name)
        if name.startswith("_") or name.endswith("_") or any(d in name for d in deny) or not callable(fn):
            continue
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            continue
        if not params or any(p.default is inspect.Parameter.empty for p in params[1:]):
            continue
        try:
            a, b = fn(probe.clone()), fn(probe.clone())
        except Exception:  # noqa: BLE001 - the probe decides which functions qualify
            continue
        if isinstance(a, torch.Tensor) and a.shape == probe.shape and a.dtype == probe.dtype and torch.equal(a, b) and not torch.equal(a, probe):
            found.append(name)
    return tuple(found)


@op("activation", start=LAYOUTS)
def activation(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout == "end":
        return None
    name = rng.choice(unary_functionals())
    call = f"torch.{name}" if name in ("sigmoid", "tanh") else f"F.{name}"  # F.sigmoid and F.tanh are deprecated aliases
    return Step(f"F.{name}", name.replace("_", " ").title().replace(" ", ""), (f"x = {call}(x)",), act)


@op("param_activation", start=LAYOUTS)
def param_activation(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout == "end":
        return None
    choices = [
        ("leaky_relu", "LeakyReLU", lambda: f"x = F.leaky_relu(x, negative_slope={rng.choice([0.01, 0.1, 0.2])})"),
        ("hardtanh", "Hardtanh", lambda: "x = F.hardtanh(x, min_val={0}, max_val={1})".format(*rng.choice([(-1.0, 1.0), (-0.5, 0.5), (-2.0, 2.0)]))),
        ("clamp", "Clamp", lambda: "x = torch.clamp(x, min={0}, max={1})".format(*rng.choice([(-1.0, 1.0), (0.0, 6.0), (-0.5, 2.0)]))),
        ("elu", "ELU", lambda: f"x = F.elu(x, alpha={rng.choice([0.5, 1.0, 2.0])})"),
        ("softplus", "Softplus", lambda: f"x = F.softplus(x, beta={rng.choice([0.5, 2.0])})"),
        ("gelu_tanh", "GELUTanh", lambda: 'x = F.gelu(x, approximate="tanh")'),
        ("gelu", "GELU", lambda: "x = F.gelu(x)"),
        ("logsigmoid", "LogSigmoid", lambda: "x = F.logsigmoid(x)"),
        ("softshrink", "Softshrink", lambda: f"x = F.softshrink(x, lambd={rng.choice([0.25, 0.5])})"),
    ]
    key, label, line = rng.choice(choices)
    return Step(key, label, (line(),), act)


@op("scalar", start=LAYOUTS)
def scalar(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout == "end":
        return None
    kind = rng.choice(["mul", "add", "sub", "div"])
    value = rng.choice([0.5, 1.5, 2.0, 3.0, 0.1, 0.7])
    sym = {"mul": "*", "add": "+", "sub": "-", "div": "/"}[kind]
    attr = names({"mul": "scale", "add": "shift", "sub": "shift", "div": "divisor"}[kind])
    return Step(f"scalar_{kind}", {"mul": "Scale", "add": "Add", "sub": "Subtract", "div": "Divide"}[kind],
                (f"x = x {sym} self.{attr}",), act, (f"self.{attr} = {attr}",), ((attr, value),))


@op("channel_param", start=LAYOUTS)
def channel_param(rng: random.Random, act: Act, names: Names) -> Step | None:
    """x + bias or x * scale with a learnable per-channel (per-feature) parameter."""
    if act.layout == "end":
        return None
    kind = rng.choice(["add", "mul"])
    attr, shape_name = names("bias" if kind == "add" else "scale"), names("bias_shape" if kind == "add" else "scale_shape")
    shape = (act.feature,) + (1,) * (len(act.full) - 2) if act.layout in CHANNEL_LAYOUTS else (act.feature,)
    init = "torch.randn({0}) * 0.5" if kind == "add" else "1.0 + 0.5 * torch.randn({0})"
    sym = "+" if kind == "add" else "*"
    return Step(f"channel_{kind}", "BiasAdd" if kind == "add" else "ChannelScale", (f"x = x {sym} self.{attr}",), act,
                (f"self.{attr} = nn.Parameter({init.format(shape_name)})",), ((shape_name, shape),))


@op("gate", start=LAYOUTS)
def gate(rng: random.Random, act: Act, names: Names) -> Step | None:
    """A self-gate: x * sigmoid(x) style, written out (swish, tanh gate)."""
    if act.layout == "end":
        return None
    fn = rng.choice(["sigmoid", "tanh"])
    return Step(f"gate_{fn}", f"{fn.title()}Gate", (f"x = x * torch.{fn}(x)",), act)


@op("residual", start=())
def residual(rng: random.Random, act: Act, names: Names) -> Step | None:
    """x + the model's input, where the shapes still match."""
    return Step("residual", "ResidualAdd", ("x = x + identity",), act, uses_identity=True)


# ---------------------------------------------------------------- pooling and reductions

@op("pool", start=CHANNEL_LAYOUTS)
def pool(rng: random.Random, act: Act, names: Names) -> Step | None:
    if act.layout not in CHANNEL_LAYOUTS:
        return None
    nd = len(act.full) - 2
    k = rng.choice([2, 3]) if nd < 3 else 2
    kind = rng.choice(["Max", "Avg"])
    full = act.full[:2] + tuple(_conv_len(n, k, k, 0) for n in act.full[2:])
    small = act.small[:2] + tuple(_conv_len(n, k, k, 0) for n in act.small[2:])
    out = Act(act.layout, full, small)
    if not out.spatial_ok() or min(small[2:]) < 2:
        return None
    attr, ks = names(f"{kind.lower()}_pool"), names("pool_kernel_size")
    return Step(f"{kind.lower()}pool{nd}d", f"{kind}Pool{nd}d", (f"x = self.{attr}(x)",), out,
                (f"self.{attr} = nn.{kind}Pool{nd}d({ks})",), ((ks, k),))


@op("global_pool", start=CHANNEL_LAYOUTS + ("seq",))
def global_pool(rng: random.Random, act: Act, names: Names) -> Step | None:
    """Mean or max over every spatial/sequence dimension: to (B, C) or (B, F)."""
    if act.layout not in CHANNEL_LAYOUTS + ("seq",):
        return None
    dims = (1,) if act.layout == "seq" else tuple(range(2, len(act.full)))
    dims_text = str(dims[0]) if len(dims) == 1 else str(dims)
    kind = rng.choice(["mean", "amax"])
    return Step(f"global_{kind}", "GlobalAvgPool" if kind == "mean" else "GlobalMaxPool", (f"x = torch.{kind}(x, dim={dims_text})",),
                Act("vec", (1, act.feature), (act.small[0], act.feature)))


@op("channel_reduce", start=LAYOUTS)
def channel_reduce(rng: random.Random, act: Act, names: Names) -> Step | None:
    """sum / mean / max / logsumexp over the channels or features, keeping the dimension."""
    if act.layout not in LAYOUTS or act.feature < 2:
        return None
    dim = 1 if act.layout in CHANNEL_LAYOUTS else len(act.full) - 1
    fn = rng.choice(["sum", "mean", "amax", "logsumexp"])
    return Step(f"reduce_{fn}", {"sum": "Sum", "mean": "Mean", "amax": "Max", "logsumexp": "LogSumExp"}[fn],
                (f"x = torch.{fn}(x, dim={dim}, keepdim=True)",), _with(act, dim, 1, 1))


@op("cumsum", start=LAYOUTS)
def cumsum(rng: random.Random, act: Act, names: Names) -> Step | None:
    dim = _along_features(act)
    return None if dim is None else Step("cumsum", "Cumsum", (f"x = torch.cumsum(x, dim={dim})",), act)


@op("transpose", start=("seq", "ncl"))
def transpose(rng: random.Random, act: Act, names: Names) -> Step | None:
    """(B, L, F) <-> (B, C, L): a sequence becomes channels-first for a Conv1d, and back."""
    if act.layout not in ("seq", "ncl"):
        return None
    to = "ncl" if act.layout == "seq" else "seq"
    return Step("transpose", "Transpose", ("x = x.transpose(1, 2)",),
                Act(to, (1, act.full[2], act.full[1]), (act.small[0], act.small[2], act.small[1])))
