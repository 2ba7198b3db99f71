"""judge.gpulock: the per-device reader-writer lock across processes and threads (CPU only).

Holders in other processes are tiny `python -c` scripts that write when they entered and left
(time.monotonic, which is one clock for the whole machine on Linux); the assertions are about those
intervals, so a lock that did nothing would fail each of them.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import kernelwright
from conftest import JUDGE_TIMEOUT_S, TINY_TIMING, problem, candidate, timing_policy
from kernelwright.judge import gpulock
from kernelwright.judge.gpulock import device_lock

SRC = str(Path(kernelwright.__file__).resolve().parents[1])

# argv: mode, hold seconds, out prefix, release file (optional: hold until it exists instead)
HOLDER = r"""
import os, sys, time
from kernelwright.judge.gpulock import device_lock
mode, hold, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
release = sys.argv[4] if len(sys.argv) > 4 else None
with device_lock("cpu", 0, mode):
    t_in = time.monotonic()
    with open(out + ".in", "w") as f:
        f.write(repr(t_in))
    end = time.monotonic() + (60.0 if release else hold)
    while time.monotonic() < end and not (release and os.path.exists(release)):
        time.sleep(0.01)
    t_out = time.monotonic()
with open(out + ".tmp", "w") as f:
    f.write(f"{t_in} {t_out}")
os.replace(out + ".tmp", out)
"""


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """A private lock folder for every test (the machine-wide one is left alone)."""
    folder = tmp_path / "locks"
    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(folder))
    monkeypatch.delenv("KERNELWRIGHT_GPU_LOCK", raising=False)
    return folder


def holder(tmp_path: Path, name: str, mode: str, hold: float, release: Path | None = None) -> tuple[subprocess.Popen, Path]:
    """Start a holder process; (the process, its output prefix)."""
    out = tmp_path / name
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, "-c", HOLDER, mode, str(hold), str(out)] + ([str(release)] if release else [])
    return subprocess.Popen(args, env=env), out


def entered(out: Path, timeout: float = 20.0) -> float:
    """Wait until a holder has entered; its entry time."""
    path = Path(str(out) + ".in")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return float(path.read_text())
        time.sleep(0.01)
    raise AssertionError(f"{out.name} did not enter within {timeout} s")


def interval(proc: subprocess.Popen, out: Path) -> tuple[float, float]:
    """Wait for a holder to finish; (entered, left)."""
    assert proc.wait(timeout=30) == 0
    t_in, t_out = out.read_text().split()
    return float(t_in), float(t_out)


def disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[1] <= b[0] or b[1] <= a[0]


def gate_busy(folder: Path, key: str = "cpu") -> bool:
    """Whether someone holds the key's gate (a writer waiting for the lock file holds it)."""
    fd = os.open(folder / f"{key}.gate", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # also lets go of the probe's own flock


def wait_for(condition, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not seen within {timeout} s: {what}"
        time.sleep(0.01)


# -- across processes ---------------------------------------------------------------------------


def test_shared_holders_overlap(tmp_path):
    (pa, a), (pb, b) = holder(tmp_path, "a", "shared", 0.8), holder(tmp_path, "b", "shared", 0.8)
    ia, ib = interval(pa, a), interval(pb, b)
    assert not disjoint(ia, ib), (ia, ib)


def test_exclusive_excludes_shared_and_exclusive(tmp_path):
    pa, a = holder(tmp_path, "a", "exclusive", 0.6)
    entered(a)
    (pb, b), (pc, c) = holder(tmp_path, "b", "shared", 0.3), holder(tmp_path, "c", "exclusive", 0.3)
    ia, ib, ic = interval(pa, a), interval(pb, b), interval(pc, c)
    assert disjoint(ia, ib) and disjoint(ia, ic) and disjoint(ib, ic), (ia, ib, ic)
    assert ib[0] >= ia[1] and ic[0] >= ia[1]  # both waited for the first


def test_a_waiting_writer_goes_before_later_readers(tmp_path, lock_dir):
    pr1, r1 = holder(tmp_path, "r1", "shared", 0.8)
    entered(r1)
    pw, w = holder(tmp_path, "w", "exclusive", 0.3)
    wait_for(lambda: gate_busy(lock_dir), "the writer holding the gate while it waits for the lock file")
    pr2, r2 = holder(tmp_path, "r2", "shared", 0.1)
    i1, iw, i2 = interval(pr1, r1), interval(pw, w), interval(pr2, r2)
    assert iw[0] >= i1[1], (i1, iw)
    assert i2[0] >= iw[1], f"the later reader entered at {i2[0]:.3f}, before the writer left at {iw[1]:.3f}"


def test_a_holder_killed_by_sigkill_leaves_no_lock(tmp_path, lock_dir):
    proc, out = holder(tmp_path, "killed", "exclusive", 60.0)
    entered(out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    fd = os.open(lock_dir / "cpu.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if the lock outlived its holder
    finally:
        os.close(fd)
    with device_lock("cpu", 0, "exclusive") as held:
        assert held.waited_s < 0.5


def test_a_long_wait_is_reported_once(tmp_path):
    proc, out = holder(tmp_path, "a", "exclusive", 0.9)
    entered(out)
    said: list[str] = []
    with device_lock("cpu", 0, "shared", what="checking", progress=said.append) as held:
        assert held.key == "cpu" and held.mode == "shared"
        assert held.waited_s > gpulock.NOTICE_S
    interval(proc, out)
    assert said == ["waiting for the CPU (cpu): another evaluation is timing; then checking"]


# -- threads, misuse, switches ------------------------------------------------------------------


def _in_threads(n: int, body) -> list:
    results: list = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = body()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return results


def _hold_exclusive(seconds: float) -> tuple[float, float]:
    with device_lock("cpu", 0, "exclusive"):
        t_in = time.monotonic()
        time.sleep(seconds)
        return t_in, time.monotonic()


def test_threads_of_one_process_contend():
    a, b = _in_threads(2, lambda: _hold_exclusive(0.3))
    assert disjoint(a, b), (a, b)


def test_off_is_a_no_op(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_GPU_LOCK", "off")
    both_inside = threading.Barrier(2, timeout=5)  # broken (an error) unless both exclusives are held at once

    def body() -> float:
        with device_lock("cpu", 0, "exclusive") as held:
            both_inside.wait()
            return held.waited_s

    assert _in_threads(2, body) == [0.0, 0.0]


def test_the_lock_is_not_reentrant():
    with device_lock("cpu", 0, "shared"):
        with pytest.raises(RuntimeError, match="not reentrant"):
            with device_lock("cpu", 0, "exclusive"):
                pass
        with pytest.raises(RuntimeError, match="holds cpu"):
            with device_lock("cuda", 0, "shared"):  # another key too
                pass
    with device_lock("cpu", 0, "exclusive") as held:  # released properly: free again
        assert held.waited_s < 0.5


def test_bad_mode_device_and_switch_are_refused(monkeypatch):
    with pytest.raises(ValueError, match="'read'"):
        with device_lock("cpu", 0, "read"):
            pass
    with pytest.raises(ValueError, match="'mps'"):
        with device_lock("mps", 0, "shared"):
            pass
    monkeypatch.setenv("KERNELWRIGHT_GPU_LOCK", "maybe")
    with pytest.raises(ValueError, match="'maybe'"):
        with device_lock("cpu", 0, "shared"):
            pass
    from kernelwright.judge.evaluate import evaluate

    with pytest.raises(ValueError, match="'maybe'"):  # a user's error, before any child starts
        evaluate(problem("rowsum"), candidate("rowsum_correct"), device="cpu")


def test_keys_and_files(monkeypatch, lock_dir):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,MIG-GPU-ab/1/0")
    assert gpulock.device_key("cuda", 0) == "cuda-3"
    assert gpulock.device_key("cuda", 1) == "cuda-MIG-GPU-ab_1_0"
    assert gpulock.device_key("cpu", 5) == "cpu"
    with device_lock("cuda", 0, "shared") as held:
        assert held.key == "cuda-3"
    assert lock_dir.stat().st_mode & 0o7777 == 0o1777
    assert {p.name for p in lock_dir.iterdir()} == {"cuda-3.gate", "cuda-3.lock"}
    assert all(p.stat().st_mode & 0o777 == 0o666 for p in lock_dir.iterdir())


# -- the judge ----------------------------------------------------------------------------------


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_evaluate_times_only_after_another_process_lets_go(tmp_path):
    """A process holds the cpu lock shared (untimed work): the evaluation loads and checks
    correctness beside it, and its timing phase waits until the holder lets go."""
    from kernelwright.judge.evaluate import evaluate

    release = tmp_path / "release"
    proc, out = holder(tmp_path, "other", "shared", 0.0, release=release)
    entered(out)
    said: list[tuple[float, str]] = []

    def progress(msg: str) -> None:
        said.append((time.monotonic(), msg))
        if msg.startswith("waiting for the CPU"):
            threading.Timer(1.0, release.touch).start()  # the other process finishes a second later

    policy = timing_policy(baselines="skip", timing=dataclasses.replace(TINY_TIMING, max_runs=10, budget_s=1))
    verdict = evaluate(problem("rowsum"), candidate("rowsum_correct"), policy, device="cpu", progress=progress)
    _, let_go = interval(proc, out)
    assert verdict.status.value == "correct", verdict.log
    assert verdict.runtime_ms is not None
    waits = [msg for _, msg in said if msg.startswith("waiting for")]
    assert waits == ["waiting for the CPU (cpu): other work is running on it; then timing"], said
    timing_began = next(t for t, msg in said if msg.startswith("timing "))
    assert timing_began >= let_go, "the timing phase began before the other process let go"


def test_opened_by_names_the_process_holding_a_lock_file_open(tmp_path, lock_dir):
    proc, out = holder(tmp_path, "named", "exclusive", 60.0)
    files = (lock_dir / "cpu.gate", lock_dir / "cpu.lock")
    try:
        entered(out)
        assert gpulock.opened_by(files, lambda pid: pid == proc.pid) == {proc.pid: lock_dir / "cpu.lock"}
        assert gpulock.opened_by(files, lambda pid: False) == {}
        assert gpulock.opened_by((tmp_path / "no-such-file",), lambda pid: True) == {}
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _kill(*procs: subprocess.Popen) -> None:
    for p in procs:
        p.kill()
        p.wait(timeout=10)


def test_a_check_can_end_a_wait_and_is_shown_both_files(tmp_path, lock_dir, monkeypatch):
    monkeypatch.setattr(gpulock, "CHECK_S", 0.1)
    proc, out = holder(tmp_path, "blocking", "exclusive", 60.0)
    seen: list[tuple[Path, Path]] = []

    def check(files: tuple[Path, Path]) -> None:
        seen.append(files)
        if gpulock.opened_by(files, lambda pid: pid == proc.pid):
            raise LookupError(f"held by {proc.pid}")

    try:
        entered(out)
        t0 = time.monotonic()
        with pytest.raises(LookupError, match=f"held by {proc.pid}"):
            with device_lock("cpu", 0, "shared", check=check):
                pass
        assert time.monotonic() - t0 < 10 and seen[-1] == (lock_dir / "cpu.gate", lock_dir / "cpu.lock")
    finally:
        _kill(proc)
    with device_lock("cpu", 0, "exclusive", check=check) as held:  # free again: the check is not asked
        assert held.waited_s < 0.5


def test_a_check_sees_the_lock_file_while_the_wait_is_at_the_gate(tmp_path, lock_dir, monkeypatch):
    """"Our candidate" holds the lock file shared; another process asks for it exclusive and waits
    holding the gate; our wait, at the gate, must still find our candidate (found in review: two
    verdicts of the service would otherwise wait for each other forever)."""
    monkeypatch.setattr(gpulock, "CHECK_S", 0.1)
    ours, out = holder(tmp_path, "ours", "shared", 60.0)
    writer = None
    try:
        entered(out)
        writer, _ = holder(tmp_path, "writer", "exclusive", 0.1)
        deadline = time.monotonic() + 20
        while not gate_busy(lock_dir):  # it waits holding the gate
            assert time.monotonic() < deadline, "the writer never reached the gate"
            time.sleep(0.05)

        def check(files: tuple[Path, Path]) -> None:
            if gpulock.opened_by(files, lambda pid: pid == ours.pid):
                raise LookupError("our candidate holds the lock")

        t0 = time.monotonic()
        with pytest.raises(LookupError):
            with device_lock("cpu", 0, "shared", check=check):
                pass
        assert time.monotonic() - t0 < 10
    finally:
        _kill(ours, *([writer] if writer else []))


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
@pytest.mark.parametrize("name, status, sandbox", [("rowsum_holds_the_device_lock", "rejected", "off"), ("rowsum_correct", "correct", "auto"),
                                                   ("rowsum_holds_the_device_lock", "refused", "auto")])
def test_a_candidate_holding_the_device_lock_is_rejected_not_waited_for(name, status, sandbox):
    """The candidate takes the device lock file shared at import; timing needs it exclusive.
    Without the sandbox the verdict finds its own candidate's process holding the file open and
    rejects it (before: it waited forever, and every verdict on the device behind it); inside the
    full sandbox it cannot open the file at all. The honest control is timed as usual."""
    import dataclasses

    from kernelwright.judge import refpool
    from kernelwright.judge.evaluate import evaluate

    refpool.POOL.close()
    t0 = time.monotonic()
    verdict = evaluate(problem("rowsum"), candidate(name), dataclasses.replace(timing_policy(), sandbox=sandbox), device="cpu")
    if status == "refused":
        if verdict.sandbox["full"]:
            assert verdict.status.value == "runtime_error" and "Permission denied" in verdict.log and "cpu.lock" in verdict.log, verdict.log
        return
    assert verdict.status.value == status, verdict.log
    if status == "rejected":
        assert "holds the judge's device lock file cpu.lock open" in verdict.log
        assert time.monotonic() - t0 < 60
        assert refpool.POOL.idle() == 0  # its reference child was closed, not handed back without the lock
    with device_lock("cpu", 0, "exclusive") as held:  # the candidate's process is gone, and its lock with it
        assert held.waited_s < 0.5


@pytest.mark.timeout(JUDGE_TIMEOUT_S)
def test_a_verdict_says_how_long_it_waited_for_the_device(lock_dir):
    """workers.device_wait_s: the seconds each verdict queued for the device lock, by mode, so that a
    rollout's verdict latency can be split into queueing and its own work (issue 28)."""
    from kernelwright.judge.evaluate import evaluate

    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with device_lock("cpu", 0, "exclusive", what="a test holding the device"):
            taken.set()
            release.wait(20)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(10)
    timer = threading.Timer(1.5, release.set)
    timer.start()
    try:
        v = evaluate(problem("rowsum"), candidate("rowsum_correct"), timing_policy(), device="cpu")
    finally:
        release.set()
        holder.join(10)
    waits = v.workers["device_wait_s"]
    assert v.status.value == "correct" and 1.0 <= sum(waits.values()) < 30, waits
