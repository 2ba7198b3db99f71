"""A synthesis worker's commands, served by a judge child of the `hosted` role (judge.workers).

Why a hosted role: every process that runs generated code starts through the judge's one launcher,
and the judge must not import synth; so the caller (synth.pool) names this module in the child's
config, and the child imports it by that name (the judge's code names no module above it).

The child is in the sandbox before this module is imported (judge.child). `setup` takes the run's
context once; each `examine` runs one job through the filters (synth.filters.examine) and answers
its result, JSON like every child's reply. Task code runs in this process, so the parent holds what
comes back to the form a result has (synth.pool) and never trusts more than that.
"""

from __future__ import annotations

import os
from typing import Any, Callable

CONTEXT: dict[str, Any] = {}  # the run's context (synth.pipeline), from `setup`


def setup(args: dict[str, Any]) -> dict[str, Any]:
    """Keep the run's context; one torch thread (KERNELWRIGHT_SYNTH_THREADS) and one inductor
    compile thread per worker: a pool of compile processes per worker would crowd the cores (the
    fork server decided inductor's count at its own import, so it is set here, not in the environment)."""
    import torch
    import torch._inductor.config as inductor

    CONTEXT.clear()
    CONTEXT.update(args["context"])
    torch.set_num_threads(int(os.environ.get("KERNELWRIGHT_SYNTH_THREADS", "1")))
    inductor.compile_threads = int(os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1"))
    return {}


def examine(args: dict[str, Any]) -> dict[str, Any]:
    """One job through its phase's stages (synth.filters.examine); JSON has no integer keys, so
    the operator-count weights come back to theirs."""
    from kernelwright.synth.filters import examine as run

    job = dict(args["job"])
    if isinstance(job.get("weights"), dict):
        job["weights"] = {int(k): v for k, v in job["weights"].items()}
    return run(job, CONTEXT)


def handlers() -> dict[str, Callable[[dict[str, Any]], Any]]:
    return {"setup": setup, "examine": examine}
