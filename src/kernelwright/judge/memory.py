"""GPU memory the judge owns: what one verdict needs, admission by memory, and whose an OOM is.

**Estimate.** The reference child measures the problem on its first forward at setup: bytes of
get_inputs() (I), of the outputs (O), of parameters and buffers (P), and the peak the forward
allocated (W, inputs and outputs included; CUDA only). One verdict's two children then hold about

    reference: CTX + P + max(I + X + O + max(O, T), 2 O + T, (S + 1) I + X + 2 O + T)
    candidate: CTX + P + max(I + X + 3 O + D, (S + 1) I + X + 2 O)

where X is the forward's working set beyond its inputs and outputs (W - I - O), T the chunked
comparison's temporaries (64 bytes an element of a chunk, comparison_chunk) and D
the input check's (judge.inputs: DIGEST_TEMP at most, and a strided input's slab). The reference child keeps no reference
output on the GPU: it keeps one in host memory or recomputes it (judge.child_reference), and it
reads the candidate's output in place from its staging area (judge.handover.taken), so a
comparison holds the case's recompute (I + X + O) and T; the determinism check at setup holds
one output beside a forward (I + X + 2 O), then compares the two (2 O + T); the near case's
blindness check does so only when the near reference is recomputed and the output is too large
to wait in host memory meanwhile (over about 100 MB, child_reference.NEAR_PARK_S),
and otherwise holds I + X + O, then 2 O + T; when the baselines are timed, it holds
the timing pool (S I) and, re-checking a timed output, that call's inputs, recompute and the last
timed output beside it (I + O + T more). The pool has S = pool_slots(I) input sets: one, into
which every timed call's fresh values go in place (step fresh_inputs; without it, an ablation,
POOL_SLOTS while they fit in POOL_BYTES, fewer for larger inputs, at least one; `kernelwright baseline` sizes its pool the same way). The candidate child
holds a case's inputs (I), its forward (X + O), the staging area (O), one block an output's size
that poison may add (O) and the input check's temporaries (D; it keeps a keyed digest of the
inputs, no copy of them), or, when timed, the pool and a refresh's fresh set ((S + 1) I: a refresh
lets go of the set's storage before it draws, but candidate code may still hold it) beside the
call's output and the staging area. A near case draws the other input set its changed values
come from before its own (judge.inputs.near_patch), so no child holds two. Poison fills the
allocator's free blocks in place and holds nothing itself (judge.correctness.poison).
Measured peaks against this estimate are in benchmarks/results/memory_h200.md. A term the estimate
misses lets an honest candidate run out of memory in timing and be charged for it: the
attribution below is only as right as this estimate.
CTX is the CUDA context and caching allocator's floor per process; the candidate's working set
is taken as the reference's. `estimate` returns that sum times SLACK. The figures are what the
caching allocators reserve: what another process cannot have. nvidia-smi shows the same, except
for memory the allocator does not see (on the H200, 64 MiB in the matmul example's reference
child, not yet explained: benchmarks/results/memory_h200.md).

**Too large.** A problem whose estimate exceeds the device's memory is refused before any case
runs, as a problem error naming both figures.

**Admission.** Verdicts on one device reserve their estimate in a ledger file beside the device
locks (judge.gpulock's folder, `<key>.mem`, under flock); one is admitted when the live
reservations plus its own fit in ADMIT_SHARE of the device, or when nothing else is reserved. It
waits otherwise (with a progress line), and its reservation goes when the verdict ends or its
process dies. A reservation is live while its own lock file (`<key>.mem.<token>.held`) is held
under flock by the process that made it: the kernel lets go when that process dies, and an entry
that candidate code writes into the shared ledger with a made-up pid or lock counts for nothing,
and the ledger's own lock is polled up to a deadline (_lock_ledger), so candidate code holding it
stops no admission or release for longer than that; a reservation's own lock file, locked by
another process before this one could, refuses that reservation instead of waiting. So concurrent verdicts on one GPU never run each other out of memory; a
spare candidate child (judge.spares) reserves its context (CTX) the same way for its whole life, and
an idle warm reference child (judge.refpool) while it is idle (a verdict not admitted at once closes
its own process's idle ones first);
processes that are not kernelwright's are not in the ledger.

**Whose OOM.** Nothing the candidate's process says about its memory can be trusted (it could
free what it held, or forge the message). When a candidate child reports an out-of-memory the
judge kills it, then asks the reference child for the device's free memory (judge.evaluate's
Flow._oom): if the candidate's part of the estimate is free without it, it took more than the
device had for it (`runtime_error`); if not, other processes hold the rest (`infra_error`). Every
out-of-memory in the reference child is the judge's (`infra_error`). A process the candidate
started outside its process group could keep memory past the kill: the sandbox's business.

`KERNELWRIGHT_DEVICE_BYTES` sets the device's size for all of this (tests use it on the CPU
backend, where admission is otherwise off: host memory is not the GPU's).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

CTX = 768 * 2**20  # CUDA context, cuBLAS workspace and the allocator's first segments, per child process
COMPARE_CHUNK = 1 << 22  # elements compared at a time, at most: the comparison's temporaries stay near 256 MiB;
# a chunk costs two synchronisations (the scale's sum, the short pass) (judge.correctness.CHUNK)
COMPARE_CHUNK_MIN = 1 << 16  # ... and at least, unless the cap is smaller (tests)
COMPARE_CHUNKS_PER_OUTPUT = 32  # between the two, an output is compared in this many chunks: temporaries of about 2 bytes
# per element on the failing path (64 a chunk element), half a float32 output, instead of 256 MiB beside a 64 MiB output
COMPARE_TEMP = 8 * 8 * COMPARE_CHUNK  # temporaries of the largest comparison chunk: about seven float64 and six bool per
# element on the failing path
DIGEST_TEMP = 16 * (1 << 22)  # the input check's temporaries: each 16-bit word's weight, and the word widened if the multiply copies it
# (judge.input_digest.DIGEST_WORDS; a test keeps them in step)
SLAB_TEMP = 1 << 26  # ... and the slab a strided input is copied in (judge.input_digest.SLAB_BYTES: more when one index of its
# first dimension is larger, which the estimate cannot see)
SLACK = 1.25  # fragmentation and what the formula leaves out
POOL_SLOTS = 3  # input sets in the timing pool (judge.measure) ...
POOL_BYTES = 4 * 2**30  # ... while they fit in this much; fewer for larger inputs (pool_slots)
ADMIT_SHARE = 0.92  # of the device's memory that admitted verdicts may reserve together
POLL_S = 0.1
LEDGER_GRACE_S = 2.0  # how long a reservation waits for the ledger's own lock, held by others for milliseconds
LEDGER_POLL_S = 0.002
FAKE_ENV = "KERNELWRIGHT_DEVICE_BYTES"


@dataclass(frozen=True)
class Estimate:
    """One verdict's GPU memory, in bytes."""

    reference: int
    candidate: int

    @property
    def total(self) -> int:
        return int((self.reference + self.candidate) * SLACK)

    def to_dict(self) -> dict[str, int]:
        return {"reference_bytes": self.reference, "candidate_bytes": self.candidate, "estimate_bytes": self.total}


def pool_slots(input_bytes: int, fresh: bool = True) -> int:
    """Input sets in the timing pool. With step fresh_inputs on (every policy but an ablation) one:
    every timed call writes new values into it, so a second or third set adds memory and no check
    (the identity replay is caught on one set as on three; tests/test_protocol_steps.py). Without
    fresh inputs the pool is the only variation between calls: POOL_SLOTS while they fit in
    POOL_BYTES, fewer for larger inputs, never under one."""
    if fresh:
        return 1
    if input_bytes <= 0:
        return POOL_SLOTS
    return max(1, min(POOL_SLOTS, POOL_BYTES // input_bytes))


def pool_slots_for(meta: dict[str, Any], fresh: bool = True) -> int:
    """pool_slots of the problem's inputs as a reference child's setup reply measured them."""
    return pool_slots(int((meta.get("memory") or {}).get("input_bytes") or 0), fresh)


def comparison_chunk(n: int, cap: int = COMPARE_CHUNK) -> int:
    """Elements compared at a time in an output of n elements (judge.correctness.chunk_elements, whose
    cap tests lower). Here, not there: the estimate is made in the judge's own process, which never
    needs torch, and importing it for this cost the first verdict of a service about 2.7 s on the
    H200 (benchmarks/results/warm_h200.md)."""
    return min(cap, max(COMPARE_CHUNK_MIN, -(-n // COMPARE_CHUNKS_PER_OUTPUT)))


def compare_temp(meta: dict[str, Any]) -> int:
    """T: the comparison's temporaries for the largest output the setup reply lists (64 bytes an
    element of its chunk, comparison_chunk), or, without that list, COMPARE_TEMP
    or 64 bytes an output byte, whichever is less."""
    shapes = [o for o in meta.get("outputs") or [] if isinstance(o, dict) and isinstance(o.get("shape"), list)]
    if not shapes:
        o = int((meta.get("memory") or {}).get("output_bytes", 0))
        return min(COMPARE_TEMP, 64 * max(1, o))
    worst = 0
    for out in shapes:
        n = 1
        for d in out["shape"]:
            n *= int(d)
        n *= 2 if str(out.get("dtype", "")).startswith("complex") else 1  # compared as real and imaginary parts
        worst = max(worst, 64 * comparison_chunk(n))
    return worst


def estimate(meta: dict[str, Any], *, timed: bool = True, ref_pool: bool = True, fresh: bool = True, oracle: int = 0,
             total: int | None = None) -> Estimate:
    """The estimate of the module docstring, from the reference child's setup reply. Without
    timing (`timed` False) neither child builds a timing pool; with cached baselines (`ref_pool`
    False) the reference child does not; `fresh` is step fresh_inputs (the pool's size); `oracle`,
    the bytes of step precision's float64 run on the device (judge.guards.precision.oracle_need),
    made while the reference child holds one case's inputs and outputs; left out where the verdict
    would then not fit `total`, the device's bytes (the float64 run goes to the host, or says why not)."""
    mem = meta.get("memory") or {}
    i, o, p = int(mem.get("input_bytes", 0)), int(mem.get("output_bytes", 0)), int(mem.get("param_bytes", 0))
    x = max(0, int(mem.get("forward_peak_bytes", 0)) - i - o)  # the forward's working set beyond its inputs and outputs
    t = compare_temp(meta)
    d = min(DIGEST_TEMP, 16 * i) + min(SLAB_TEMP, i)  # one-byte inputs widen 16-fold (int64 weights and words); a strided input is copied a slab at a time
    s = pool_slots(i, fresh)
    ref = CTX + p + max(i + x + o + max(o, t), 2 * o + t, (s + 1) * i + x + 2 * o + t if timed and ref_pool else 0, i + o + oracle if oracle else 0)
    cand = CTX + p + max(i + x + 3 * o + d, (s + 1) * i + x + 2 * o if timed else 0)
    if oracle and total is not None and Estimate(ref, cand).total > total:
        return estimate(meta, timed=timed, ref_pool=ref_pool, fresh=fresh)
    return Estimate(ref, cand)


def footprint(meta: dict[str, Any]) -> dict[str, int]:
    """The problem's own GPU memory, as the reference child measured it at setup: its inputs (I),
    outputs (O), parameters and buffers (P), the first forward's peak (W, inputs and outputs
    included), and the footprint max(W, I + O) + P that the judge's own memory is weighed against."""
    mem = meta.get("memory") or {}
    i, o, p = int(mem.get("input_bytes", 0)), int(mem.get("output_bytes", 0)), int(mem.get("param_bytes", 0))
    w = int(mem.get("forward_peak_bytes", 0))
    return {"input_bytes": i, "output_bytes": o, "param_bytes": p, "forward_peak_bytes": w, "footprint_bytes": max(w, i + o) + p}


def device_bytes(meta: dict[str, Any]) -> int | None:
    """The device's memory: KERNELWRIGHT_DEVICE_BYTES, else the reference child's report (CUDA)."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        try:
            value = int(fake)
        except ValueError:
            raise ValueError(f"{FAKE_ENV} must be a number of bytes, got {fake!r}") from None
        if value <= 0:
            raise ValueError(f"{FAKE_ENV} must be positive, got {value}")
        return value
    total = (meta.get("memory") or {}).get("device_total_bytes")
    return int(total) if total else None


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def too_large(est: Estimate, total: int, free: int | None) -> str:
    """A problem error's text when one verdict cannot fit the device; empty when it can."""
    if est.total <= total:
        return ""
    said_free = f", {gib(free)} free" if free is not None else ""
    return (f"one verdict of this problem needs about {gib(est.total)} of GPU memory (reference child {gib(est.reference)}, "
            f"candidate child {gib(est.candidate)}, with {SLACK:g}x slack; judge.memory), more than the device's {gib(total)}{said_free}")


# -- admission ---------------------------------------------------------------------------------------


def _ledger_path(key: str) -> str:
    from kernelwright.judge.gpulock import lock_dir

    return str(lock_dir() / f"{key}.mem")


def _held(lock: Any, lock_dir: str) -> bool:
    """Whether a reservation's lock file is held (flock) by a live process: the ledger is a shared
    file that candidate code could write, so liveness is never a pid it could name."""
    if not isinstance(lock, str) or os.path.dirname(lock) != lock_dir or not os.path.basename(lock).endswith(".held"):
        return False
    try:  # non-blocking: a FIFO planted there would otherwise hang every admission on the device
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _valid(token: str, v: Any, lock_dir: str) -> bool:
    """Well formed, and its lock file is its own (named after its token) and held."""
    return (isinstance(v, dict) and type(v.get("bytes")) is int and v["bytes"] >= 0 and isinstance(v.get("lock"), str)
            and os.path.basename(v["lock"]).endswith(f".mem.{token}.held") and _held(v["lock"], lock_dir))


def _read(f: Any, lock_dir: str) -> dict[str, Any]:
    """The ledger's live reservations: well formed, their lock files held."""
    f.seek(0)
    try:
        data = json.loads(f.read() or "{}")
    except ValueError:
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and _valid(k, v, lock_dir)} if isinstance(data, dict) else {}


def _lock_ledger(f: Any, deadline: float, cancelled: Callable[[], bool] = lambda: False) -> None:
    """The ledger's own lock (flock), polled: the ledger is a file candidate code can open (until
    the children are sandboxed), and a blocking flock would let one that holds it stop every
    admission and every release on the device for as long as it lives. TimeoutError past
    `deadline`, InterruptedError when cancelled."""
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if cancelled():
                raise InterruptedError("cancelled while waiting for GPU memory") from None
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError("the GPU memory ledger stayed locked by another process") from None
            time.sleep(LEDGER_POLL_S if now - t0 < LEDGER_GRACE_S else POLL_S)  # held longer than a reservation takes: slower


def _write(f: Any, data: dict[str, Any]) -> None:
    f.seek(0)
    f.truncate()
    f.write(json.dumps(data))
    f.flush()


@contextlib.contextmanager
def admitted(key: str, need: int, total: int, *, say: Callable[[str], None] = lambda _m: None,
             cancelled: Callable[[], bool] = lambda: False, timeout_s: float = 3600.0) -> Iterator[float]:
    """Reserve `need` bytes of device `key` (of `total`) for the block; yields the seconds waited.
    Raises TimeoutError when not admitted within timeout_s, InterruptedError when cancelled."""
    token = f"{os.getpid()}-{id(object())}-{time.monotonic_ns()}"
    path = _ledger_path(key)
    lock_dir = os.path.dirname(path)
    lock = os.path.join(lock_dir, f"{key}.mem.{token}.held")
    lock_fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    os.fchmod(lock_fd, 0o644)  # others must be able to test it, whatever this process's umask
    try:  # held for the reservation's life, released by the kernel if this process dies; never waited on:
        # a process watching the folder could open the new file and lock it first
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except BaseException as exc:
        os.close(lock_fd)
        with contextlib.suppress(OSError):
            os.unlink(lock)
        if isinstance(exc, BlockingIOError):
            raise TimeoutError("this reservation's own lock file was locked by another process") from None
        raise
    with contextlib.suppress(OSError):
        os.chmod(path, 0o666)  # every user's verdicts share the ledger, as they share the locks
    f = os.fdopen(fd, "r+")
    t0, told, written = time.monotonic(), False, False
    try:
        while True:
            _lock_ledger(f, t0 + max(timeout_s, LEDGER_GRACE_S), cancelled)
            try:
                held = _read(f, lock_dir)
                others = sum(v["bytes"] for v in held.values())
                if not held or others + need <= ADMIT_SHARE * total:
                    held[token] = {"pid": os.getpid(), "bytes": need, "since": time.time(), "lock": lock}
                    written = True
                    _write(f, held)
                    break
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)
            if not told:
                say(f"waiting for GPU memory: this verdict needs about {gib(need)}; {len(held)} other verdict(s) hold "
                    f"{gib(others)} of {gib(ADMIT_SHARE * total)}")
                told = True
            if cancelled():
                raise InterruptedError("cancelled while waiting for GPU memory")
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(f"not admitted within {timeout_s:g} s: other verdicts hold {gib(others)} of the device's {gib(total)}")
            time.sleep(POLL_S)
        yield time.monotonic() - t0
    finally:
        if written:  # else nothing of it is in the ledger: no second wait for the ledger's lock
            with contextlib.suppress(OSError, ValueError, TimeoutError):  # not tidied: the entry is dead once its lock goes below
                _lock_ledger(f, time.monotonic() + LEDGER_GRACE_S)
                held = _read(f, lock_dir)
                if held.pop(token, None) is not None:
                    _write(f, held)
                fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(lock_fd)
