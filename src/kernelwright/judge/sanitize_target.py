"""What `--sanitize` runs under compute-sanitizer (judge.sanitize): one forward of the candidate
on get_inputs() under a fixed seed, then a read of every output.

    python -m kernelwright.judge.sanitize_target PROBLEM CANDIDATE_DIR

Prints KW_SANITIZE_DONE when the forward and the read completed. It runs candidate code, so it
only ever runs in a process of its own.
"""

from __future__ import annotations

import sys
from pathlib import Path

SEED = 12345


def main(argv: list[str]) -> int:
    import torch

    from kernelwright.judge import inputs
    from kernelwright.judge.child_candidate import _copy_weights
    from kernelwright.judge.correctness import as_output_list
    from kernelwright.judge.records import Case

    problem_path, cand_dir = Path(argv[0]), Path(argv[1])
    dev = torch.device("cuda")
    problem = inputs.import_file(problem_path, "kw_problem")
    cand = inputs.import_file(cand_dir / "model_new.py" if cand_dir.is_dir() else cand_dir, "kw_candidate")
    reference = inputs.init_model(problem, problem.Model, SEED, dev)
    model = inputs.init_model(problem, cand.ModelNew, SEED, dev)
    _copy_weights(reference, model)  # as the candidate child does
    del reference
    values = inputs.raw_inputs(problem, Case("native", SEED), dev)
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
