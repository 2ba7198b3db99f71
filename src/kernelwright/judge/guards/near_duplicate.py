"""Guard near_duplicate: a second call on the same tensors with a few elements changed in place
must give the changed answer, so a cache keyed on identity, address or one element is wrong."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="near_duplicate", step="near_duplicate", phases=("correctness",),
    watches="the near case: a call, then the same tensors with a few elements changed",
    finding="the near case's mismatch", refusal="incorrect",
    proofs=("zoo_replay_identity", "zoo_replay_data_ptr", "zoo_replay_element", "zoo_file_cache"),
    accepts=("rowsum_correct", "zoo_rowsum_pairwise"), where="judge.phases (_case_step); judge.inputs.perturb",
)
