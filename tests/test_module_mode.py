"""Every model is judged in one module mode, and the verdict says which (docs/judge.md, Module mode)."""

from __future__ import annotations

from kernelwright.judge.verdicts import VerdictBuilder


def test_the_verdict_states_the_module_mode_the_models_were_judged_in():
    import torch

    from kernelwright.judge import inputs
    from kernelwright.judge.policy import Policy
    from kernelwright.core.records import MODULE_MODE, Status
    from kernelwright.problems.loader import Problem

    class WithNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(4)

    problem = type("P", (), {"get_init_inputs": staticmethod(lambda: [])})
    model = inputs.init_model(problem, WithNorm, 1, torch.device("cpu"))
    assert MODULE_MODE == "eval" and model.training is False and model.bn.training is False
    p = Problem.__new__(Problem)
    vb = VerdictBuilder(p, Policy(), "cpu")
    vb.problem = type("Pr", (), {"to_dict": lambda self: {"name": "x", "hash": "h"}})()
    assert vb.finish(Status.CORRECT).problem["mode"] == "eval"
