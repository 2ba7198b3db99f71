"""Guard op_audit: every correctness case and one forward on fresh secret inputs run under a
dispatch mode; torch compute there is refused unless the policy allows it."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="op_audit", step="op_audit", phases=("correctness", "timing"),
    watches="the ATen operators of every case's forward and of the audited one; Python threads alive during it",
    finding="the torch compute seen, or the threads", refusal="rejected",
    proofs=("rowsum_torch", "relu_ext_aten", "rowsum_audit_dodger", "zoo_inherits_model", "zoo_audit_switched_off"),
    accepts=("rowsum_correct", "relu_ext", "examples/cpu/softmax"), where="judge.phases (op_audit, _check_case_reply); judge.ops",
)
