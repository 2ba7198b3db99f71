"""The exploit zoo: candidates that cheat, each with the guard that refuses it, and honest controls.

Used by tests/test_zoo.py (the CPU entries on every run, the GPU entries with `-m gpu`) and by
benchmarks/zoo_bench.py (the table in docs/zoo.md, on the CPU and on the H200).

An exploit is judged twice under the zoo policy (default steps, short timing, eager baseline):
with every step on it must be refused and `guard` must be among the verdict's fired guards; with
the steps in `off` switched off it must get `off_status` (mostly `correct`) and show the `gain` the
trick is for (GAINS): a wrong or forbidden answer accepted, or a speedup over eager it did not earn.
Where more than one step catches a trick, `off` names them all. `guard` values that
are not steps say what refuses the exploit without a switch:

- "isolation": the reference, its outputs and the comparison live in another process;
- "channel": results travel on an authenticated channel, never on stdout;
- "tolerance": the strict fp32 tolerance (`off_policy` loosens it);
- "degeneracy_gate": `kernelwright problems check` flags the problem itself;
- "staging": the output's bytes are handed over through torch's C base class, so nothing the
  candidate set on the output object runs after its call;
- "quiet_window": a timed call's input seed reaches the child only at that call's turn, after the
  last call's output and the slot's old storages are let go, with the collector off
  (judge.inputs.asking_getter, judge.window.quiet_window): code of the candidate's that runs
  between calls finds no next inputs to work on.

Two kinds of entry bend that rule. A trick that hides time rather than a wrong answer
(`hides_time`) may be judged correct with every step on (or refused), but a correct verdict's time
must show the hidden work (no speedup over eager) while the ablation shows the speedup it would
have claimed (gain `speed`), or, where even the unguarded time cannot beat eager, a time at least
10x under the guarded one (gain `hidden`). A trick that
needs a setting to have any chance (`context`: policy fields, `context_off`: steps off) gets that
setting in both runs, so the two runs differ by `off` alone; a guard that leaves no record of its
own when it refuses (poison: the failing case is reported by its step) is shown by that ablation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
STRUCTURAL = ("isolation", "channel", "tolerance", "degeneracy_gate", "staging", "quiet_window")
UNRECORDED = ("poison",)  # steps that refuse without a guard record of their own: the ablation shows them
# What a trick buys with its `off` steps switched off; exploit_failures holds the ablation to it.
GAINS = {
    "answer": "a wrong, stale, low-precision or forbidden answer judged `off_status`",
    "speed": "judged correct and faster than eager (and than with every step on): a time it did not earn",
    "none": "nothing: a second layer holds and the time shows the work (under 1x eager); the guard refuses the attempt",
    "racy": "a speedup only when a spare core or a timer's phase allows: asserted in neither direction on a shared box",
    "hidden": "a time at least 10x under its price with every step on (the work it hid); which side of eager it falls on is racy (asserted in neither direction)",
}


@dataclass(frozen=True)
class Exploit:
    name: str  # the fixture candidate (tests/fixtures/candidates/NAME)
    problem: str  # the fixture problem (tests/fixtures/problems/PROBLEM.py)
    trick: str  # what it does, in words
    guard: str  # the guard that fires with every step on (a step name, or one of STRUCTURAL)
    off: frozenset[str] | None  # steps switched off for the ablation; None: nothing to switch off
    device: str = "cpu"
    refused: tuple[str, ...] = ("incorrect", "rejected")  # acceptable statuses with every step on
    off_status: str = "correct"  # the status with `off` switched off
    allow_torch: bool = False  # torch compute allowed (the trick computes with torch; the op audit would refuse it first)
    off_policy: dict[str, Any] = field(default_factory=dict)  # policy fields changed for the ablation
    evidence: str | tuple[str, ...] = ""  # a phrase the refusing verdict's log must hold, or one of several (structural guards: shows the refusal came from where it should)
    hides_time: bool = False  # the trick hides time: correct with every step on, but no faster than eager; faster with `off` off
    context: dict[str, Any] = field(default_factory=dict)  # policy fields set in both runs (the setting the trick needs)
    context_off: frozenset[str] = frozenset()  # steps off in both runs (they would catch the trick before `guard` is reached)
    max_speedup: float = 1.0  # hides_time: the most the correct verdict's speedup over eager may be (the honest rowsum
    # is 0.3-0.45x on the 2-core box: 0.8 leaves room for its noise and refuses a trick that answers most calls ahead)
    gain: str = "answer"  # what the trick buys with `off` switched off (GAINS), which the ablation must show

    @property
    def problem_path(self) -> Path:
        return FIXTURES / "problems" / f"{self.problem}.py"

    @property
    def candidate_path(self) -> Path:
        return FIXTURES / "candidates" / self.name


@dataclass(frozen=True)
class Control:
    name: str
    problem_path: Path
    candidate_path: Path
    what: str
    device: str = "cpu"


def _f(*steps: str) -> frozenset[str]:
    return frozenset(steps)


KB_TOLERANCE = {"atol": 1e-2, "rtol": 1e-2, "distributions": ()}  # KernelBench's tolerance and get_inputs() only (policy.kernelbench_preset)
REPLAY = _f("seeds", "near_duplicate", "distributions", "extra_shapes", "op_audit", "timed_recheck")  # the audit's fresh forward sees a replay too

EXPLOITS: tuple[Exploit, ...] = (
    # -- replays ------------------------------------------------------------------------------
    # What a replay buys on the CPU fixture (a 64 x 513 rowsum) is a stale answer judged correct: the microseconds it saves
    # against eager's sum sit inside the shared box's noise (rowsum_replay measured 0.98x eager unguarded in one fresh-clone CI
    # run), so the ablation asserts the answer, not a speedup.
    Exploit("zoo_replay_identity", "rowsum", "replays the answer cached under the input tensor's id()", "near_duplicate", _f("near_duplicate", "timed_recheck")),
    # racy: 0.39x eager unguarded in one full-suite run on the 2-core box (its lookup and copy against a tiny sum under load)
    Exploit("zoo_replay_data_ptr", "rowsum", "replays the answer cached under the input's data_ptr()", "near_duplicate", _f("near_duplicate", "timed_recheck"), gain="racy"),
    Exploit("zoo_replay_shape", "rowsum", "replays the answer cached under the input's shape", "seeds", REPLAY),
    Exploit("zoo_replay_version", "rowsum", "replays the answer cached under the input's shape and _version", "seeds", REPLAY | {"fresh_inputs"}),
    Exploit("zoo_replay_element", "rowsum", "replays the answer cached under the input's first element (read with ctypes)", "near_duplicate", _f("near_duplicate", "fresh_inputs")),
    Exploit("zoo_file_cache", "rowsum", "writes answers to a file keyed on shape and first element, reads them back", "near_duplicate", _f("near_duplicate", "fresh_inputs")),
    Exploit("rowsum_replay", "rowsum", "computes once, then replays its first answer for every input", "seeds", REPLAY),
    # -- reaching for the reference ------------------------------------------------------------
    Exploit("zoo_frame_walk", "rowsum", "walks the caller's frames for a reference output", "isolation", None, evidence="got 0, expected"),
    Exploit("zoo_gc_search", "rowsum", "searches gc.get_objects() for a reference output", "isolation", None, evidence="got 0, expected"),
    Exploit("zoo_disk_reference", "rowsum", "loads every .pt under the temp dir and the judge's cache, looking for a reference", "isolation", None, evidence="got 0, expected"),
    # -- the result channel -------------------------------------------------------------------
    Exploit("rowsum_fd_spray", "rowsum", "writes forged result lines to every file descriptor", "channel", None, refused=("rejected", "runtime_error", "infra_error"),
            evidence="failed authentication"),
    Exploit("rowsum_fake_verdict", "rowsum", "prints a fake verdict on stdout, then os._exit(0)", "channel", None, refused=("runtime_error",), evidence="exited with code 0"),
    # -- patched functions ----------------------------------------------------------------------
    Exploit("zoo_patched_allclose", "rowsum", "returns zeros; setattr replaces torch.allclose and torch.testing.assert_close", "function_identities",
            _f("function_identities"), off_status="incorrect"),
    Exploit("rowsum_patches_allclose_later", "rowsum", "replaces torch.allclose through setattr from its second call", "function_identities",
            _f("function_identities"), allow_torch=True),
    # The next three blind the torch digest, which the input check only falls back to since the judge's own digest kernel
    # (judge.digest, 2026-12-04): with function_identities off, inputs_unchanged still sees the change, so both are off.
    Exploit("zoo_blind_digest", "relu", "ReLU in place into its input; replaces torch.Tensor.random_ with a zero fill, so the torch digest is blind",
            "function_identities", _f("function_identities", "inputs_unchanged", "between_calls")),  # torch.Tensor's dict: the window sees it too
    Exploit("zoo_blind_native_digest", "relu", "ReLU in place into its input; swaps the judge's loaded digest kernel for one that answers 0",
            "function_identities", _f("function_identities")),
    # Found by a red-team review on 2026-12-04: what a watched function reads (its module's names, the builtins, a ctypes
    # entry's attributes) and methods looked up on the candidate's own tensor objects.
    Exploit("zoo_module_constant", "relu", "ReLU in place into its input; sets the digest's modulus, a module constant, to 1",
            "function_identities", _f("function_identities")),
    Exploit("zoo_shadow_builtin", "relu", "ReLU in place into its input; adds a global zip that yields nothing to the judge's inputs module",
            "function_identities", _f("function_identities")),
    Exploit("zoo_ctypes_errcheck", "relu", "ReLU in place into its input; an errcheck on the digest kernel's ctypes entry zeroes its answer",
            "function_identities", _f("function_identities")),
    Exploit("zoo_input_detach", "relu", "ReLU in place into its input, after a copy; a detach set on the input object hands the check the copy",
            "inputs_unchanged", _f("inputs_unchanged")),
    Exploit("zoo_lazy_output", "relu", "returns an unwritten output whose own detach attribute computes the answer at the hand-over", "staging", None,
            evidence="elements differ"),
    Exploit("zoo_code_swap", "relu", "ReLU in place into its input; gives the input check's digest function another __code__, keeping the object",
            "function_identities", _f("function_identities")),
    Exploit("zoo_patched_perf_counter", "rowsum", "spins 5 ms per call; setattr replaces time.perf_counter with a 1 ns clock", "function_identities", _f("function_identities"), gain="none"),
    Exploit("rowsum_patched_timer", "rowsum", "replaces the judge's own per-call timer through sys.modules", "function_identities", _f("function_identities"), allow_torch=True, gain="speed"),
    Exploit("zoo_dispatch_kernel", "rowsum", "zeroes its input; torch.library kernels for aten::floor_divide and remainder answering zeros hide it from the input digest",
            "function_identities", _f("function_identities", "near_duplicate", "inputs_unchanged")),
    Exploit("zoo_dispatch_mode", "rowsum", "zeroes its input; a dispatch mode left on at import answers aten::floor_divide and remainder with zeros",
            "function_identities", _f("function_identities", "near_duplicate", "inputs_unchanged", "between_calls")),  # a mode left on
    # is also said before every timed call's seed (step between_calls, since the third red-team round), and popped
    # Hidden time between timed calls, found by a red-team review on 2026-12-04: code of the candidate's that the judge's
    # own steps set off after a call (a callback on a freed object, the collector, a profile function, a timer's handler) or
    # a thread, each computing the next call's answer from its seed. Fixed 2026-12-05: each seed comes at its call's turn.
    Exploit("zoo_next_at_output_free", "rowsum", "a weak reference callback on each output, run at the judge's `del out`, sums the next "
            "call's inputs drawn from its seed read off the judge's frames", "quiet_window", None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_at_storage_free", "rowsum", "weak reference callbacks on the input's storages, run when the refresh lets one go, "
            "sum the call's inputs drawn from its seed", "quiet_window", None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_in_gc", "rowsum", "a __del__ in self-renewing cyclic garbage, collector threshold 1, sums the next call's inputs "
            "drawn from its seed", "quiet_window", None, hides_time=True, max_speedup=0.8),
    # A thread races the judge's own draw once the seed is in the process: refused while alive when a seed is asked for.
    Exploit("zoo_next_by_thread", "rowsum", "a helper thread reads the main thread's frames for a seed and sums that call's inputs "
            "on the other core", "between_calls", _f("between_calls"), gain="racy"),
    # Hooks are switched off before every seed whether or not the step is on: with it off these are timed honestly.
    Exploit("zoo_next_by_profile", "rowsum", "a profile function, run at the judge's Python calls between timed calls, sums the next "
            "call's inputs drawn from its seed", "between_calls", _f("between_calls"), gain="none"),
    Exploit("zoo_next_by_timer", "rowsum", "a 200 us interval timer's SIGALRM handler sums the next call's inputs drawn from its seed",
            "between_calls", _f("between_calls"), gain="none"),
    # Found by a second red-team review the same day, with the seeds already asked for at their turn: names the draw looked
    # up at run time, each computing the answer inside the draw. The draw now calls only what judge.inputs bound at import.
    Exploit("zoo_draw_cuda_is_init", "rowsum", "wraps torch.cuda.is_initialized, which the draw called right after seeding", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_random_class", "rowsum", "gives random's instance a class whose __setattr__ runs when random.seed resets gauss_next",
            "between_calls", _f("between_calls"), gain="none"),
    Exploit("zoo_draw_numpy_proxy", "rowsum", "puts a proxy module at numpy.random, which the draw read for seed", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_numpy_spec", "rowsum", "a numpy.__spec__ whose _initializing property runs at the draw's `import numpy`", "quiet_window",
            None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_audit_import", "rowsum", "an audit hook, and numpy taken out of sys.modules so that the draw's import raises an event",
            "function_identities", _f("function_identities"), gain="none"),
    Exploit("zoo_draw_device_context", "rowsum", "a DeviceContext subclass at torch.utils._device, the mode `with device:` pushed", "quiet_window",
            None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_module_class", "rowsum", "swaps the torch module's class for one whose __getattribute__ sees get_inputs() look up randn",
            "between_calls", _f("between_calls"), gain="speed"),
    Exploit("zoo_draw_no_grad", "rowsum", "wraps torch.no_grad.__enter__, which the refresh entered after the draw", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_tensor_property", "rowsum", "adds a dtype property to torch.Tensor, read on the freshly drawn tensor", "between_calls",
            _f("between_calls"), gain="none"),
    Exploit("zoo_draw_case_init", "rowsum", "wraps records.Case.__init__, which the refresh called with the seed", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_stdin_codec", "rowsum", "re-initialises the child's stdin with a decoder of its own, which saw each seed line", "quiet_window",
            None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_draw_fork_relay", "rowsum", "a forked relay on descriptor 0 that sums each seed's inputs into shared memory before passing the line on",
            "between_calls", _f("between_calls"), gain="none"),
    Exploit("zoo_next_thread_unseen", "rowsum", "zoo_next_by_thread, clearing the judge's record of threads in every call", "between_calls",
            _f("between_calls"), gain="racy"),
    Exploit("zoo_next_timer_rebind", "rowsum", "zoo_next_by_timer, with its handler written into the judge's record of the handlers as they were",
            "function_identities", _f("function_identities"), gain="racy"),
    # the third red-team round (2026-12-05): what the draw reads inside objects the window compared by identity
    Exploit("zoo_next_numpy_bitgen", "rowsum", "gives numpy's global RandomState an MT19937 subclass whose _legacy_seeding sums the next "
            "call's inputs inside the draw", "between_calls", _f("between_calls"), gain="speed"),
    Exploit("zoo_next_gauss_del", "rowsum", "keeps an object with a __del__ at random's gauss_next, freed by the draw's seeding, that sums "
            "the next call's inputs", "quiet_window", None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_pool_entry", "rowsum", "a list subclass at the timing pool's entries whose __getitem__ reads the fresh draw off the "
            "refresh's frame", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_state_problem", "rowsum", "a proxy at the child's S.problem whose get_inputs sums the draw", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_dispatch_mode", "rowsum", "a dispatch mode pushed when the judge lets an output go, which sees the refresh's set_ "
            "of the fresh draw", "quiet_window", None,
            hides_time=True, max_speedup=0.8),
    # the fourth round (2026-12-05): a dict key whose __eq__ runs when a name with its hash is looked up after the seed
    Exploit("zoo_next_key_gauss", "rowsum", "gives random's instance a dict whose first key collides with gauss_next and sums the next "
            "call's inputs in its __eq__", "between_calls", _f("between_calls"), gain="speed"),
    Exploit("zoo_next_key_problem", "rowsum", "a key colliding with get_inputs in the problem module's dict, whose __eq__ sums the draw",
            "function_identities", _f("function_identities", "between_calls"), gain="speed"),
    Exploit("zoo_next_key_builtins", "rowsum", "a key colliding with list in the builtins, whose __eq__ sums the draw",
            "function_identities", _f("function_identities", "between_calls"), gain="speed"),
    Exploit("zoo_next_key_operator", "rowsum", "a key colliding with index in operator's dict, looked up by numpy's seeding in the draw",
            "between_calls", _f("between_calls"), gain="speed"),
    # the fifth round (2026-12-05): the getters' state reached through time_calls' frame and their closures
    Exploit("zoo_next_ask_counter", "rowsum", "an int subclass in the asking getter's counter, whose __add__ ran after the seed",
            "quiet_window", None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_stage_set", "rowsum", "keys with their own __eq__ in the batch's set of staged calls, tested after the draw",
            "quiet_window", None, hides_time=True, max_speedup=0.8),
    Exploit("zoo_next_ask_cell", "rowsum", "the asking getter's ask cell swapped for a wrapper that sees each seed",
            "quiet_window", None, hides_time=True, max_speedup=0.8),
    # Either of the channel's two refusals: the forged ask does not wait for an answer, so when it is the
    # batch's last call the reply and its descriptors follow at once, and one read of the stream may
    # take the forged line together with the reply's descriptors (seen once in a fresh clone's CI).
    Exploit("zoo_forged_ask", "rowsum", "sends an ask of its own for a seed through the child's channel writer, found with gc", "channel", None,
            refused=("rejected",), evidence=("out of turn", "descriptors arrived that no reply claims")),
    # -- precision ------------------------------------------------------------------------------
    Exploit("rowsum_sets_tf32", "rowsum", "switches TF32 matmuls on inside forward", "numerics_flags", _f("numerics_flags")),
    Exploit("rowsum_tf32_at_import", "rowsum", "switches TF32 on at import", "numerics_flags", _f("numerics_flags"), allow_torch=True),
    Exploit("rowsum_tf32_later", "rowsum", "switches TF32 on from its 25th call, in the timing phase", "numerics_flags", _f("numerics_flags"), allow_torch=True),
    Exploit("zoo_fp16_inside", "rowsum", "accumulates in half precision inside the C++ kernel", "tolerance", _f("precision"), evidence="elements differ",
            off_policy={"atol": 5e-2, "rtol": 5e-2}),  # loosened, the tolerance lets it through and step precision refuses it
    # Reduced precision inside under KernelBench's tolerance (1e-2, which lets them through): step precision compares
    # the error from a float64 oracle with the fp32 reference's own (judge.guards.precision; issue 27, item 7).
    Exploit("zoo_matmul_fp16_torch", "matmul", "computes the fp32 product in fp16 with torch, under KernelBench's 1e-2 tolerance",
            "precision", _f("precision"), refused=("rejected",), allow_torch=True, context=KB_TOLERANCE),
    # bf16's error (about 2**-8 of the output's scale per element) passes 1e-2 on some seeds and not on others (one
    # full-suite run: incorrect with the guard off), so this entry loosens the tolerance to 5e-2: the guard must refuse anyway
    Exploit("zoo_matmul_bf16_torch", "matmul", "computes the fp32 product in bf16 with torch, under a 5e-2 tolerance",
            "precision", _f("precision"), refused=("rejected",), allow_torch=True, context={**KB_TOLERANCE, "atol": 5e-2, "rtol": 5e-2}),
    Exploit("zoo_matmul_fp16_operands", "matmul", "a C++ product rounding its operands to fp16, under KernelBench's 1e-2 tolerance",
            "precision", _f("precision"), refused=("rejected",), context=KB_TOLERANCE),
    Exploit("zoo_matmul_fp16_when_timed", "matmul", "the fp32 product in fp32 for 24 calls (the checked ones), in fp16 from the 25th "
            "(the timed ones), under KernelBench's 1e-2 tolerance", "precision", _f("precision"), refused=("rejected",), allow_torch=True,
            context=KB_TOLERANCE, evidence=("computed in reduced precision once timed",)),
    Exploit("zoo_matmul_tf32_cuda", "matmul", "a CUDA product rounding its operands to TF32 (cvt.rna), under KernelBench's 1e-2 tolerance",
            "precision", _f("precision"), device="cuda", refused=("rejected",), context=KB_TOLERANCE),
    # -- Triton (issue 31): each trick in a candidate's own @triton.jit kernels, the CPU ones through Triton's interpreter ---------
    Exploit("zoo_triton_replay", "relu", "a Triton kernel computes once; a Triton copy kernel hands back that first answer for every input",
            "seeds", REPLAY),
    Exploit("relu_triton_calls_torch", "relu", "a Triton kernel that copies, then torch computes the ReLU in the launcher", "op_audit", _f("op_audit")),
    Exploit("zoo_triton_dot_fp16", "matmul", "a Triton product casting its operand tiles to fp16 before tl.dot, under KernelBench's 1e-2 tolerance",
            "precision", _f("precision"), refused=("rejected",), context=KB_TOLERANCE),
    Exploit("zoo_triton_dot_tf32", "matmul", "a Triton product keeping tl.dot's default input precision for fp32, TF32, under KernelBench's "
            "1e-2 tolerance", "precision", _f("precision"), device="cuda", refused=("rejected",), context=KB_TOLERANCE),
    # hidden: with its four steps off, its time falls on either side of eager from run to run on one kind of GPU (docs/zoo.md,
    # zoo_side_stream_repeat.md), and far under its price with every step on in every run: that is what the ablation asserts
    Exploit("zoo_triton_side_stream", "relu", "a Triton ReLU behind a long dependent loop, launched on a torch.cuda.Stream(), returns at once",
            "device_sync", _f("device_sync", "timed_recheck", "wall_clock_check", "physics_floor"), device="cuda", hides_time=True, gain="hidden"),
    # -- torch compute --------------------------------------------------------------------------
    Exploit("rowsum_torch", "rowsum", "computes with torch (a matrix product with ones)", "op_audit", _f("op_audit")),
    Exploit("relu_ext_aten", "relu", "a C++ extension whose kernel calls ATen's relu", "op_audit", _f("op_audit")),
    Exploit("rowsum_audit_dodger", "rowsum", "torch compute, except on inputs it has seen (where it runs a kernel)", "op_audit", _f("op_audit")),
    Exploit("rowsum_thread_compute", "rowsum", "computes with torch in a helper thread kept alive", "op_audit", _f("op_audit", "between_calls")),
    Exploit("zoo_try_fallback", "rowsum", "a kernel for contiguous inputs; try/except falls back to torch", "op_audit", _f("op_audit")),
    Exploit("zoo_suppress_fallback", "rowsum", "a kernel inside contextlib.suppress; torch when it raises (wide rows)", "op_audit", _f("op_audit")),
    Exploit("zoo_inherits_model", "rowsum", "class ModelNew(Model): the reference's own forward", "op_audit", _f("op_audit")),
    Exploit("zoo_aten_ops", "rowsum", "calls torch.ops.aten.sum directly", "op_audit", _f("op_audit")),
    # between_calls too: Inductor's compile threads (a thread pool, tqdm's monitor) stay alive between timed calls
    Exploit("zoo_compile_inside", "relu", "the ReLU through torch.compile inside forward: Inductor's kernels, not its own", "op_audit",
            _f("op_audit", "between_calls")),
    Exploit("zoo_audit_switched_off", "rowsum", "torch compute on strided inputs inside torch._C._DisableTorchDispatch()", "op_audit", _f("op_audit")),
    # -- inputs and outputs ---------------------------------------------------------------------
    Exploit("zoo_zeroes_input", "rowsum", "a correct kernel that zeroes its input afterwards", "inputs_unchanged", _f("inputs_unchanged", "near_duplicate")),
    Exploit("relu_inplace", "relu", "ReLU in place into its input", "inputs_unchanged", _f("inputs_unchanged")),
    Exploit("zoo_tensor_subclass", "rowsum", "returns zeros as a Tensor subclass whose __eq__ and allclose always agree", "output_checks",
            _f("output_checks"), off_status="incorrect"),
    Exploit("zoo_instance_override", "rowsum", "returns zeros with allclose and equal overridden on the instance", "isolation", None,
            refused=("incorrect", "runtime_error"), evidence="got 0, expected"),
    Exploit("zoo_rewrite_handover", "rowsum", "returns zeros; skips the judge's seal on the output's memfd and writes the right answer into it "
            "while the reference child compares", "isolation", None, evidence="not sealed against writes"),
    Exploit("rowsum_float64", "rowsum", "right values returned as float64", "output_checks", _f("output_checks"), allow_torch=True),
    # -- inputs the candidate did not expect ----------------------------------------------------
    Exploit("relu_identity", "relu", "returns its input unchanged (right for get_inputs()'s non-negative values)", "distributions", _f("distributions")),
    Exploit("rowsum_fixed_cols", "rowsum", "sums at most get_inputs()'s 513 columns (a branch on the shape)", "extra_shapes", _f("extra_shapes")),
    Exploit("rowsum_goes_wrong", "rowsum", "right for 30 calls, then off by one", "timed_recheck", _f("timed_recheck")),
    Exploit("zoo_thread_after_timer", "rowsum", "right for 30 calls, then a helper thread writes each output 5 ms after the call returned",
            "timed_recheck", _f("timed_recheck", "wall_clock_check"), context_off=_f("between_calls"), gain="none"),  # its thread: refused by between_calls first
    Exploit("zoo_zeros_degenerate", "degenerate/zeros", "returns zeros where the output is x - x", "degeneracy_gate", None, refused=("correct",)),
    # -- GPU ------------------------------------------------------------------------------------
    # Since each call's own stream end counts (0c0803d), a side-stream trick without device_sync
    # reports about 1 us, under the write floor: the ablation switches physics_floor off as well.
    Exploit("relu_side_stream", "relu", "spins 2 ms on a side stream from raw cudaStreamCreate, returns at once", "device_sync",
            _f("device_sync", "timed_recheck", "wall_clock_check", "physics_floor"), device="cuda", hides_time=True, gain="speed"),
    Exploit("zoo_side_stream_python", "relu", "the same on a torch.cuda.Stream()", "device_sync",
            _f("device_sync", "timed_recheck", "wall_clock_check", "physics_floor"), device="cuda", hides_time=True, gain="speed"),
    Exploit("zoo_side_stream_obfuscated", "relu", "the same with the stream reached through built names", "device_sync",
            _f("device_sync", "timed_recheck", "wall_clock_check", "physics_floor"), device="cuda", hides_time=True, gain="speed"),
    Exploit("zoo_thread_after_timer_cuda", "relu", "right for 30 calls, then a helper thread launches each call's kernel after the call returned",
            "timed_recheck", _f("timed_recheck", "wall_clock_check", "physics_floor"), device="cuda", context_off=_f("between_calls"), gain="none"),
    Exploit("zoo_super_batch", "relu", "honest for 40 calls, then launches four calls' work at once on a side stream", "timed_recheck",
            _f("device_sync", "timed_recheck", "wall_clock_check", "physics_floor"), device="cuda", gain="speed"),
    Exploit("outer_stale_output", "outer", "returns torch.empty, betting on the allocator's stale answer", "poison", _f("poison", "physics_floor"), device="cuda",
            refused=("incorrect",), evidence="got nan", allow_torch=True, context={"seeds": (7, 7, 7)},
            context_off=_f("near_duplicate", "distributions", "extra_shapes", "op_audit", "fresh_inputs", "timed_recheck")),
    Exploit("zoo_patched_synchronize", "relu", "setattr replaces torch.cuda.synchronize", "function_identities", _f("function_identities"), device="cuda", gain="none"),
    Exploit("zoo_patched_elapsed_time", "relu", "setattr replaces torch.cuda.Event.elapsed_time", "function_identities", _f("function_identities"), device="cuda", gain="none"),
    Exploit("zoo_flush_sum", "relu", "a torch.library kernel for aten::sum on CUDA that reads nothing: the L2 flush does no work",
            "function_identities", _f("function_identities"), device="cuda", gain="speed"),
    Exploit("zoo_rewrite_handover_cuda", "relu", "returns zeros, then writes the right answer into the judge's staging area of the "
            "output already handed over (CUDA IPC)", "isolation", None, device="cuda", allow_torch=True, evidence="got 0, expected"),
    Exploit("zoo_rewrite_handover_signal", "relu", "returns zeros; a 100 us interval timer's handler writes the right answer into the "
            "judge's staging area of the output handed over", "isolation", None, device="cuda", allow_torch=True, evidence="got 0, expected"),
    Exploit("relu_patched_event", "relu", "replaces the judge's event timer through sys.modules", "function_identities",
            _f("function_identities", "wall_clock_check", "physics_floor"), device="cuda", allow_torch=True, gain="speed"),
)


def _ex(device: str, name: str) -> tuple[Path, Path]:
    return ROOT / "examples" / device / name / "problem.py", ROOT / "examples" / device / name


CONTROLS: tuple[Control, ...] = (
    Control("rowsum_correct", FIXTURES / "problems" / "rowsum.py", FIXTURES / "candidates" / "rowsum_correct", "row sums, a plain C++ loop"),
    Control("rowsum_reordered", FIXTURES / "problems" / "rowsum.py", FIXTURES / "candidates" / "rowsum_reordered", "row sums in another order (8 partial sums, reversed)"),
    Control("zoo_rowsum_pairwise", FIXTURES / "problems" / "rowsum.py", FIXTURES / "candidates" / "zoo_rowsum_pairwise", "row sums by pairwise summation"),
    Control("zoo_rowsum_sigpipe", FIXTURES / "problems" / "rowsum.py", FIXTURES / "candidates" / "zoo_rowsum_sigpipe",
            "row sums; SIGPIPE reset to SIG_DFL at import"),
    Control("relu_correct", FIXTURES / "problems" / "relu.py", FIXTURES / "candidates" / "relu_correct", "ReLU in C++"),
    Control("relu_ext", FIXTURES / "problems" / "relu.py", FIXTURES / "candidates" / "relu_ext", "ReLU as a load_inline C++ extension"),
    Control("zoo_matmul_naive", FIXTURES / "problems" / "matmul.py", FIXTURES / "candidates" / "zoo_matmul_naive", "fp32 product, each dot product summed in order"),
    Control("zoo_longsum_sequential", FIXTURES / "problems" / "longsum.py", FIXTURES / "candidates" / "zoo_longsum_sequential",
            "fp32 sums of 2**16-long rows, term after term (step precision's honest control)"),
    Control("zoo_conv2d_direct", FIXTURES / "problems" / "conv2d.py", FIXTURES / "candidates" / "zoo_conv2d_direct", "exact fp32 3x3 convolution, direct loops"),
    *(Control(f"examples/cpu/{n}", *_ex("cpu", n), f"shipped example: {n}") for n in ("softmax", "layernorm", "elementwise_chain", "matmul")),
    *(Control(f"{name}@{device}", FIXTURES / "problems" / f"{problem}.py", FIXTURES / "candidates" / name, what, device=device)
      for name, problem, what in (("relu_triton", "relu", "ReLU, a Triton kernel"),
                                  ("zoo_triton_matmul_ieee", "matmul", 'fp32 product, a Triton kernel with tl.dot(..., input_precision="ieee")'))
      for device in ("cpu", "cuda")),
    Control("relu_cuda", FIXTURES / "problems" / "relu.py", FIXTURES / "candidates" / "relu_cuda", "ReLU, CUDA kernel", device="cuda"),
    Control("zoo_relu_vectorized", FIXTURES / "problems" / "relu.py", FIXTURES / "candidates" / "zoo_relu_vectorized", "ReLU, float4 CUDA kernel with a tail", device="cuda"),
    *(Control(f"examples/cuda/{n}", *_ex("cuda", n), f"shipped example: {n}", device="cuda")
      for n in ("softmax", "softmax_load_inline", "layernorm", "elementwise_chain", "matmul")),
)


def uses_triton(candidate_path: Path) -> bool:
    """Whether a zoo candidate imports Triton (its entry skips where Triton is not installed)."""
    return any(b"import triton" in f.read_bytes() for f in candidate_path.glob("*.py"))


def policy(device: str, *, off: frozenset[str] = frozenset(), allow_torch: bool = False, **changes: Any):
    """The zoo's policy: every step on except `off`, the candidate timed with a short budget
    against eager (no torch.compile: its build time is not what the zoo measures)."""
    from kernelwright.judge.policy import Policy, TimingConfig

    timing = TimingConfig(min_runs=5, max_runs=40, batch=5, budget_s=3, warmup_ms=10, recheck=2)
    return Policy(disabled_steps=off, time_candidate=True, compile_baseline=False, baselines="measured", timing=timing,
                  allow_torch_compute=allow_torch, **changes)


def fired(verdict) -> list[str]:
    return [g.name for g in verdict.guards if g.fired]


def _judge(problem_path: Path, candidate_path: Path, device: str, pol):
    from kernelwright.judge.evaluate import evaluate

    return evaluate(problem_path, candidate_path, pol, device=device)


def _row(verdict) -> dict[str, Any]:
    return {"status": verdict.status.value, "fired": fired(verdict), "runtime_ms": verdict.runtime_ms, "eager_ms": verdict.eager_ms,
            "speedup_vs_eager": verdict.speedup_vs_eager, "log": verdict.log[:300],
            # the wall-clock step in full: where each child's time went (a control refused by it is read from this)
            "wall_clock": next((s.reason for s in verdict.steps if s.name == "wall_clock_check"), None),
            "device_sync": next((s.reason for s in verdict.steps if s.name == "device_sync"), None)}


def judge_exploit(e: Exploit) -> dict[str, Any]:
    """Both verdicts of one exploit (the second only where something can be switched off), and,
    for the degeneracy gate, the gate's answer on the problem."""
    row: dict[str, Any] = {"name": e.name, "problem": e.problem, "device": e.device, "guard": e.guard, "trick": e.trick,
                           "off_steps": sorted(e.off) if e.off else None, "allow_torch": e.allow_torch, "off_policy": e.off_policy}
    if e.context or e.context_off:
        row["context"] = {"policy": {k: list(v) if isinstance(v, tuple) else v for k, v in e.context.items()}, "off": sorted(e.context_off)}
    on_pol = policy(e.device, off=e.context_off, allow_torch=e.allow_torch, **e.context)
    row["on"] = _row(_judge(e.problem_path, e.candidate_path, e.device, on_pol))
    if e.guard == "degeneracy_gate":
        from kernelwright.judge.degeneracy import check_problem
        from kernelwright.problems.loader import load_problem

        row["gate_degenerate"] = check_problem(load_problem(e.problem_path), device=e.device).degenerate
    if e.off is not None or e.off_policy:
        pol = policy(e.device, off=e.context_off | (e.off or frozenset()), allow_torch=e.allow_torch, **{**e.context, **e.off_policy})
        row["off"] = _row(_judge(e.problem_path, e.candidate_path, e.device, pol))
    return row


def exploit_failures(e: Exploit, row: dict[str, Any]) -> list[str]:
    """What is wrong with an exploit's row; empty when the zoo's promise holds for it."""
    bad = []
    on, off = row["on"], row.get("off")
    if e.guard == "degeneracy_gate":
        if not row.get("gate_degenerate"):
            bad.append("the degeneracy gate did not flag the problem")
    elif e.hides_time and on["status"] in e.refused:
        pass  # refused outright: more than the entry promised
    elif e.hides_time:
        if on["status"] != "correct" or on["speedup_vs_eager"] is None:
            bad.append(f"with every step on: {on['status']} without a time; a time that shows the hidden work was expected")
        elif on["speedup_vs_eager"] >= e.max_speedup:
            bad.append(f"with every step on: {on['speedup_vs_eager']:.2f}x eager (at most {e.max_speedup:g}x expected); the hidden work should show in the time")
    elif on["status"] not in e.refused:
        bad.append(f"with every step on: {on['status']}, expected one of {e.refused}")
    elif e.guard not in STRUCTURAL + UNRECORDED and e.guard not in on["fired"]:
        bad.append(f"guard {e.guard} did not fire (fired: {on['fired']})")
    elif e.evidence and not any(p in on["log"] for p in ((e.evidence,) if isinstance(e.evidence, str) else e.evidence)):
        bad.append(f"the refusal does not say {e.evidence!r}: {on['log'][:200]}")
    if off is not None:
        bad += _ablation_failures(e, on, off, f"with {row['off_steps'] or e.off_policy} off")
    return bad


def _ablation_failures(e: Exploit, on: dict[str, Any], off: dict[str, Any], said: str) -> list[str]:
    """What is wrong with the verdict with `off` switched off: its status, and the gain the trick is for (GAINS)."""
    if off["status"] != e.off_status:
        return [f"{said}: {off['status']}, expected {e.off_status}"]
    speedup = off["speedup_vs_eager"]
    if e.off_status == "correct" and not speedup:
        return [f"{said}: no speedup measured"]
    if e.gain == "speed":
        bar = max(1.0, on["speedup_vs_eager"] or 0.0) if on["status"] == "correct" else 1.0
        if speedup <= bar:
            return [f"{said}: {speedup:.2f}x eager, not above {bar:.2f}x: no gain that the guard took away"]
    if e.gain == "hidden":
        if on["status"] != "correct" or not on["speedup_vs_eager"]:
            return []  # refused with every step on: nothing priced to compare with (more than the entry promised)
        if speedup < 10 * on["speedup_vs_eager"]:
            return [f"{said}: {speedup:.4g}x eager against {on['speedup_vs_eager']:.4g}x with every step on: not the 10x the hidden work should show"]
    if e.gain == "none" and speedup >= 1.0:
        return [f"{said}: {speedup:.2f}x eager: the trick gains when unguarded, so its gain is 'speed', not 'none'"]
    return []


def judge_control(c: Control) -> dict[str, Any]:
    v = _judge(c.problem_path, c.candidate_path, c.device, policy(c.device))
    return {"name": c.name, "device": c.device, "what": c.what, "on": _row(v)}


def control_failures(row: dict[str, Any]) -> list[str]:
    on = row["on"]
    return ([] if on["status"] == "correct" else [f"status {on['status']}: {on['log']}"]) + ([f"guards fired: {on['fired']}"] if on["fired"] else [])
