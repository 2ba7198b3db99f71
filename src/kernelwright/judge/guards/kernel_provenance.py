"""Guard kernel_provenance: the profiled call's GPU time by origin (the candidate's own kernels,
torch's, each library's); time in torch's kernels is refused unless the policy allows torch compute,
time in a library unless the policy names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelwright.judge import provenance
from kernelwright.judge.guards.spec import GuardSpec
from kernelwright.core.records import Status
from kernelwright.judge.static import embedded_sources
from kernelwright.judge.verdicts import Stop

SPEC = GuardSpec(
    name="kernel_provenance", step="kernel_provenance", phases=("profile",),
    watches="the origin of every kernel in one profiled call, against the candidate's own __global__ and @triton.jit functions",
    finding="the GPU time split by origin and the candidate's own kernels by name", refusal="rejected",
    proofs=("tests/test_protocol_steps.py::test_kernel_provenance_refuses_torch_kernels_the_op_audit_did_not_see",
            "tests/test_gpu_steps_logic.py::test_provenance_refuses_aten_time_and_names_its_share",
            "tests/test_provenance.py::test_the_provenance_guard_reads_the_candidates_python_files_for_triton_kernels"),
    accepts=("tests/test_gpu_steps_logic.py::test_provenance_accepts_own_kernels_and_allowed_torch", "relu_cuda",
             "tests/test_provenance.py::test_the_provenance_guard_reads_the_candidates_python_files_for_triton_kernels"),
    where="judge.provenance (the classification)", cuda_only=True,
)


def apply(flow: Any, activities: list[Any]) -> None:
    """Refuse GPU time in torch's own kernels (unless the policy allows torch compute) or in a
    library the policy does not name; report the split either way."""
    vb, policy = flow.vb, flow.policy
    texts = [s.text for s in flow.files.sources]  # raw kernel files and strings given to runtime.load
    try:  # the C/C++ string constants of model_new.py: load_inline's sources
        texts += [text for _, text in embedded_sources(Path(flow.files.model_new).read_text(errors="replace"))]
    except (OSError, SyntaxError, ValueError):
        pass
    own = provenance.kernel_names(texts) | set(getattr(flow.files, "triton_kernels", ()))  # read at discovery, before the candidate ran
    prov = provenance.classify(activities, own)
    bad = prov.disallowed(allow_torch=policy.allow_torch_compute, libraries=policy.libraries)
    detail = prov.describe() + (f"; the candidate's own kernels by name: {', '.join(sorted(own)[:8])}" if own
                                else "; no __global__ or @triton.jit function in its sources")
    vb.step("kernel_provenance", True, detail)
    vb.guard("kernel_provenance", bool(bad), (f"not allowed by the policy: {', '.join(bad)}; " if bad else "") + detail)
    if bad:
        shares = ", ".join(f"{o} {100 * prov.share(o):.1f} %" for o in bad)
        raise Stop(Status.REJECTED, f"GPU time in kernels the policy does not allow ({shares} of the profiled call): {prov.describe()}")

