"""Kernel provenance (judge.provenance): attribution of device activity by name, without a GPU.
The names are the forms the torch profiler reports on the H200 (demangled C++ names)."""

from __future__ import annotations

import pytest

from kernelwright.judge.policy import Policy
from kernelwright.judge.provenance import classify, function_name, kernel_names, origin

ATEN_RELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar("
             "at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::"
             "{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)")
ATEN_FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, ...)"
ATEN_COPY = ("void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
             "{lambda()#3}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)")
ATEN_SUM = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, ...> > >(...)"
CUBLAS = "sm90_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
CUBLAS_LT = "nvjet_tst_128x64_64x8_2x1_v_bz_TNT"
CUBLAS_CUTLASS = "cutlass_80_simt_sgemm_128x64_8x5_nn_align1"
CUDNN = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_cudnn"
OWN_CUTLASS = "void cutlass::Kernel2<cutlass::gemm::kernel::GemmUniversal<...> >(cutlass::gemm::kernel::GemmUniversal<...>::Params)"

SOURCE = """
#include <cuda_runtime.h>
template <int N> __global__ void __launch_bounds__(256) row_softmax(const float* x, float* y, int n) {}
extern "C" __global__ void kw_relu(const float* x, float* y, long n) {}
__global__ static void helper_kernel(float* p) {}
__device__ float not_a_kernel(float v) { return v; }
"""


def test_kernel_names_finds_every_global_function_and_nothing_else():
    assert kernel_names([SOURCE]) == {"row_softmax", "kw_relu", "helper_kernel"}
    assert kernel_names(["float f(float x) { return x; }"]) == set()


@pytest.mark.parametrize("name, expected", [
    ("kw_relu", "candidate"),
    ("void row_softmax<4>(float const*, float*, int)", "candidate"),
    (ATEN_RELU, "aten"), (ATEN_SUM, "aten"),
    (ATEN_FILL, "allocation"), (ATEN_COPY, "allocation"), ("Memset (Device)", "allocation"), ("Memcpy DtoD (Device -> Device)", "allocation"),
    (CUBLAS, "cublas"), (CUBLAS_LT, "cublas"), (CUBLAS_CUTLASS, "cublas"),
    (CUDNN, "cudnn"), (OWN_CUTLASS, "cutlass"),
    ("triton_poi_fused_relu_0", "triton"),
    ("my_kernel_from_a_cubin", "unattributed"),
])
def test_origin_of_profiler_names(name, expected):
    assert origin(name, kernel_names([SOURCE])) == expected


def test_a_candidate_name_inside_a_longer_word_is_not_its_own():
    # "kw_relu" must not claim "kw_relu_v2" of someone else, nor a library's kernel containing it
    assert origin("kw_relu_v2", {"kw_relu"}) == "unattributed"


def test_classify_splits_time_by_origin_and_counts_streams():
    prov = classify([["kw_relu", 0.30, 7], [ATEN_FILL, 0.01, 7], [CUBLAS, 0.09, 13]], {"kw_relu"})
    assert prov.ms == pytest.approx({"candidate": 0.30, "allocation": 0.01, "cublas": 0.09})
    assert prov.share("candidate") == pytest.approx(0.75)
    assert prov.streams == 2
    text = prov.describe()
    assert "candidate 75.0 %" in text and "cublas 22.5 %" in text and "2 stream(s)" in text


def test_disallowed_follows_the_policy():
    prov = classify([["kw_relu", 0.3, 7], [ATEN_RELU, 0.1, 7], [CUBLAS, 0.1, 7], ["odd", 0.1, 7]], {"kw_relu"})
    assert sorted(prov.disallowed(allow_torch=False, libraries=())) == ["aten", "cublas"]
    assert prov.disallowed(allow_torch=False, libraries=("cublas",)) == ["aten"]
    # torch compute allowed: a torch matmul runs cuBLAS, so the libraries torch calls are allowed too
    assert prov.disallowed(allow_torch=True, libraries=()) == []


def test_an_empty_profile_allows_everything_and_says_so():
    prov = classify([], set())
    assert prov.disallowed(allow_torch=False, libraries=()) == []
    assert prov.describe() == "no device activity in the profiled call"


def test_policy_names_only_known_libraries():
    assert Policy(libraries=("cublas", "cudnn")).libraries == ("cublas", "cudnn")
    with pytest.raises(ValueError, match="unknown libraries"):
        Policy(libraries=("mkl",))


def test_declaring_a_kernel_of_a_library_or_torch_name_claims_nothing():
    # a candidate that declares (and never launches) kernels named like torch's or cuBLAS's
    spoof = kernel_names(["__global__ void reduce_kernel() {}\n__global__ void native() {}\n"
                          "__global__ void nvjet_tst_128x64_64x8_2x1_v_bz_TNT() {}\n__global__ void Kernel2() {}"])
    assert origin(ATEN_SUM, spoof) == "aten"
    assert origin(CUBLAS_LT, spoof) == "cublas"
    assert origin(OWN_CUTLASS, spoof) == "cutlass"


def test_a_kernel_in_a_comment_is_not_the_candidates():
    assert kernel_names(["// __global__ void native() {}\n/* __global__ void softmax_warp_forward() {} */"]) == set()


def test_torch_kernels_outside_its_namespaces_are_torchs():
    name = "void softmax_warp_forward<float, float, float, 10, false, false>(float*, float const*, int, int, int, bool const*, int, bool)"
    assert origin(name, {"softmax_warp_forward"}) == "aten"
    assert origin("void at_cuda_detail::cub::DeviceReduceKernel<Policy>(float*)", set()) == "aten"


@pytest.mark.parametrize("name, expected", [
    ("kw_relu", "kw_relu"),
    ("void (anonymous namespace)::softmax_rows_reg<8, true>(float const*, float*, long)", "softmax_rows_reg"),
    ("void ns::inner::k<std::pair<int, int> >(float*)", "k"),
    ("Memset (Device)", "Memset"),
    ("void at::native::(anonymous namespace)::foo<int>(float*)", "foo"),
])
def test_function_name_is_the_unqualified_name(name, expected):
    assert function_name(name) == expected


@pytest.mark.parametrize("name", [
    "void relu_kernel<c10::Half>(c10::Half const*, c10::Half*, long)",
    "void relu_kernel<float>(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, int>, long)",
    "void relu_kernel<cutlass::half_t>(cutlass::half_t const*, cutlass::half_t*, long)",
])
def test_own_kernels_with_torch_or_cutlass_types_in_their_parameters_stay_the_candidates(name):
    assert origin(name, {"relu_kernel"}) == "candidate"


def test_torch_arange_is_allocation_and_anonymous_namespaces_inside_aten_are_aten():
    arange = ("void at::native::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, "
              "c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}>(int, long*)")
    assert origin(arange, set()) == "allocation"
    assert origin("void at::native::(anonymous namespace)::foo_kernel<int>(float*)", {"foo_kernel"}) == "aten"


TRITON_SOURCE = '''
import torch
import triton
import triton.language as tl
from triton import jit


@triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + i, tl.maximum(tl.load(x_ptr + i, mask=i < n), 0.0), mask=i < n)


@jit
def scale_kernel(x_ptr, n):
    pass


def _add(x_ptr, n):
    pass


add_kernel = triton.jit(_add)


@triton.jit
def triton_poi_fused_relu_0(x_ptr):  # Inductor's name: declaring it claims nothing
    pass


def launch(x):  # a plain helper: not a kernel
    return x
'''


def test_triton_kernel_names_are_the_jitted_functions_of_a_file_that_imports_triton():
    from kernelwright.judge.provenance import triton_kernel_names

    assert triton_kernel_names([TRITON_SOURCE]) == {"relu_kernel", "scale_kernel", "_add"}
    assert triton_kernel_names([TRITON_SOURCE.replace("import triton\n", "").replace("from triton import jit\n", "")
                                .replace("import triton.language as tl\n", "")]) == set()  # no triton: a jit of something else
    assert triton_kernel_names(["def f(:\n"]) == set()  # unparsable text: nothing, no error
    sham = ("import numba\nif False:\n    import triton\n\n@numba.jit\ndef ampere_sgemm_128x64_nn():\n    pass\n\n"
            "k = numba.jit(implicit_convolve_sgemm)\n\ndef outer():\n    import triton\n\n    @triton.jit\n    def inner():\n        pass\n")
    assert triton_kernel_names([sham]) == set()  # dead imports, another library's jit, undefined and nested functions claim nothing
    aliased = "import triton as t\nfrom triton import jit as J\n\n@t.autotune(configs=[], key=[])\n@t.jit\ndef a():\n    pass\n\n@J\ndef b():\n    pass\n"
    assert triton_kernel_names([aliased.encode()]) == {"a", "b"}
    own = triton_kernel_names([TRITON_SOURCE])
    assert origin("relu_kernel", own) == "candidate"
    assert origin("triton_poi_fused_relu_0", own | {"triton_poi_fused_relu_0"}) == "triton"  # torch.compile's prefix stays a library
    assert origin("triton_per_fused_sum_1", own) == "triton" and origin("void at::native::relu_kernel(float*)", own) == "aten"
    # the libraries' own name shapes stay theirs whoever declares them, on the CUDA path too
    assert origin("ampere_sgemm_128x64_nn", {"ampere_sgemm_128x64_nn"}) == "cublas"
    assert origin("void implicit_convolve_sgemm<float, 1024, 5, 5, 3, 3, 3, 1, false>(int, int)", {"implicit_convolve_sgemm"}) == "cudnn"


def test_the_provenance_guard_reads_the_candidates_python_files_for_triton_kernels(tmp_path):
    from types import SimpleNamespace

    from kernelwright.judge.guards import kernel_provenance
    from kernelwright.judge.policy import Policy
    from kernelwright.judge.verdicts import Stop

    from kernelwright.judge.candidate import discover

    (tmp_path / "model_new.py").write_text("from kernels import launch\n")
    (tmp_path / "kernels.py").write_text(TRITON_SOURCE)
    files = discover(tmp_path)  # the names are read here, before any child runs
    assert files.triton_kernels == {"relu_kernel", "scale_kernel", "_add"}
    (tmp_path / "late.py").write_text("import triton\n\n@triton.jit\ndef ampere_late():\n    pass\n")  # written after discovery
    steps, guards = [], []
    vb = SimpleNamespace(step=lambda *a: steps.append(a), guard=lambda *a: guards.append(a))
    flow = SimpleNamespace(vb=vb, policy=Policy(), files=files)
    kernel_provenance.apply(flow, [["relu_kernel", 0.2, 7], ["Memset (Device)", 0.01, 7]])
    assert guards[-1][1] is False and "relu_kernel" in steps[-1][2]
    with pytest.raises(Stop, match="triton"):  # Inductor's kernel in a candidate's call: a library the default policy does not name
        kernel_provenance.apply(flow, [["relu_kernel", 0.2, 7], ["triton_poi_fused_relu_0", 0.2, 7]])
    kernel_provenance.apply(flow, [["ampere_late", 0.2, 7]])
    assert "ampere_late" not in steps[-1][2].split("own kernels by name:")[-1]  # a file written after discovery claims nothing
