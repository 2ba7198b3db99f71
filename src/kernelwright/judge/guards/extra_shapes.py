"""Guard extra_shapes: the problem's get_test_inputs() shapes, so a branch on the shape is wrong."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="extra_shapes", step="extra_shapes", phases=("correctness",),
    watches="the cases of get_test_inputs()", finding="the failing shape's case", refusal="incorrect",
    proofs=("rowsum_fixed_cols",), accepts=("rowsum_correct",), where="judge.phases (_case_step)",
)
