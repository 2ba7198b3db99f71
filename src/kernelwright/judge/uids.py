"""Signals to every process of one of the sandbox's uids (a root judge's uid layer, judge.sandbox).

A helper process sends them: its effective uid is the target's, so kill(-1) reaches every process of
that uid at once, those that left their group and session included (a fork bomb cannot fork past
it), and none of anyone else's; never a pid read from /proc, which may belong to another process by
the time it is signalled. Its real and saved uid are the target's signaller uid (signaller()), so the
target's processes, which may signal only processes whose real or saved uid is theirs, cannot kill it
first (a daemon of the candidate's that killed every new process of its uid stopped a helper running
as that uid in 11 of 20 tries). Each target has a signaller uid of its own: with one for all, a
helper's kill(-1) also stopped or killed the helpers of other targets running at the time.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any

log = logging.getLogger(__name__)
STOP_SETTLE_S = 0.2  # how long a stopped uid's processes get to show as stopped
RAN_NS = 1_000_000  # CPU time a stopped uid's processes may gather in all before they count as having run (ran_since)

UID_BASE = 0x6B000000  # a confined child's uid is this plus its pid (judge.sandbox): no account's
SIGNALLER_BASE = UID_BASE - 0x1000000  # signaller uids: this plus the child's pid, below every child's uid, no account's


def signaller(uid: int) -> int:
    """The real and saved uid of the helpers that signal `uid` (a child's, UID_BASE + its pid)."""
    if not 0 <= uid - UID_BASE < 0x1000000:
        raise ValueError(f"uid {uid} is not a confined child's")
    return SIGNALLER_BASE + (uid - UID_BASE)


_HELPER = ("import os, sys\n"
           "u, s, sig, rounds = (int(x) for x in sys.argv[1:5])\n"
           "os.setgroups([]); os.setresgid(s, s, s); os.setresuid(s, u, s)\n"
           "for _ in range(rounds):\n"
           "    try:\n"
           "        os.kill(-1, sig)\n"
           "    except ProcessLookupError:\n"
           "        break\n")


def signal_uid(uid: int, sig: int, rounds: int = 1) -> None:
    """Send `sig` to every process of `uid` (never root's), `rounds` times (for what was being forked
    as the first round ran). The helper gets an empty environment and no limit below the judge's."""
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _HELPER, str(uid), str(signaller(uid)), str(int(sig)), str(rounds)],
                              env={}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("could not signal the processes of uid %d (%s): %s", uid, signal.Signals(sig).name, exc)
        return
    if done.returncode != 0:
        log.warning("could not signal the processes of uid %d (%s): the helper exited %d: %s", uid, signal.Signals(sig).name,
                    done.returncode, done.stderr.decode(errors="replace")[-300:])


# idle, its effective and saved uid are root's, so the target's processes cannot change its
# scheduling (they may where an effective uid is theirs: SCHED_IDLE and one CPU slowed it to seconds);
# each command resets its scheduling, then sends as the target for the kill(-1) alone
_LOOP = ("import os, sys\n"
         "u, s = int(sys.argv[1]), int(sys.argv[2])\n"
         "os.setgroups([]); os.setresgid(s, s, s); os.setresuid(s, 0, 0)\n"
         "cpus = os.sched_getaffinity(0)\n"
         "for line in sys.stdin:\n"
         "    sig, rounds = (int(x) for x in line.split())\n"
         "    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)); os.setpriority(os.PRIO_PROCESS, 0, 0)\n"
         "    os.sched_setaffinity(0, cpus)\n"
         "    os.seteuid(u)\n"
         "    for _ in range(rounds):\n"
         "        try:\n"
         "            os.kill(-1, sig)\n"
         "        except ProcessLookupError:\n"
         "            break\n"
         "    os.seteuid(0)\n"
         "    sys.stdout.write('ok\\n')\n"
         "    sys.stdout.flush()\n")
SIGNALLER_REPLY_S = 10.0  # how long a kept helper may take to answer before the one-off helper stands in


class Signaller:
    """A helper kept for one target uid while its child lives, so that a signal to the whole uid
    costs a line on a pipe, not a Python start (16 ms on the H100 host): started beside the child,
    off the verdict's path. Its uids are those of signal_uid's helper (real and saved the target's
    signaller uid), so the target's processes cannot signal or trace it. Where it cannot start or
    stops answering, signal_uid's one-off helper stands in. Every signal to the uid goes through it
    while it lives (the quota watch's kill too, from its thread): two helpers share the signaller
    uid, and each one's kill(-1) would reach the other."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _LOOP, str(uid), str(signaller(uid))], env={},
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        except OSError as exc:
            log.warning("no kept signaller for uid %d (%s): each signal starts a helper", uid, exc)

    def signal(self, sig: int, rounds: int = 1) -> None:
        """Send `sig` to every process of the uid, `rounds` times; returns once sent."""
        with self._lock:
            proc = self._proc
            if proc is not None and proc.stdin is not None and proc.stdout is not None:
                try:
                    proc.stdin.write(f"{int(sig)} {int(rounds)}\n".encode())
                    proc.stdin.flush()
                    poller = select.poll()
                    poller.register(proc.stdout, select.POLLIN)
                    if poller.poll(SIGNALLER_REPLY_S * 1000) and proc.stdout.readline() == b"ok\n":
                        return
                except (OSError, ValueError):
                    pass
                log.warning("the kept signaller of uid %d did not answer: a helper stands in", self.uid)
                self._end()
            signal_uid(self.uid, sig, rounds)

    def close(self) -> None:
        """The helper told to end (end of its input) and reaped; a second call does nothing."""
        with self._lock:
            self._end()

    def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _send(uid: int, sig: int, rounds: int, by: Signaller | None) -> None:
    """signal_uid, through `by` (the uid's kept signaller) where there is one."""
    if by is not None:
        by.signal(sig, rounds)
    else:
        signal_uid(uid, sig, rounds)


def kill_uid(uid: int, rounds: int = 3, by: Signaller | None = None) -> None:
    """SIGKILL every process of `uid`, a few rounds (through `by`, its kept signaller, if any)."""
    _send(uid, signal.SIGKILL, rounds, by)


def pids_of_uid(uid: int) -> list[int]:
    """Processes whose real uid is `uid` (from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as f:
                line = next(x for x in f if x.startswith(b"Uid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) == uid:
            found.append(int(name))
    return found


def _still(pid: int) -> bool:
    """Whether no thread of process `pid` runs: each stopped, dead and not yet reaped, or asleep in
    the kernel uninterruptibly (D: no CPU, and it stops before it runs its own code again). Each
    thread's own state: /proc/PID/stat is the leader's, and a leader that exited shows as a zombie
    while the other threads run on."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True  # gone
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # a thread that ended meanwhile
        if state not in (b"T", b"t", b"Z", b"X", b"D"):
            return False
    return True


def all_stopped(uid: int) -> bool:
    """Whether no thread of any process of `uid` runs (_still)."""
    return all(_still(pid) for pid in pids_of_uid(uid))


def stop_child(pid: int, by: Signaller | None = None) -> bool | None:
    """SIGSTOP every process of the confined child `pid`'s own uid, where the judge is root (the uid
    layer): whether every one of them stopped (None: no such uid here). Always by the helper, whose
    kill(-1) is atomic against fork: a process can join the child's group after the caller's stop
    of the group, and one that forks before it stops can hide its newest child from any scan of
    /proc, so a scan alone never proves the uid still."""
    if os.getuid() != 0 or pid <= 0:
        return None
    _send(UID_BASE + pid, signal.SIGSTOP, 3, by)
    deadline = time.monotonic() + STOP_SETTLE_S  # a stop is acted on when its process next runs: on a busy host, a little later
    while not all_stopped(UID_BASE + pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def cpu_times(uid: int) -> dict[str, Any]:
    """What the processes of `uid` have run so far: per process (its start time, so a reused pid is
    another), its CPU time in clock ticks (utime + stime of /proc/PID/stat, its exited threads'
    included); per thread, its run time in nanoseconds (schedstat, where the kernel keeps it) and
    whether it was dead already."""
    procs: dict[int, tuple[int, int]] = {}
    threads: dict[tuple[int, int], int] = {}
    dead: set[tuple[int, int]] = set()
    for pid in pids_of_uid(uid):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            procs[pid] = (int(fields[19]), int(fields[11]) + int(fields[12]))
            tasks = os.listdir(f"/proc/{pid}/task")
        except (OSError, IndexError, ValueError):
            continue
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                    if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                        dead.add((pid, int(task)))
                with open(f"/proc/{pid}/task/{task}/schedstat", "rb") as f:
                    threads[(pid, int(task))] = int(f.read().split()[0])
            except (OSError, IndexError, ValueError):
                continue
    return {"procs": procs, "threads": threads, "dead": dead}


def ran_since(uid: int, before: dict[str, Any]) -> bool:
    """Whether a process of `uid` ran since cpu_times(uid) gave `before`. A stopped process can be
    continued by a signal it arranged itself (a timer's SIGCONT), which no stop prevents; this
    finds that it ran: a process or thread that came, one that went (a live thread exits only by
    running), more than RAN_NS of its threads' run time, or more than a tick of any process's CPU
    time (which keeps what its exited threads ran); with no schedstat, any tick."""
    after = cpu_times(uid)
    if set(after["procs"]) != set(before["procs"]) or any(after["procs"][p][0] != before["procs"][p][0] for p in after["procs"]):
        return True
    was, now = before["threads"], after["threads"]
    if set(now) - set(was) or set(was) - set(now) - before["dead"]:
        return True
    slack = 1 if was else 0  # with schedstat, a tick's edge crossed by a moment's run is no run
    if any(after["procs"][p][1] - before["procs"][p][1] > slack for p in after["procs"]):
        return True
    return sum(now[t] - was[t] for t in now) > RAN_NS  # a thread asleep in the kernel at the stop runs a moment before it stops


def continue_child(pid: int, by: Signaller | None = None) -> None:
    """SIGCONT what stop_child stopped."""
    if os.getuid() == 0 and pid > 0:
        _send(UID_BASE + pid, signal.SIGCONT, 1, by)
