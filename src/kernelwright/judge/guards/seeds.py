"""Guard seeds: a candidate right on get_inputs()'s first seed and wrong on another secret seed
(a replayed first answer) is incorrect. Decided in judge.phases, on the reference child's comparison."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="seeds", step="seeds", phases=("correctness",),
    watches="every native case after the first, each on a secret seed drawn for this verdict",
    finding="the failing case and how its output differs", refusal="incorrect",
    proofs=("rowsum_replay", "zoo_replay_shape", "zoo_replay_version"),
    accepts=("rowsum_correct", "rowsum_reordered"), where="judge.phases (_case_step)",
)
