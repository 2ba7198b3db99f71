"""Guard output_checks: an output must be exactly a torch.Tensor of the reference's shape and
dtype, its non-finite values where the reference has them."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="output_checks", step="output_checks", phases=("correctness",),
    watches="each output's type, shape, dtype and non-finite values, before any value is compared",
    finding="what the output was instead", refusal="incorrect",
    proofs=("zoo_tensor_subclass", "rowsum_float64"), accepts=("rowsum_correct", "relu_correct"),
    where="judge.correctness.check_described, in the reference child",
)
