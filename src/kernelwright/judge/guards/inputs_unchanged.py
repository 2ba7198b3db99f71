"""Guard inputs_unchanged: a candidate may not write its inputs (bitwise, or by digest for large ones)."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="inputs_unchanged", step="inputs_unchanged", phases=("correctness",),
    watches="every input after every call: bitwise, or by digest (judge.digest)",
    finding="which input positions changed, in which case", refusal="incorrect",
    proofs=("relu_inplace", "zoo_zeroes_input"), accepts=("relu_correct", "rowsum_correct"),
    where="judge.child_candidate (the check), judge.phases._check_case_reply (the refusal)",
)
