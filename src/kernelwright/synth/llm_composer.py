"""The optional LLM composer: a model writes each candidate's program, through the agent's backends.

The rule composer still draws the operators (compose.compose at the same seed and index), so the
operator mix stays seeded; the model is asked to write a realistic KernelBench-format program that
applies them in that order, sized for an eager time drawn inside the window. Its answer goes through
every filter like any other candidate (the meta run gives its proxy). This process only parses the
reply (ast), never runs it. On a CPU the execution filters run the model's program at the sizes it
chose, so they cost more than the rule composer's small-scale checks.
"""

from __future__ import annotations

import ast
import math
import random
from dataclasses import dataclass
from typing import Any

from kernelwright.agent.extract import code_blocks
from kernelwright.core.runs import Message, Role
from kernelwright.synth.compose import compose
from kernelwright import pysource

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
LAYOUT_WORDS = {"vec": "a batch of feature vectors (batch, features)", "seq": "a batch of sequences (batch, length, features)",
                "ncl": "a batch of 1-D signals (batch, channels, length)", "nchw": "a batch of images (batch, channels, height, width)",
                "ncdhw": "a batch of volumes (batch, channels, depth, height, width)"}


def prompt(labels: list[str], layout: str, target_ms: float) -> str:
    return (f"Write one PyTorch program in KernelBench format that applies these operators in this order: {' -> '.join(labels)}. "
            f"Its input is {LAYOUT_WORDS.get(layout, layout)}.\n"
            "Rules: a `class Model(nn.Module)` whose constructor takes its sizes and hyperparameters as arguments; a "
            "`forward` using torch only, with nothing random (no dropout); module-level constants for every size, "
            "`batch_size` first; `get_inputs()` returning a list of tensors made with torch.randn from those constants; "
            "`get_init_inputs()` returning the constructor's arguments. "
            f"Choose sizes so one eager fp32 forward takes about {target_ms:.0f} ms on an NVIDIA H200. "
            "Reply with one ```python block and nothing else.")


def program_of(text: str) -> tuple[str | None, str]:
    """The reply's program and '' , or None and why it has none (checked by parsing only)."""
    blocks = [b for b in code_blocks(text) if b.tag in ("python", "py", "")]
    if not blocks:
        return None, "the reply holds no python block"
    code = blocks[-1].code
    try:
        tree = pysource.parse(code)
    except SyntaxError as exc:
        return None, f"the program does not parse: {exc.msg} (line {exc.lineno})"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        return None, f"the program lacks {', '.join(missing)}"
    return code, ""


@dataclass
class LLMComposer:
    """Asks `backend` (llm.backend.make_backend) for each candidate's program."""

    backend: Any
    window_ms: tuple[float, float] = (1.0, 100.0)
    max_tokens: int = 4000

    def job(self, seed: int, index: int, weights: dict[int, float] | None) -> dict[str, Any]:
        spec = compose(seed, index, weights)
        task: dict[str, Any] = {"id": f"syn-s{seed}-{index:06d}", "index": index, "seed": seed, "composer": self.backend.name}
        if spec is None:
            return {"rejected": {"stage": "compose", "reason": "no operator stack could be drawn"}, "task": task}
        lo, hi = self.window_ms
        target = math.exp(random.Random(f"kernelwright-synth:{seed}:{index}:size").uniform(math.log(lo * 2), math.log(hi / 3)))
        labels = [s.label for s in spec.steps]
        task.update(name=spec.name, ops=spec.ops, n_ops=len(spec.steps), level=1 if len(spec.steps) == 1 else 2, layout=spec.layout)
        try:
            reply = self.backend.complete([Message(Role.USER, prompt(labels, spec.layout, target))], max_tokens=self.max_tokens)
        except Exception as exc:  # noqa: BLE001 - the backend's failure costs this candidate only
            return {"rejected": {"stage": "compose", "reason": f"the composer model failed: {type(exc).__name__}: {str(exc)[:200]}"}, "task": task}
        code, why = program_of(reply.text)
        if code is None:
            return {"rejected": {"stage": "compose", "reason": why}, "task": task}
        return {"source": code, "task": task}
