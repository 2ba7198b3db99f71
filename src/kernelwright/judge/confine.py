"""Linux confinement primitives for the judge's sandbox (judge.sandbox): resource limits, an
unprivileged uid, Landlock and a seccomp filter, each through the kernel's own interface (ctypes and
the standard library only, so that children stay on torch, numpy and the standard library).

Every function here acts on the calling process and what it starts afterwards, and none can be
undone by it: call them in the child, after fork and before generated code runs. Each raises
OSError when the kernel refuses, so the caller can fall back and say what is in force.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import struct
import sys
from collections.abc import Callable, Iterable, Iterator

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.prctl.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]

PR_SET_KEEPCAPS = 8
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_SET_CHILD_SUBREAPER = 36
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_RAISE = 2
SECCOMP_MODE_FILTER = 2
CAP_DAC_READ_SEARCH = 2
_CAP_VERSION_3 = 0x20080522
LAST_CAP = 63  # PR_CAPBSET_DROP answers EINVAL beyond the kernel's own last capability

# The syscalls a candidate never needs and an attacker wants, by machine (each one's number there).
# socket: any new socket (the network, loopback and unix sockets included); socketpair stays allowed.
# System V IPC and POSIX message queues: objects that outlive the process that made them (a
# segment's memory is no process's, so judge.quota's watch would not see it).
_ARCH = {
    "x86_64": {"audit": 0xC000003E, "x32": True, "nr": {
        "socket": 41, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "bpf": 321, "keyctl": 250, "add_key": 248, "request_key": 249,
        "open_by_handle_at": 304, "name_to_handle_at": 303, "mount": 165, "umount2": 166, "unshare": 272, "setns": 308,
        "pidfd_getfd": 438, "userfaultfd": 323, "kexec_load": 246, "init_module": 175, "finit_module": 313,
        "perf_event_open": 298, "chroot": 161, "pivot_root": 155, "move_mount": 429, "fsopen": 430, "open_tree": 428,
        "shmget": 29, "shmat": 30, "semget": 64, "msgget": 68, "mq_open": 240, "memfd_secret": 447},
        "clone": 56, "clone3": 435},
    "aarch64": {"audit": 0xC00000B7, "x32": False, "nr": {
        "socket": 198, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "bpf": 280, "keyctl": 219, "add_key": 217, "request_key": 218,
        "open_by_handle_at": 265, "name_to_handle_at": 264, "mount": 40, "umount2": 39, "unshare": 97, "setns": 268,
        "pidfd_getfd": 438, "userfaultfd": 282, "kexec_load": 104, "init_module": 105, "finit_module": 273,
        "perf_event_open": 241, "chroot": 51, "pivot_root": 41, "move_mount": 429, "fsopen": 430, "open_tree": 428,
        "shmget": 194, "shmat": 196, "semget": 190, "msgget": 186, "mq_open": 180, "memfd_secret": 447},
        "clone": 220, "clone3": 435},
}
DENIED = tuple(_ARCH["x86_64"]["nr"])  # the names; socket is refused with EACCES, the rest with EPERM
PROFILER_NEEDS = ("perf_event_open",)  # left allowed for an ncu run (the profiler reads counters through it)
_SYS_LANDLOCK = (444, 445, 446)  # create_ruleset, add_rule, restrict_self: one number on every machine
_SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

# Landlock access rights (linux/landlock.h), by the ABI version that introduced them.
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE, FS_IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1 << 0, 1 << 1
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV  # what a rule on a file may grant


def machine() -> str:
    return platform.machine()


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


# ---- limits and identity ------------------------------------------------------------------------


def set_limits(limits: dict[str, int]) -> None:
    """setrlimit for each RLIMIT_<NAME> given (soft and hard alike, so the child cannot raise them)."""
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (value, value))


def no_new_privs() -> None:
    """From now on no exec gains privileges (set-uid programs, file capabilities); Landlock and an
    unprivileged seccomp filter require it."""
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def child_subreaper() -> bool:
    """Become the subreaper of this process's descendants: a process whose parent dies is handed
    to this one (not to init), so what a child left running, a daemon in a session of its own
    included, can be found as this process's child and killed. Whether it took."""
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _state(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return b"X"


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def children_of(pid: int, zombies: bool = False) -> list[int]:
    """The children of `pid`: /proc/PID/task/*/children (each thread's own; an orphan is handed
    to one of the subreaper's threads), else a scan of /proc where the kernel lacks that file.
    Zombies only with `zombies`: a process whose main thread has exited reads as one while its
    other threads run, so a sweep must count them."""
    if os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        found = []
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            tids = []
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    found += [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
        return found if zombies else [c for c in found if _state(c) not in (b"Z", b"X")]
    return [p for p, fields in _stats() if int(fields[1]) == pid and (zombies or fields[0] not in (b"Z", b"X"))]


def kill_adopted(keep: Callable[[int], bool]) -> bool:
    """One round of a subreaper's sweep: SIGKILL and reap every child of this process that `keep`
    does not name, zombies too; whether there was one. A child of this process cannot be reaped by
    anyone else, so its pid is still its own when it is signalled."""

    left = [pid for pid in children_of(os.getpid(), zombies=True) if not keep(pid)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in left:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
    return bool(left)


def _stats() -> Iterator[tuple[int, list[bytes]]]:
    """Every process's pid and the fields of /proc/PID/stat after its name (state, ppid, pgrp, ...)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2:
            yield int(name), fields


def _capset(caps: int) -> None:
    """Effective, permitted and inheritable capability sets all set to `caps` (a bit mask)."""
    header = struct.pack("Ii", _CAP_VERSION_3, 0)
    lo, hi = caps & 0xFFFFFFFF, caps >> 32
    data = struct.pack("6I", lo, lo, lo, hi, hi, hi)
    nr = _SYS_CAPSET.get(machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"capset: no syscall number known for {machine()}")
    _check(_libc.syscall(nr, ctypes.c_char_p(header), ctypes.c_char_p(data)), "capset")


CACHE_VARS = ("TRITON_CACHE_DIR", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR", "TORCHINDUCTOR_CACHE_DIR")  # shared: not writable here


def home_env(env: dict[str, str], home: str, tmp: str, keep_under: tuple[str, ...] = ()) -> dict[str, str]:
    """A confined process's home, temporary folders and caches in its own folder (TRITON_HOME too: Triton read
    its home at import, in the fork server). A cache variable naming a folder inside one of `keep_under`, the
    folders it may write (a Triton candidate's own cache, judge.extension.triton_env), stays."""
    kept = [os.path.join(os.path.realpath(k), "") for k in keep_under if k]
    for var in CACHE_VARS:
        value = env.get(var)
        if not (value and any(os.path.join(os.path.realpath(value), "").startswith(k) for k in kept)):
            env.pop(var, None)
    env.update({"TMPDIR": tmp, "TMP": tmp, "TEMP": tmp, "HOME": home, "TRITON_HOME": home})
    return env


def account_env(uid: int) -> dict[str, str]:
    """A user name for a uid no account has (getpass.getuser(), which torch before 2.13 calls at an import)."""
    name = f"sandbox{uid}"
    return {"USER": name, "LOGNAME": name}


def become(uid: int, *, keep_read_search: bool) -> None:
    """Switch a root process to an unprivileged uid and gid of its own, no supplementary groups, and
    every capability dropped from the bounding set; with `keep_read_search`, CAP_DAC_READ_SEARCH
    alone survives (also across exec), for an interpreter installed under a private home. Then
    permission bits and RLIMIT_NPROC bind, and the judge's processes cannot be signalled or traced."""
    keep = 1 << CAP_DAC_READ_SEARCH if keep_read_search else 0
    for cap in range(LAST_CAP + 1):
        if not keep >> cap & 1 and _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() != errno.EINVAL:
            _check(-1, f"prctl(PR_CAPBSET_DROP, {cap})")
    _check(_libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    _capset(keep)
    if keep:
        _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0), "prctl(PR_CAP_AMBIENT_RAISE)")


# ---- Landlock -----------------------------------------------------------------------------------


def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 when it has none or it is switched off."""
    ret = _libc.syscall(_SYS_LANDLOCK[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # LANDLOCK_CREATE_RULESET_VERSION
    return max(0, int(ret))


def fs_rights(abi: int) -> int:
    """Every filesystem right this ABI knows: all of them handled, so none is allowed by default."""
    rights = (1 << 13) - 1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    if abi >= 5:
        rights |= FS_IOCTL_DEV
    return rights


def landlock(rules: Iterable[tuple[str, int]], *, abi: int, deny_tcp: bool = True, scope: bool = True) -> None:
    """Restrict this process (and its future children) to `rules`, (path, rights) pairs, for the
    filesystem; with `deny_tcp`, no TCP bind or connect (ABI 4 on); with `scope`, no signals to and
    no abstract unix sockets of processes outside the sandbox (ABI 6 on). A path that does not exist
    is skipped. Needs no_new_privs (or CAP_SYS_ADMIN) first."""
    handled = fs_rights(abi)
    net = NET_BIND_TCP | NET_CONNECT_TCP if deny_tcp and abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if scope and abi >= 6 else 0
    attr = struct.pack("QQQ", handled, net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = _check(_libc.syscall(_SYS_LANDLOCK[0], ctypes.c_char_p(attr[:size]), ctypes.c_size_t(size), ctypes.c_uint32(0)),
                "landlock_create_ruleset")
    try:
        for path, rights in rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(f"/proc/self/fd/{pfd}"):
                    rights &= FILE_RIGHTS
                beneath = struct.pack("=Qi", rights & handled, pfd)
                _check(_libc.syscall(_SYS_LANDLOCK[1], fd, 1, ctypes.c_char_p(beneath), 0), f"landlock_add_rule({path})")
            finally:
                os.close(pfd)
        _check(_libc.syscall(_SYS_LANDLOCK[2], fd, 0), "landlock_restrict_self")
    finally:
        os.close(fd)


# ---- seccomp ------------------------------------------------------------------------------------

_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
CLONE_NEW = 0x7E020080  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME: no namespaces of its own
_RET_ALLOW, _RET_KILL, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_AF_UNIX = 1


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program(arch: str, allow: tuple[str, ...] = (), families: tuple[int, ...] = ()) -> bytes:
    """A classic BPF filter: another ABI (32-bit calls on x86_64 among them) kills the process;
    socket() fails with EACCES but for the address families in `families`; clone() with a namespace flag fails with EPERM and clone3() with
    ENOSYS (the C library falls back to clone for threads); each other DENIED call not in `allow`
    fails with EPERM; the rest run."""
    spec = _ARCH.get(arch)
    if spec is None:
        raise OSError(errno.ENOSYS, f"seccomp: no syscall table known for {arch}")
    denied = [spec["nr"][n] for n in DENIED if n not in allow and n != "socket"]
    prog = [_insn(_LD_W_ABS, 0, 0, 4), _insn(_JEQ_K, 1, 0, spec["audit"]), _insn(_RET_K, 0, 0, _RET_KILL), _insn(_LD_W_ABS, 0, 0, 0)]
    if spec["x32"]:
        prog += [_insn(_JGE_K, 0, 1, 0x40000000), _insn(_RET_K, 0, 0, _RET_KILL)]
    if "socket" not in allow:  # a socket of the families given (the CUDA driver opens one) and no other
        fams = list(families)[:8]
        prog += [_insn(_JEQ_K, 0, len(fams) + 3, spec["nr"]["socket"]), _insn(_LD_W_ABS, 0, 0, 16)]
        prog += [_insn(_JEQ_K, len(fams) - i, 0, fam) for i, fam in enumerate(fams)]
        prog += [_insn(_RET_K, 0, 0, _RET_ERRNO | errno.EACCES), _insn(_RET_K, 0, 0, _RET_ALLOW)]
    if "clone3" not in allow:
        prog += [_insn(_JEQ_K, 0, 1, spec["clone3"]), _insn(_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    if "clone" not in allow:  # its flags (the first argument's low word) against CLONE_NEW, answered there and then
        prog += [_insn(_JEQ_K, 0, 4, spec["clone"]), _insn(_LD_W_ABS, 0, 0, 16), _insn(_JSET_K, 0, 1, CLONE_NEW),
                 _insn(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM), _insn(_RET_K, 0, 0, _RET_ALLOW)]
    for nr in denied:
        prog += [_insn(_JEQ_K, 0, 1, nr), _insn(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM)]
    prog.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    return b"".join(prog)


def seccomp(allow: tuple[str, ...] = (), families: tuple[int, ...] = ()) -> None:
    """Install seccomp_program for this machine on this process and its future children."""
    prog = seccomp_program(machine(), allow, families)
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = struct.pack("HxxxxxxQ", len(prog) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.cast(ctypes.c_char_p(fprog), ctypes.c_void_p).value or 0, 0, 0),
           "prctl(PR_SET_SECCOMP)")


# ---- processes of a group ---------------------------------------------------------------------


def live_in_group(pgid: int) -> int:
    """How many processes of process group `pgid` still run (zombies, already dead, not counted)."""
    # a "zombie" with threads left is a process whose main thread exited: it runs
    return sum(1 for p, fields in _stats() if int(fields[2]) == pgid and (fields[0] not in (b"Z", b"X") or _threads(p) > 1))


def chown_tree(root: str, uid: int) -> None:
    """Give a folder and everything in it to `uid`, never through a link: each entry is changed
    relative to a descriptor of the folder that holds it (os.fwalk), so a folder swapped for a link
    while the walk runs changes nothing outside."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchown(fd, uid, uid)
    finally:
        os.close(fd)
    for _, dirs, files, dir_fd in os.fwalk(root, follow_symlinks=False):
        for name in dirs + files:
            try:
                os.chown(name, uid, uid, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue


# ---- as a program: `python -I -S confine.py probe | exec PLAN -- CMD...` ------------------------


def _forked(fn) -> str:  # type: ignore[no-untyped-def]
    """Run fn() in a forked child; '' when it returned, else its error in words."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fn()
            msg = b""
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            msg = f"{type(exc).__name__}: {exc}".encode()[:300]
        os.write(w, msg or b"ok")
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return "" if got == "ok" else got or "the child died"


def _try_seccomp() -> None:
    import socket

    no_new_privs()
    seccomp()
    try:
        socket.socket()
    except OSError:
        return
    raise OSError(errno.EPERM, "socket() still worked under the filter")


def probe() -> dict[str, object]:
    """Which layers hold on this machine, each tried in a child of its own."""
    why: list[str] = []
    uid_err = _forked(lambda: become(0x6B000000 + os.getpid(), keep_read_search=False)) if os.geteuid() == 0 else "the judge is not root"
    abi = landlock_abi()
    ll_err = _forked(lambda: (no_new_privs(), landlock([("/", READ)], abi=abi))) if abi else "the kernel has no Landlock"
    sc_err = _forked(_try_seccomp)
    for name, err in (("uid", uid_err), ("landlock", ll_err), ("seccomp", sc_err)):
        if err:
            why.append(f"{name}: {err}")
    return {"uid": not uid_err, "landlock": 0 if ll_err else abi, "seccomp": not sc_err, "why": why}


def exec_confined(plan: dict, cmd: list[str]) -> None:  # type: ignore[type-arg]
    """Confine this process by `plan` (judge.sandbox._exec_plan), then become `cmd`. Without the uid
    layer (a judge that is not root) nothing marks what `cmd` starts as its own, so this process
    forks first and stays, unconfined, as the subreaper of the confined child that becomes `cmd`
    (_wait_and_sweep): a process `cmd` moved to a session of its own is killed when `cmd` exits, and
    `cmd`, in a Landlock domain this process is outside of, cannot signal it (ABI 6 on)."""

    if "uid" not in plan["layers"] and list(plan["layers"]) != ["env"] and child_subreaper():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # until the handler is in place (parent) or reset (child)
        pid = os.fork()
        if pid == 0:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            _confine_and_exec(plan, cmd)
        _wait_and_sweep(pid)
    _confine_and_exec(plan, cmd)


def _confine_and_exec(plan: dict, cmd: list[str]) -> None:  # type: ignore[type-arg]
    layers, workdir = plan["layers"], plan["workdir"]
    tmp = os.path.join(workdir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    env = home_env(dict(os.environ), workdir, tmp)
    if "limits" in layers:
        set_limits(plan["limits"])
    if "uid" in layers:
        uid = plan["uid_base"] + os.getpid()
        for path in [*plan["chown"], tmp]:
            chown_tree(path, uid)
        set_limits({"NPROC": plan["nproc"]})
        become(uid, keep_read_search="landlock" in layers)
        env.update(account_env(uid))
    if list(layers) != ["env"]:  # always, as judge.sandbox.enter: the judge's sockets tell a sandboxed peer by it
        no_new_privs()
    if "landlock" in layers:
        landlock([(p, r) for p, r in plan["rules"]], abi=plan["abi"])
    if "seccomp" in layers:
        seccomp(PROFILER_NEEDS if plan.get("profiler") else (), tuple(plan.get("families", ())))
    os.chdir(workdir)
    os.execvpe(cmd[0], cmd, env)


SWEEP_S = 5.0  # the longest the launcher goes on killing what its command left


def _wait_and_sweep(pid: int) -> None:
    """Reap children (orphans handed here as they end) until `pid` ends, then SIGKILL and reap every
    process handed to this one, round after round while new ones come; exit with `pid`'s status
    (126 when it could not start, 128 + the signal that ended it). SIGTERM (the judge's timeout)
    kills `pid` first."""
    import time

    done: list[int] = []

    def term(*_: object) -> None:
        if not done:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, term)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    status = 0
    while not done:
        try:
            got, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if got == pid:
            status = st
            done.append(got)
    deadline = time.monotonic() + SWEEP_S
    while kill_adopted(lambda _pid: False) and time.monotonic() < deadline:
        time.sleep(0.002)
    sys.stderr.flush()
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def _main(argv: list[str]) -> int:
    import json

    if argv[1:2] == ["probe"]:
        print(json.dumps(probe()))
        return 0
    if argv[1:2] == ["exec"] and argv[3:4] == ["--"] and len(argv) > 4:
        try:
            exec_confined(json.loads(argv[2]), argv[4:])
        except OSError as exc:
            print(f"kernelwright sandbox: could not start {argv[4]} confined: {exc}", file=sys.stderr)
            return 126
    print("usage: confine.py probe | exec PLAN -- CMD...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
