"""Typed records that cross process and module boundaries: the verdict (schema_version 1) and its parts.

Every record is a frozen dataclass; `to_dict()` gives the JSON form of DESIGN.md's contract.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from dataclasses import dataclass
from typing import Any

SCHEMA_VERSION = 1
# The mode every model is judged in, reference, baselines and candidate alike: eval, so BatchNorm uses
# its running statistics and Dropout is the identity. KernelBench's own harness leaves its models in
# train mode, so a problem with BatchNorm times differently there; the verdict's problem.mode says it.
MODULE_MODE = "eval"


class Status(str, enum.Enum):
    """The outcome of one evaluation."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    INFRA_ERROR = "infra_error"


class BuildPath(str, enum.Enum):
    """How a candidate's kernels are built."""

    RAW = "raw"  # extern "C" sources compiled by nvcc / g++ without torch headers
    TORCH_EXTENSION = "torch_extension"  # load_inline / cpp_extension, KernelBench style
    NONE = "none"  # no kernel sources found (pure Python / torch candidate)


class BaselineSource(str, enum.Enum):
    """Where the eager and torch.compile times came from."""

    MEASURED = "measured"
    CACHED = "cached"


@dataclass(frozen=True)
class Step:
    """One protocol step and whether it ran."""

    name: str  # protocol step name, e.g. "l2_flush"
    ran: bool  # True when the step ran in this evaluation
    reason: str = ""  # why it did not run, or a short note on what it did


@dataclass(frozen=True)
class Guard:
    """One guard and whether it fired."""

    name: str  # guard name, e.g. "physics_floor"
    fired: bool  # True when the guard refused the candidate
    detail: str = ""  # evidence, sanitised and length-capped


@dataclass(frozen=True)
class Timing:
    """Summary of the candidate's timed calls."""

    n: int  # number of timed calls
    median_ms: float  # median of per-call times
    iqr_ms: float  # interquartile range of per-call times
    wall_ms: float | None = None  # wall-clock per call measured by the judge around whole batches
    profiler_ms: float | None = None  # sum of kernel times in one profiled call
    overhead_ms: float | None = None  # harness overhead subtracted from every call (step harness_overhead)
    raw_median_ms: float | None = None  # median of per-call times before that subtraction


@dataclass(frozen=True)
class Resources:
    """What the compiler reports about the candidate's kernels (worst kernel)."""

    registers: int | None = None  # registers per thread
    shared_bytes: int | None = None  # static shared memory per block
    spills: int | None = None  # spill stores + loads, bytes


@dataclass(frozen=True)
class SystemInfo:
    """Where the verdict was produced."""

    gpu: str | None  # device name, or None on the CPU backend
    driver: str | None  # driver version
    cuda: str | None  # CUDA version torch was built with
    torch: str  # torch version
    python: str  # python version
    kernelwright: str  # our version


@dataclass(frozen=True)
class Verdict:
    """One evaluation of a candidate against a problem (DESIGN.md, schema_version 1)."""

    status: Status  # outcome
    problem: dict[str, Any]  # {name, hash, size}: size full or cpu (problems.sizes), null when not reached
    candidate: dict[str, Any]  # {hash, build_path}
    policy: dict[str, Any]  # the policy used, as a dict
    build_s: float | None = None  # seconds spent building (0 when cached)
    runtime_ms: float | None = None  # candidate median
    eager_ms: float | None = None  # eager reference median
    compile_ms: float | None = None  # torch.compile baseline median (never a build time)
    baseline_source: BaselineSource | None = None  # measured or cached
    speedup_vs_eager: float | None = None  # eager_ms / runtime_ms
    speedup_vs_compile: float | None = None  # compile_ms / runtime_ms
    speedup_vs_best: float | None = None  # min(eager, compile) / runtime_ms
    max_abs_error: float | None = None  # worst |candidate - reference|
    max_rel_error: float | None = None  # worst error relative to the allowed error scale
    floor_ms: float | None = None  # physics floor from vendor peaks
    efficiency: float | None = None  # measured-ceiling time over runtime
    guards: tuple[Guard, ...] = ()  # guards evaluated
    static_findings: tuple[dict[str, Any], ...] = ()  # advisory findings
    steps: tuple[Step, ...] = ()  # every protocol step, ran or not
    timing: Timing | None = None  # candidate timing summary
    resources: Resources | None = None  # compiler-reported resources
    log: str = ""  # truncated compiler or runtime message
    system: SystemInfo | None = None  # where it ran
    created_at: str = ""  # ISO-8601 UTC
    sanitizer: dict[str, Any] | None = None  # compute-sanitizer findings when asked for (--sanitize); never decides the status
    workers: dict[str, Any] | None = None  # how the children came (forked or spawned, the reference child new or warm: judge.refpool), and the seconds waited for the device lock by mode
    memory: dict[str, Any] | None = None  # the verdict's GPU memory: estimate, device size, admission wait (judge.memory)
    sandbox: dict[str, Any] | None = None  # the sandbox generated code ran in: mode, layers, full, missing (judge.sandbox)
    pricing_version: int | None = None  # the rule the times were priced by (judge.pricing.VERSION); null when nothing was timed
    jit: dict[str, Any] | None = None  # Triton's just-in-time work in the candidate child, outside the timed calls (judge.jit_clock); null without
    schema_version: int = SCHEMA_VERSION  # contract version

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form, with every top-level key present (non-finite numbers as None)."""
        return _plain(dataclasses.asdict(self))

    def to_json(self, indent: int | None = 2) -> str:
        """The verdict as strict JSON text."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, allow_nan=False)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> "Verdict":
        """Rebuild a verdict from its JSON form."""
        d = dict(data)
        d["status"] = Status(d["status"])
        if d.get("baseline_source") is not None:
            d["baseline_source"] = BaselineSource(d["baseline_source"])
        d["guards"] = tuple(Guard(**g) for g in d.get("guards") or ())
        d["steps"] = tuple(Step(**s) for s in d.get("steps") or ())
        d["static_findings"] = tuple(d.get("static_findings") or ())
        for key, cls in (("timing", Timing), ("resources", Resources), ("system", SystemInfo)):
            if d.get(key) is not None:
                d[key] = cls(**d[key])
        return Verdict(**d)


def _plain(value: Any) -> Any:
    """Convert enums and tuples to JSON-ready values, recursively."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def truncate(text: str, limit: int = 4000) -> str:
    """Keep the head and tail of a long message, marking what was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head - 40
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[-tail:]}"


# In a 'time' command, a call whose input seed the child asks the judge for in its turn (calls[i][1]):
# judge.measure sends each seed only when asked, judge.inputs.asking_getter asks.
ASK_SEED = "ask"


@dataclass(frozen=True)
class Case:
    """One set of correctness inputs."""

    kind: str  # "native" (get_inputs as written), "normal", "uniform", "large", "extra", or "near" (inputs.perturb)
    seed: int  # seed for get_inputs / get_test_inputs and for the distribution
    index: int = 0  # which get_test_inputs() list, for kind "extra"

    @property
    def id(self) -> str:
        """A short stable name, used in messages and file names."""
        return f"{self.kind}-{self.index}-s{self.seed % 100000}" if self.kind == "extra" else f"{self.kind}-s{self.seed % 100000}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seed": self.seed, "index": self.index}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Case":
        return Case(kind=d["kind"], seed=int(d["seed"]), index=int(d.get("index", 0)))
