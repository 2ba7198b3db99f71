"""Guard between_calls: when a timed call's seed is asked for, no hook of the candidate's, no
Python thread or child process of its, and nothing the draw reads may have changed."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="between_calls", step="between_calls", phases=("timing",),
    watches="trace, profile and monitoring hooks, signal handlers, threads, child processes and the draw's state at each seed",
    finding="what was alive or changed when the seed was about to come", refusal="rejected",
    proofs=("zoo_next_by_thread", "zoo_next_by_profile", "zoo_next_by_timer", "zoo_draw_tensor_property"),
    accepts=("rowsum_correct", "zoo_rowsum_sigpipe"), where="judge.window.quiet_window, judge.phases_timing._timed_window",
)
