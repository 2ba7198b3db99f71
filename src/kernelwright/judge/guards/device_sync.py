"""Guard device_sync: each timed call's end event follows a device-wide synchronize, so work left
on another stream is timed; a call whose device-wide end came late is charged the lateness, and
the guard fires when the candidate's median call was late by more than samples.late_threshold.
It prices what it finds (the charge) rather than refusing."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="device_sync", step="device_sync", phases=("timing", "pricing"),
    watches="each call's device-wide end against its own stream's end and the judge's own call of the same length",
    finding="how many calls were charged, and how late the candidate's median call came", refusal=None,
    proofs=("relu_side_stream", "zoo_side_stream_python", "zoo_side_stream_obfuscated",
            "tests/test_gpu_steps_logic.py::test_work_past_the_stream_end_is_charged_and_the_guard_fires"),
    accepts=("relu_cuda", "tests/test_gpu_steps_logic.py::test_honest_calls_keep_their_stream_time_and_a_slow_wake_does_not_move_the_median"),
    where="judge.phases_pricing._device_sync; judge.measure (the charge)", cuda_only=True,
)
