"""The degeneracy gate: does a problem accept a trick in place of its computation?

A problem is degenerate when, on the inputs its own `get_inputs()` makes (under several seeds), its
output is constant, all zero or the same whatever the inputs, or when another seed's output, zeros
or one of the inputs passes the judge's tolerance. (KernelBench draws every input from
`torch.rand`, uniform on [0, 1), so `return x` passes its ReLU.) Each finding also says whether the
judge's other input distributions (normal, uniform on [-1, 1], large) would still refuse the trick.

The reference runs in a reference child, as in the judge: problem code never runs in this process.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kernelwright.judge.build import cache_dir
from kernelwright.judge.evaluate import correctness_cases, resolve_device
from kernelwright.judge.policy import Policy
from kernelwright.judge.workers import Child, ChildConfig, ChildError
from kernelwright.problems import sizes
from kernelwright.problems.loader import Problem, ProblemError

CHECKS: dict[str, str] = {
    "constant_output": "every element of the output is the same value",
    "all_zero_output": "the output is all zeros",
    "input_independent": "the output is identical for different inputs",
    "another_seed_passes": "the output for other inputs passes the tolerance",
    "zeros_pass": "an all-zero output passes the tolerance",
    "identity_passes": "returning an input unchanged passes the tolerance",
}


@dataclass
class CheckResult:
    """The gate's answer for one problem."""

    problem: Problem
    degenerate: bool  # some trick passes on the problem's own inputs
    findings: list[dict[str, Any]] = field(default_factory=list)  # {check, output, native, distributions, detail}
    cases: list[str] = field(default_factory=list)  # the case ids that were run
    size: str = "full"  # the size the problem ran at (problems.sizes: full or cpu)

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem.name, "path": str(self.problem.path), "hash": self.problem.hash, "size": self.size,
                "degenerate": self.degenerate, "findings": self.findings, "cases": self.cases}


def check_problem(problem: Problem, *, device: str = "auto", policy: Policy | None = None,
                  progress: Callable[[str], None] | None = None) -> CheckResult:
    """Run the degeneracy checks on one problem. Raises ProblemError for a malformed problem and
    RuntimeError when the reference child fails for another reason."""
    policy = policy or Policy()
    dev = resolve_device(device)
    size = sizes.resolve(problem.source, policy.size, dev, str(problem.path))
    n = max(2, policy.n_seeds)  # another seed's output needs at least two
    seeds = list(policy.seeds or ())
    while len(seeds) < n:
        seeds.append(secrets.randbelow(2**31 - 1) + 1)
    say = progress or (lambda _m: None)
    workdir = Path(tempfile.mkdtemp(prefix="kw-check-"))
    try:
        config = ChildConfig(role="reference", device=dev, gpu_index=policy.gpu_index, workdir=workdir,
                             env={"KERNELWRIGHT_CACHE": str(cache_dir())})
        with Child(config) as ref:
            say("loading the problem")
            args = {"problem_path": str(problem.path), "size": size, "device": dev, "precision": policy.precision, "init_seed": seeds[0],
                    "atol": policy.atol, "rtol": policy.rtol, "strict": True}
            try:
                ref.call("setup", args, timeout_s=policy.build_timeout_s)
                cases = [c for c in correctness_cases(seeds, policy, 0) if c.kind != "near"]  # the near duplicate says nothing about the problem
                say(f"running {len(cases)} cases")
                reply = ref.call("degeneracy", {"cases": [c.to_dict() for c in cases]}, timeout_s=policy.build_timeout_s)
            except ChildError as exc:
                if exc.kind == "problem":
                    raise ProblemError(str(exc)) from None
                raise RuntimeError(f"the reference child failed on {problem.path}: {exc}\n{exc.log_tail}") from None
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    findings = findings_of(reply)
    return CheckResult(problem, any(f["native"] for f in findings), findings, reply["cases"], size)


def findings_of(reply: dict[str, Any]) -> list[dict[str, Any]]:
    """The reference child's degeneracy reply as findings; a finding with native=True makes the
    problem degenerate (also used by the synthesis filters)."""
    findings = []
    n_outputs = len({key.partition(":")[2] for key in reply["checks"]})
    for key, where in sorted(reply["checks"].items()):
        check, _, output = key.partition(":")
        if where["native"] or where["distributions"]:
            caught = "the judge's other distributions still refuse it" if not where["distributions"] else "it passes on the judge's other distributions too"
            findings.append({
                "check": check, "output": int(output) if output else None, "native": where["native"],
                "distributions": where["distributions"],
                "detail": f"{CHECKS[check]}" + (f" (output {output})" if n_outputs > 1 else "") + (f" on get_inputs(); {caught}" if where["native"] else " on the judge's other distributions only"),
            })
    return findings
