"""One device, many judges: a fair reader-writer lock per device, across processes and threads.

Several kernelwright processes (two `check` runs in two workspaces, MCP servers, an agent beside a
`baseline` run) may judge on the same GPU at once. Builds run on the host and take no lock. Untimed
device work (reference outputs, correctness runs, compute-sanitizer, loading a problem) takes the
lock *shared*: it may overlap other untimed work, never a timing. Timed work (the judge's timing
phase, baseline timing, the torch-profiler breakdown, ncu) takes it *exclusive*: it runs alone.

The key is the device: `cuda-<CUDA_VISIBLE_DEVICES entry>` for a GPU (judge.workers.physical_gpu,
so index 0 of a process given GPU 3 is `cuda-3`), `cpu` for the CPU backend, whose timings on a
small box disturb each other too. Two processes naming one GPU differently (an index and a UUID)
get two keys and do not see each other.

How: `fcntl.flock` on files in a machine-wide folder (`$KERNELWRIGHT_LOCK_DIR`, else
`<tempdir>/kernelwright-locks`, mode 1777 so every user shares it), by the turnstile pattern: two
files per key, `<key>.gate` and `<key>.lock`. Every acquirer takes the gate exclusively, then the
lock file (shared or exclusive), then lets the gate go. A writer waiting for the lock file holds
the gate, so readers arriving later queue behind it: no writer starves (Linux flock alone lets a
stream of readers starve a writer). Each acquisition opens its own descriptors (a flock belongs to
the open file description), so threads of one process contend like processes do. The kernel drops
a flock when its descriptor closes, the owner's death by SIGKILL included: no stale locks. (A
process forked without exec while a lock is held shares the descriptor and holds the lock too
until it exits.)

The lock is not reentrant: a thread that holds a device lock and asks for another (any key) is a
programming error and gets RuntimeError, never a deadlock (shared held, exclusive asked).

`KERNELWRIGHT_GPU_LOCK=off` turns it into a no-op, so a benchmark can show what it prevents
(unset or `on`: locking).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

log = logging.getLogger(__name__)

MODES = ("shared", "exclusive")
DEVICES = ("cuda", "cpu")
NOTICE_S = 0.5  # a wait longer than this is reported (progress once, log at INFO)
POLL_S = 0.02  # until the notice, the lock is polled so the notice comes from the caller's thread
CHECK_S = 1.0  # past the notice, a caller's `check` of who holds the file is asked this often (polled meanwhile)
CHECKED_POLL_S = 0.005  # the poll then: a blocking flock hands over in 0.15 ms, this in 2-3.5 ms (median, CPU box: results/lock_overhead_cpu.json)

_held = threading.local()  # .key: the device lock this thread holds, if any


@dataclass(frozen=True)
class Held:
    """One acquired device lock."""

    key: str  # "cuda-0", "cpu"
    mode: str  # "shared" or "exclusive"
    waited_s: float  # seconds spent waiting for it (0.0 when the lock is off)


def enabled() -> bool:
    """Whether device locks are taken: KERNELWRIGHT_GPU_LOCK unset, empty or "on"; False for "off"."""
    value = os.environ.get("KERNELWRIGHT_GPU_LOCK", "")
    if value not in ("", "on", "off"):
        raise ValueError(f"KERNELWRIGHT_GPU_LOCK must be on or off, got {value!r}")
    return value != "off"


def lock_dir() -> Path:
    """The machine-wide folder of lock files, created world-writable (sticky) when missing."""
    # /tmp when the machine has one, not $TMPDIR: processes with different TMPDIRs (a batch job's,
    # an MCP client's) must still meet in one folder
    base = Path("/tmp") if Path("/tmp").is_dir() else Path(tempfile.gettempdir())
    folder = Path(os.environ.get("KERNELWRIGHT_LOCK_DIR") or base / "kernelwright-locks")
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # another user's folder, or a file system without modes
            os.chmod(folder, 0o1777)
    return folder


def device_key(device: str, gpu_index: int) -> str:
    """The lock's name for a device: cuda-<physical GPU> or cpu."""
    if device not in DEVICES:
        raise ValueError(f"device must be cuda or cpu, got {device!r}")
    if device == "cpu":
        return "cpu"
    from kernelwright.judge.workers import physical_gpu

    return "cuda-" + re.sub(r"[^A-Za-z0-9._-]", "_", physical_gpu(gpu_index))  # a MIG name may hold slashes


@contextlib.contextmanager
def device_lock(device: str, gpu_index: int, mode: str, *, what: str = "",
                progress: Callable[[str], None] | None = None,
                check: Callable[[tuple[Path, Path]], None] | None = None) -> Iterator[Held]:
    """Hold the device's lock, shared (untimed work) or exclusive (timed work), for the block.
    `what` names the work in messages; `progress` is told once when the wait passes NOTICE_S.
    `check`, past the notice, is called with the key's two files (gate, lock) every CHECK_S
    whichever the wait is at, and may raise to end the wait (a verdict whose own candidate's
    process holds them: judge.evaluate); without it the wait blocks."""
    if mode not in MODES:
        raise ValueError(f"mode must be shared or exclusive, got {mode!r}")
    key = device_key(device, gpu_index)
    if not enabled():
        yield Held(key, mode, 0.0)
        return
    holding = getattr(_held, "key", None)
    if holding is not None:
        raise RuntimeError(f"device lock {key} ({mode}) asked for while this thread holds {holding}: device locks are "
                           "not reentrant; release the first before taking another")
    fd, waited = _acquire(key, mode, what, progress, check)
    _held.key = f"{key} ({mode})"
    try:
        yield Held(key, mode, waited)
    finally:
        _held.key = None
        os.close(fd)  # the kernel drops the flock with the descriptor


def _acquire(key: str, mode: str, what: str, progress: Callable[[str], None] | None,
             check: Callable[[tuple[Path, Path]], None] | None = None) -> tuple[int, float]:
    """Through the gate to the lock file; (the lock file's descriptor, seconds waited)."""
    folder = lock_dir()
    wait = _Wait(key, mode, what, progress, check, (folder / f"{key}.gate", folder / f"{key}.lock"))
    gate = _open(folder / f"{key}.gate")
    try:
        wait.take(gate, fcntl.LOCK_EX)
        fd = _open(folder / f"{key}.lock")
        try:
            wait.take(fd, fcntl.LOCK_SH if mode == "shared" else fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
    finally:
        os.close(gate)  # lets the gate go: the next in line may pass
    return fd, wait.done()


def opened_by(paths: tuple[Path, ...], within: Callable[[int], bool]) -> dict[int, Path]:
    """The processes `within` accepts that hold one of `paths` open, each with the file: read from
    /proc/PID/fd, comparing (device, inode) through the same stat on both sides, so it holds on any
    file system (overlayfs included) and whoever took the lock first (a holder that forked and
    exited leaves the descriptor, and the lock, with its child). Empty where /proc is not readable."""
    want, names, folders = {}, {p.name for p in paths}, {str(p.parent) for p in paths}
    for path in paths:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            want[(st.st_dev, st.st_ino)] = path
    found: dict[int, Path] = {}
    if not want:
        return found
    with contextlib.suppress(OSError):
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
        for pid in pids:
            if pid == os.getpid() or not within(pid):
                continue
            with contextlib.suppress(OSError):
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    with contextlib.suppress(OSError):
                        link = os.readlink(f"/proc/{pid}/fd/{fd}").removesuffix(" (deleted)")
                        if os.path.basename(link) not in names and os.path.dirname(link) not in folders:
                            continue  # only these are stat'ed: a file on a mount the candidate serves (FUSE) could stall a stat
                        st = os.stat(f"/proc/{pid}/fd/{fd}")
                        if (st.st_dev, st.st_ino) in want:
                            found[pid] = want[(st.st_dev, st.st_ino)]
                            break
    return found


def _open(path: Path) -> int:
    """A new descriptor on a lock file (read-only is enough for flock), created 0o666 if missing.
    An existing file is opened without O_CREAT, which protected_regular refuses for another user's
    file in a sticky folder."""
    flags = os.O_RDONLY | os.O_CLOEXEC
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        pass
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:  # another acquirer made it meanwhile
        return os.open(path, flags)
    with contextlib.suppress(OSError):  # the umask took bits away; a failure only costs other users
        os.fchmod(fd, 0o666)
    return fd


class _Wait:
    """The wait of one acquisition: polls until NOTICE_S, says so once, then blocks, or with a
    `check` keeps polling and asks it every CHECK_S."""

    def __init__(self, key: str, mode: str, what: str, progress: Callable[[str], None] | None,
                 check: Callable[[tuple[Path, Path]], None] | None, files: tuple[Path, Path]) -> None:
        self.key, self.mode, self.what, self.progress, self.check, self.files = key, mode, what, progress, check, files
        self.t0 = time.monotonic()
        self.noticed = False

    def take(self, fd: int, op: int) -> None:
        checked = time.monotonic()
        while not self.noticed or self.check is not None:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            now = time.monotonic()
            if not self.noticed and now - self.t0 >= NOTICE_S:
                self._notice()
            if self.noticed and self.check is not None and now - checked >= CHECK_S:
                checked = now
                self.check(self.files)  # may raise: the wait ends, the caller's descriptors close
            time.sleep(CHECKED_POLL_S if self.noticed else POLL_S)
        fcntl.flock(fd, op)

    def _notice(self) -> None:
        self.noticed = True
        unit = "the CPU" if self.key == "cpu" else "the GPU"
        why = "another evaluation is timing" if self.mode == "shared" else "other work is running on it"
        msg = f"waiting for {unit} ({self.key}): {why}" + (f"; then {self.what}" if self.what else "")
        log.info("%s", msg)
        if self.progress is not None:
            self.progress(msg)

    def done(self) -> float:
        waited = time.monotonic() - self.t0
        level = logging.INFO if self.noticed else logging.DEBUG
        log.log(level, "device lock %s (%s%s) acquired after %.2f s", self.key, self.mode, f", {self.what}" if self.what else "", waited)
        return waited
