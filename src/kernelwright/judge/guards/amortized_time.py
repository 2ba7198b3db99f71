"""Guard amortized_time: where the candidate's time sits in a minority of its calls (work done
every fourth call, say), its trimmed mean is its price instead of its median. It prices, not refuses."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="amortized_time", step="amortized_time", phases=("pricing",),
    watches="the candidate's per-call times: trimmed mean against median", finding="the two figures, and which one prices",
    refusal=None,
    proofs=("tests/test_timing_unit.py::test_amortized_flags_time_concentrated_in_every_fourth_call",
            "tests/test_gpu_steps_logic.py::test_side_work_in_a_minority_of_calls_is_priced_by_the_mean"),
    accepts=("tests/test_timing_unit.py::test_amortized_keeps_the_median_despite_honest_stalls",),
    where="judge.stats.amortized, judge.phases_pricing._runtime", cuda_only=True,
)
