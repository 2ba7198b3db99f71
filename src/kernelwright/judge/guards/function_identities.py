"""Guard function_identities: the timing, checking and judge functions a candidate could replace
(torch.allclose, time.perf_counter, the judge's own timer, torch.library kernels...) are recorded
before its import and checked after it, after every call and after the profiled call."""

from kernelwright.judge.guards.spec import GuardSpec

SPEC = GuardSpec(
    name="function_identities", step="function_identities", phases=("import", "correctness", "timing", "profile"),
    watches="the identity (object and code) of every watched function and dispatch entry",
    finding="what was replaced, and when", refusal="rejected",
    proofs=("zoo_patched_allclose", "rowsum_patches_allclose_later", "zoo_patched_perf_counter", "rowsum_patched_timer",
            "zoo_dispatch_kernel", "zoo_patched_synchronize"),
    accepts=("rowsum_correct", "relu_ext", "relu_cuda"), where="judge.watch (the watch), judge.phases, judge.phases_timing and judge.evaluate (the refusal)",
)
