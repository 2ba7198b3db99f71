"""Guard timed_recheck: outputs of timed calls (two consecutive ones per recheck round) are
compared with the reference, so a candidate that goes wrong after the correctness phase is caught."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="timed_recheck", step="timed_recheck", phases=("timing",),
    watches="the outputs of the re-checked timed calls", finding="the timed call whose output was wrong", refusal="incorrect",
    proofs=("rowsum_goes_wrong", "zoo_thread_after_timer", "zoo_super_batch"), accepts=("rowsum_correct", "relu_cuda"),
    where="judge.measure (the rounds), judge.phases_timing._timed_window (the refusal)",
)
