"""The skill text (the core of the system prompt), filled for one objective and device.

skill.md holds the text with four placeholders, `{device}`, `{target}`, `{policy_rules}` and
`{candidate}`, replaced literally (the text holds C++ braces, so str.format is not used).
`{candidate}` is the language's own section: skill_cuda.md (CUDA C++, or C++ on the CPU backend)
or skill_triton.md, as the objective's `language` says.
"""

from __future__ import annotations

from pathlib import Path

from kernelwright.agent.objective import Objective
from kernelwright.judge.policy import DEFAULT_TOLERANCE, PRECISION_TOLERANCE

SKILL_PATH = Path(__file__).with_name("skill.md")
PLACEHOLDERS = ("{device}", "{target}", "{policy_rules}", "{candidate}")
GPU = "an NVIDIA GPU with CUDA (the reference machine is an H200: Hopper, sm_90, 132 SMs, 60 MB of L2, HBM3e at 4.8 TB/s peak)"

DEVICES = {  # (device, language) -> the device sentence
    ("cuda", "cuda"): f"{GPU}. Kernels are CUDA C++ built by nvcc",
    ("cpu", "cuda"): ("the CPU backend (no GPU): kernels are C++ built by g++ with -O3 -march=native -fopenmp and called "
                      "the same way as CUDA ones. CPU times are for practice only"),
    ("cuda", "triton"): f"{GPU}. Kernels are Triton, compiled by Triton's JIT at their first call",
    ("cpu", "triton"): ("the CPU backend (no GPU): Triton kernels run in Triton's interpreter, which checks results but says "
                        "nothing about speed. CPU times are for practice only"),
}


def skill_template() -> str:
    """skill.md as written."""
    return SKILL_PATH.read_text()


def render_skill(objective: Objective, device: str) -> str:
    """The skill text for this objective on this device ("cuda" or "cpu"), in its language."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be one of ('cuda', 'cpu'), got {device!r}")
    language = objective.language
    text = skill_template()
    section = SKILL_PATH.with_name(f"skill_{language}.md").read_text().rstrip("\n")
    for key, value in (("{device}", DEVICES[(device, language)]), ("{target}", target_text(objective)),
                       ("{policy_rules}", policy_rules(objective)), ("{candidate}", section)):
        text = text.replace(key, value)
    return text


def target_text(objective: Objective) -> str:
    """The goal in words."""
    against = "the faster of eager PyTorch and torch.compile" if objective.compile_baseline and objective.baselines != "skip" else "eager PyTorch"
    if objective.target_speedup is None:
        return f"a correct candidate as much faster than {against} as you can make it"
    return f"a correct candidate at least {objective.target_speedup:g}x faster than {against}; faster still is better"


def policy_rules(objective: Objective) -> str:
    """The fairness rules of this run, as a short list."""
    rules = [_tolerance(objective), f"{objective.seeds} secret seed(s) per judgement"]
    rules.append("torch compute is allowed (but your own kernels should do the work that matters)" if objective.allow_torch_compute
                 else "torch compute is refused: only allocation, views and layout copies")
    libs = ", ".join(objective.libraries)
    rules.append(f"library kernels allowed: {libs}" if libs else "no library kernels (cuBLAS, cuDNN, CUTLASS, ...)")
    return "; ".join(rules) + "."


def _tolerance(objective: Objective) -> str:
    """The float32 tolerance in words, with the precision allowance."""
    if objective.precision == "fp32":
        base = DEFAULT_TOLERANCE["float32"]
        mode = "strict fp32 (no TF32, no half precision inside)"
    else:
        base = PRECISION_TOLERANCE[objective.precision]
        mode = f"{objective.precision} allowed inside (the baselines get the same allowance)"
    atol = objective.atol if objective.atol is not None else base["atol"]
    rtol = objective.rtol if objective.rtol is not None else base["rtol"]
    own = "" if objective.atol is not None and objective.rtol is not None else " unless the problem sets its own TOLERANCE"
    return (f"{mode}; an element passes when |out - ref| <= {atol:g} * max(1, rms(ref)) + {rtol:g} * |ref| "
            f"(float32 outputs{own}; other dtypes have their own defaults)")
