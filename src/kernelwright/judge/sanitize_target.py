"""What `--sanitize` runs under compute-sanitizer (judge.sanitize): one forward of the candidate
on get_inputs() under a fixed seed, then a read of every output.

    python -m kernelwright.judge.sanitize_target PROBLEM CANDIDATE_DIR [SIZE]

SIZE is the problem's size the verdict used (problems.sizes: full, the default, or cpu). Prints KW_SANITIZE_DONE when the forward and the read completed. It runs candidate code, so it
only ever runs in a process of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

SEED = 12345


def load(argv: list[str]) -> tuple[ModuleType, ModuleType]:
    """(problem, candidate) modules of a target's command line PROBLEM CANDIDATE [SIZE]: the
    problem at the size the verdict used, as the judge's children import it. Shared with the
    ncu target (agent.profile)."""
    from kernelwright.judge import inputs

    problem_path, cand = Path(argv[0]), Path(argv[1])
    size = argv[2] if len(argv) > 2 else "full"
    problem = inputs.import_file(problem_path, "kw_problem", size=size)
    module = inputs.import_file(cand / "model_new.py" if cand.is_dir() else cand, "kw_candidate")
    return problem, module


def prepared(argv: list[str], seed: int) -> tuple[Any, list[Any]]:
    """(ModelNew on the GPU, get_inputs() there) of a target's command line (load), both under
    `seed`, the model holding the reference's weights where names and shapes match, as the
    candidate child sets it up. Shared with the ncu target (agent.profile.main)."""
    import torch

    from kernelwright.judge import inputs
    from kernelwright.judge.child_candidate import _copy_weights
    from kernelwright.core.records import Case

    dev = torch.device("cuda")
    problem, cand = load(argv)
    reference = inputs.init_model(problem, problem.Model, seed, dev)
    model = inputs.init_model(problem, cand.ModelNew, seed, dev)
    _copy_weights(reference, model)  # as the candidate child does
    del reference
    return model, inputs.raw_inputs(problem, Case("native", seed), dev)


def main(argv: list[str]) -> int:
    import torch

    from kernelwright.judge.correctness import as_output_list

    model, values = prepared(argv, SEED)
    with torch.no_grad():
        out = model(*values)
        torch.cuda.synchronize()
        # read every output element on the device: an element never written is an uninitialised
        # read for initcheck
        for o in as_output_list(out):
            if isinstance(o, torch.Tensor) and o.is_cuda and o.numel():
                o.double().sum().item()
    torch.cuda.synchronize()
    print("KW_SANITIZE_DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
