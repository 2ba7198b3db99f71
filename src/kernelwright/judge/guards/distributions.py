"""Guard distributions: normal, uniform [-1, 1] and large-magnitude inputs besides get_inputs(),
so a candidate right only on the problem's own input range is wrong."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="distributions", step="distributions", phases=("correctness",),
    watches="the cases drawn from other distributions than get_inputs()",
    finding="the failing distribution's case", refusal="incorrect",
    proofs=("relu_identity",), accepts=("relu_correct", "rowsum_correct"), where="judge.phases (_case_step)",
)
