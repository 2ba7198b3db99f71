"""The sandbox seen from outside (judge.sandbox applies it): what the kernel says of a process's
confinement (observed), whether a candidate child is confined as its spec says (unconfined), and
whether the process at the other end of one of the judge's unix sockets is more confined than the
judge (confined_peer), which the shared fork server and the service ask of every connection; and
what a verdict records of it (record, not_started) and says of it in words (plainly)."""

from __future__ import annotations

import errno
import os
import select
import socket
import struct
from collections.abc import Mapping
from typing import Any

from kernelwright.judge import sandbox
from kernelwright.judge.sandbox import UID_BASE, Spec


def observed(pid: int, tid: int | None = None) -> dict[str, int]:
    """What the kernel says of a process's (or one of its threads') confinement
    (/proc/PID/task/TID/status): its real uid, whether no_new_privs is set, its seccomp mode (2: a
    filter) and how many filters. Nothing the process itself can forge."""
    got: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/task/{tid or pid}/status") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in ("Uid", "NoNewPrivs", "Seccomp", "Seccomp_filters"):
                    got[name] = int(value.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return got


def unconfined(spec_text: str, pid: int) -> str:
    """'' when the child `pid` is confined as the spec (SPEC_ENV's text) says, as far as the kernel
    tells; else what is missing. The judge checks this after the candidate's setup."""
    if not spec_text:
        return ""
    layers = Spec.from_env(spec_text).layers
    try:
        tasks = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return "its /proc entry is unreadable"
    wrong = []
    for tid in tasks:  # every thread: the layers bind the thread that applied them
        got = observed(pid, int(tid))
        if not got:
            continue  # a thread that ended meanwhile
        if "uid" in layers and got.get("Uid") != UID_BASE + pid:
            wrong.append(f"thread {tid}: uid {got.get('Uid')}, not {UID_BASE + pid}")
        if set(layers) & {"uid", "landlock", "seccomp"} and got.get("NoNewPrivs") != 1:
            wrong.append(f"thread {tid}: no_new_privs unset")
        if "seccomp" in layers and got.get("Seccomp") != 2:
            wrong.append(f"thread {tid}: seccomp mode {got.get('Seccomp')}")
    return "; ".join(wrong[:4])


SO_PEERPIDFD = 77  # Linux 6.5 on: a pidfd of the process at the other end of a unix socket


def confined_peer(sock: Any) -> str:
    """'' when the process at the other end of unix socket `sock` is no more confined than this
    one; else why the judge's socket refuses it. A sandboxed process and everything it starts carry
    the sandbox's uid (a root judge), no_new_privs and one seccomp filter more than the judge, none of
    which it can shed; where the judge is not root its candidates have its uid, and the socket's
    0600 would let them reach the fork server or the service and ask for an unconfined child. The
    peer's /proc status is read while a pidfd (SO_PEERPIDFD) pins it, so a peer that exits and whose
    pid is reused cannot pass for another process; older kernels read it by pid alone."""
    try:
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    except OSError as exc:
        return f"its credentials are unreadable ({exc})"
    if pid <= 0:  # a candidate is this judge's descendant, in its pid namespace or one below: always seen
        return "a process in a pid namespace this one does not see (refused: it cannot be told from a sandboxed one)"
    pidfd = None
    try:
        pidfd = sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except OSError as exc:
        if exc.errno != errno.ENOPROTOOPT:  # a kernel that has it and cannot pin the peer: it is gone
            return f"pid {pid}: it cannot be pinned ({exc.strerror})"
    try:
        theirs, mine = observed(pid), observed(os.getpid())
        if not theirs:
            return f"pid {pid}: its /proc status is unreadable"
        lacking = [k for k in mine if k not in theirs]
        if lacking:
            return f"pid {pid}: its /proc status lacks {', '.join(lacking)}"
        why = []
        if theirs.get("Uid", uid) >= UID_BASE or uid >= UID_BASE:
            why.append(f"uid {uid} is a sandbox's")
        if theirs.get("NoNewPrivs", 0) > mine.get("NoNewPrivs", 0):
            why.append("no_new_privs set")
        if "Seccomp_filters" in mine:
            if theirs["Seccomp_filters"] > mine["Seccomp_filters"]:
                why.append(f"{theirs['Seccomp_filters']} seccomp filters against this process's {mine['Seccomp_filters']}")
        elif theirs.get("Seccomp", 0) > mine.get("Seccomp", 0):
            why.append(f"seccomp mode {theirs.get('Seccomp')}")
        if pidfd is not None:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            if poller.poll(0):
                why.append("it exited before it was seen")
        return f"pid {pid}: " + ", ".join(why) if why else ""
    finally:
        if pidfd is not None:
            os.close(pidfd)


_refused = [0]  # connections refused by confined_peer in this process


def refused_peer_line(why: str) -> str:
    """The log line for a refused connection, or '' when it is not logged: the first five, then
    one in a thousand (a candidate may connect in a loop for its whole run)."""
    _refused[0] += 1
    n = _refused[0]
    if n <= 5 or n % 1000 == 0:
        return f"refused a connection from a sandboxed process ({why}); {n} refused so far"
    return ""


def record(spec: Spec | None) -> dict[str, Any]:
    """The verdict's `sandbox` field."""
    if spec is None:
        return {"mode": "off", "layers": ["env"], "full": False, "missing": ["every layer but env: judged without the sandbox"]}
    sup = sandbox.support() if spec.mode != "off" else None
    missing = list(sup.missing()) if sup is not None else ["every layer but env: judged without the sandbox"]
    return {"mode": spec.mode, "layers": list(spec.layers), "full": not missing, "missing": missing}


def not_started(mode: str) -> dict[str, Any]:
    """The verdict's `sandbox` field when it ended before any candidate process started (a syntax
    error, a failed build of raw sources, a refusal): no candidate child ran. A build's compiler
    ran confined, and the candidate's compiler flags can make it run a program of theirs there."""
    return {"mode": mode, "layers": [], "full": None, "missing": [], "candidate_started": False}


def plainly(record: Mapping[str, Any] | None) -> str:
    """One sentence for reports when a verdict was judged without the full sandbox ('' when it was
    judged with it, or when no candidate process started). A verdict from before the sandbox has no
    record at all."""
    if record is not None and record.get("candidate_started") is False:
        return ""
    if record is None:
        return "judged WITHOUT the sandbox (a verdict from before it existed): the candidate's code could read keys, use the network and write outside its folder"
    if record.get("full"):
        return ""
    missing = ", ".join(record.get("missing") or []) or "unknown"
    return (f"judged WITHOUT the full sandbox (--sandbox {record.get('mode')}; layers {', '.join(record.get('layers') or [])}; "
            f"missing: {missing}): the candidate's code was less confined than the judge can confine it")
