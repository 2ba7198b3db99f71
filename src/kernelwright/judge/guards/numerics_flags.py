"""Guard numerics_flags: TF32 and reduced-precision flags are pinned for reference and candidate
alike; a candidate that moves one (at import, in a call, in the timing phase) is refused."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="numerics_flags", step="numerics_flags", phases=("import", "correctness", "timing"),
    watches="torch's TF32, cuDNN and reduced-precision reduction flags after the import and every call",
    finding="which flag moved, and when", refusal="rejected",
    proofs=("rowsum_sets_tf32", "rowsum_tf32_at_import", "rowsum_tf32_later"), accepts=("rowsum_correct", "relu_ext"),
    where="judge.watch (the check), judge.phases and judge.phases_timing (the refusal)",
)
