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
import signal
import subprocess
import sys
import time

log = logging.getLogger(__name__)
STOP_SETTLE_S = 0.2  # how long a stopped uid's processes get to show as stopped

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


def kill_uid(uid: int, rounds: int = 3) -> None:
    """SIGKILL every process of `uid`, a few rounds."""
    signal_uid(uid, signal.SIGKILL, rounds)


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


def _uid_states(uid: int) -> list[tuple[bool, int]]:
    """(whether it is stopped, its process group) for each process of `uid` (from /proc): stopped
    when every thread of it is, so a leader that exited (a zombie) with threads still running runs."""
    found = []
    for pid in pids_of_uid(uid):
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                group = int(f.read().rsplit(b")", 1)[1].split()[2])
            stopped = True
            for task in os.listdir(f"/proc/{pid}/task"):
                try:
                    with open(f"/proc/{pid}/task/{task}/stat", "rb") as f:
                        stopped = stopped and _stopped(f.read().rsplit(b")", 1)[1].split()[0])
                except (OSError, IndexError):
                    continue  # a thread that ended meanwhile
            found.append((stopped, group))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _stopped(state: bytes) -> bool:
    return state in (b"T", b"t", b"Z", b"X")  # stopped, or dead and not yet reaped


def all_stopped(uid: int) -> bool:
    """Whether no thread of any process of `uid` runs (each stopped, or dead and not yet reaped)."""
    return all(stopped for stopped, _ in _uid_states(uid))


def stop_child(pid: int) -> tuple[bool, bool] | None:
    """Every process of the confined child `pid`'s own uid stopped, where the judge is root (the uid
    layer), once the caller has stopped the child's process group: (whether every one of them
    stopped, whether a helper stopped them). None: no such uid here. Where every process of the uid
    is in the child's group, the group's stop already holds them all and none can start another, so
    no helper starts (the usual case); one outside it (a new group or session) gets the helper's
    SIGSTOP to the whole uid (signal_uid)."""
    if os.getuid() != 0 or pid <= 0:
        return None
    uid, helper = UID_BASE + pid, False
    deadline = time.monotonic() + STOP_SETTLE_S  # a stop is acted on when its process next runs: on a busy host, a little later
    while True:
        states = _uid_states(uid)
        if not helper and any(group != pid for _, group in states):
            signal_uid(uid, signal.SIGSTOP, rounds=3)
            helper = True
            continue
        if all(stopped for stopped, _ in states):
            return True, helper
        if time.monotonic() > deadline:
            return False, helper
        time.sleep(0.002)


def continue_child(pid: int) -> None:
    """SIGCONT every process of the confined child `pid`'s uid (what stop_child's helper stopped;
    the group's own stop is the caller's to end)."""
    if os.getuid() == 0 and pid > 0:
        signal_uid(UID_BASE + pid, signal.SIGCONT)
