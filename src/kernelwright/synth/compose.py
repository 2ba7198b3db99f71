"""Composition: 1 to 5 seed operators stacked into one KernelBench-format `Model`, rule by rule.

`compose(seed, index)` is a pure function of its arguments: the same seed and index give the same
task on every machine with the same registry. It draws the number of operators, a first operator
(mostly a compute-heavy one: a GEMM, convolution or attention) with an input shape for its layout, then
operators that apply to the activation so far, tracking shapes at both scales with each operator's
shape rule. The rule's answer is checked later by running the model on meta tensors (filters).

`Spec.render(batch, scale)` writes the source: constructor arguments and sizes as module constants,
`get_inputs()` and `get_init_inputs()` as KernelBench has them. `scale="small"` writes the same program
with the batch and spatial sizes of the check scale: the execution filters on a CPU run that text.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from kernelwright.synth import ops
from kernelwright.synth.ops import Act, Names, Step

OP_COUNT_WEIGHTS = {1: 0.10, 2: 0.42, 3: 0.26, 4: 0.13, 5: 0.09}  # CUDA Agent's set was 84 % two-operator; ours spreads wider
HEAVY_FIRST = 0.75  # chance that the first operator is a compute-heavy one
TRIES = 24  # draws per position before giving up on a composition

INPUT_SIZES = {  # per layout: feature/channel choices and full spatial choices (batch comes from the runtime proxy)
    "vec": {"features": [256, 512, 1024, 2048, 4096, 8192, 16384]},
    "seq": {"features": [64, 128, 256, 512, 1024], "seq_len": [128, 256, 512, 1024, 2048, 4096]},
    "ncl": {"channels": [3, 16, 32, 64, 128], "length": [512, 1024, 4096, 16384, 65536]},
    "nchw": {"channels": [3, 16, 32, 64], "height": [32, 64, 128, 224, 256, 512]},
    "ncdhw": {"channels": [3, 8, 16], "depth": [8, 16, 32, 64], "height": [32, 64, 128]},
}


@dataclass(frozen=True)
class Spec:
    """A composed task, before its batch size is chosen."""

    seed: int
    index: int
    layout: str  # the input's layout
    inputs: tuple[tuple[str, int, int], ...]  # input dims after the batch: (constant name, full, small)
    steps: tuple[Step, ...]

    @property
    def ops(self) -> list[str]:
        return [s.op for s in self.steps]

    @property
    def name(self) -> str:
        return "_".join(s.label for s in self.steps)

    @property
    def task_id(self) -> str:
        return f"syn-s{self.seed}-{self.index:06d}"

    @property
    def out(self) -> Act:
        return self.steps[-1].out

    def render(self, batch: int, scale: str = "full") -> str:
        if scale not in ("full", "small"):
            raise ValueError(f"scale must be 'full' or 'small', got {scale!r}")
        return _render(self, batch if scale == "full" else ops.SMALL_BATCH, scale)


def compose(seed: int, index: int, weights: dict[int, float] | None = None) -> Spec | None:
    """The task at (seed, index), or None when no operator stack could be drawn."""
    rng = random.Random(f"kernelwright-synth:{seed}:{index}")
    weights = weights or OP_COUNT_WEIGHTS
    n = rng.choices(list(weights), weights=list(weights.values()))[0]
    first = _first(rng)
    if first is None:
        return None
    layout, inputs, _, step = first
    steps, act = [step], step.out
    for _ in range(n - 1):
        nxt = _next(rng, act, steps, inputs, layout)
        if nxt is None:
            return None
        steps.append(nxt)
        act = nxt.out
    return Spec(seed, index, layout, inputs, tuple(steps))


def _input(rng: random.Random, layout: str, names: Names) -> tuple[tuple[tuple[str, int, int], ...], Act]:
    sizes = INPUT_SIZES[layout]
    feat_key = "features" if "features" in sizes else "channels"
    feat = rng.choice(sizes[feat_key])
    names.used.add(f"in_{feat_key}")
    spatial = []
    for dim in ops.SPATIAL_NAMES.get(layout, ()):
        choices = sizes.get(dim, sizes.get("height"))
        value = spatial[-1][1] if dim == "width" and rng.random() < 0.7 else rng.choice(choices)  # mostly square
        spatial.append((dim, value, ops.SMALL_SPATIAL[layout]))
        names.used.add(dim)
    feature = (f"in_{feat_key}", feat, feat)
    dims = (feature, *spatial) if layout in ops.CHANNEL_LAYOUTS or layout == "vec" else (*spatial, feature)
    full = (1,) + tuple(d[1] for d in dims)
    small = (ops.SMALL_BATCH,) + tuple(d[2] for d in dims)
    return tuple(dims), Act(layout, full, small)


def _first(rng: random.Random) -> tuple[str, tuple[tuple[str, int, int], ...], Act, Step] | None:
    pool = sorted(ops.HEAVY) if rng.random() < HEAVY_FIRST else sorted(k for k, v in ops.START.items() if v)
    for _ in range(TRIES):
        name = rng.choice(pool)
        layout = rng.choice(ops.START[name])
        names = Names({"batch_size", "identity", "x"})
        inputs, act = _input(rng, layout, names)
        step = ops.REGISTRY[name](rng, act, names)
        if step is not None:
            return layout, inputs, act, _rename(step, inputs, names)
    return None


def _next(rng: random.Random, act: Act, steps: list[Step], inputs: tuple, layout: str) -> Step | None:
    names = Names({"batch_size", "identity", "x"} | {d[0] for d in inputs} | {a for s in steps for a, _ in s.args} | _attrs(steps))
    start = Act(layout, (1,) + tuple(d[1] for d in inputs), (ops.SMALL_BATCH,) + tuple(d[2] for d in inputs))
    for _ in range(TRIES):
        name = rng.choice(sorted(ops.HEAVY)) if rng.random() < 0.1 else rng.choice(sorted(ops.REGISTRY))
        if name == "residual" and (act != start or any(s.uses_identity for s in steps)):
            continue
        if name in ("attention", "bmm_gram") and any(s.op in ("attention", "bmm_gram") for s in steps):
            continue  # one quadratic operator per task keeps the sizes sane
        step = ops.REGISTRY[name](rng, act, names)
        if step is not None and step.out.spatial_ok():
            return _rename(step, inputs, names)
    return None


def _attrs(steps: list[Step]) -> set[str]:
    return {m.group(1) for s in steps for line in s.init for m in re.finditer(r"self\.(\w+)\s*=", line)}


def _rename(step: Step, inputs: tuple[tuple[str, int, int], ...], names: Names) -> Step:
    """Reuse the input's own constant where an operator asks for a fresh name with the same meaning
    and value (in_features_2 = 1024 -> in_features)."""
    given = {d[0]: d[1] for d in inputs}
    args, init = [], list(step.init)
    for arg, value in step.args:
        base = re.sub(r"_\d+$", "", arg)
        if base != arg and given.get(base) == value:
            init = [re.sub(rf"\b{arg}\b", base, line) for line in init]
            names.used.discard(arg)
            continue
        args.append((arg, value))
    return Step(step.op, step.label, step.forward, step.out, tuple(init), tuple(args), step.uses_identity)


def _ctor_args(spec: Spec) -> list[tuple[str, object]]:
    """Constructor arguments in order of first use: the input constants an operator reads, then its own."""
    given = {d[0]: d[1] for d in spec.inputs}
    seen: dict[str, object] = {}
    for step in spec.steps:
        text = "\n".join(step.init)
        for name, value in given.items():
            if name not in seen and re.search(rf"\b{name}\b", text):
                seen[name] = value
        for name, value in step.args:
            seen.setdefault(name, value)
    return list(seen.items())


def _render(spec: Spec, batch: int, scale: str) -> str:
    ctor = _ctor_args(spec)
    init = [line for s in spec.steps for line in s.init]
    fwd = (["identity = x"] if any(s.uses_identity for s in spec.steps) else []) + [line for s in spec.steps for line in s.forward]
    labels = " -> ".join(s.label for s in spec.steps)
    lines = [f'"""{spec.name}: {labels}.', "",
             f"Synthesised by kernelwright synth (seed {spec.seed}, task {spec.index}); the input is {spec.layout}.", '"""',
             "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
             "class Model(nn.Module):",
             f"    def __init__(self{''.join(', ' + n for n, _ in ctor)}):",
             "        super().__init__()"]
    lines += [f"        {line}" for line in init] or ["        pass"]
    lines += ["", "    def forward(self, x):"] + [f"        {line}" for line in fwd] + ["        return x", "", ""]
    lines.append(f"batch_size = {batch}")
    for name, full, small in spec.inputs:
        lines.append(f"{name} = {full if scale == 'full' else small}")
    input_names = {d[0] for d in spec.inputs}
    lines += [f"{name} = {value!r}" for name, value in ctor if name not in input_names]
    dims = ", ".join(["batch_size"] + [d[0] for d in spec.inputs])
    lines += ["", "", "def get_inputs():", f"    return [torch.randn({dims})]", "", "",
              "def get_init_inputs():", f"    return [{', '.join(n for n, _ in ctor)}]", ""]
    return "\n".join(lines)
