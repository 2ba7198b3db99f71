"""The sandbox that every process running or compiling generated code starts in.

Layers, each applied where the machine allows it (judge.confine makes the kernel calls), in this
order, and the verdict records which were in force (`Verdict.sandbox`):

1. `env`: the environment comes from an allow-list (`clean_env`): nothing named like a key, token,
   secret or password, no store path, no service token or fork-server socket. The fork server starts
   with it too, so no forked child inherits a key in its memory.
2. `limits`: open files, file size, core dumps, CPU time and private memory (setrlimit), soft and
   hard alike.
3. `uid` (a root judge): the child becomes uid UID_BASE + its pid, a gid of the same number and no
   groups, every capability dropped but CAP_DAC_READ_SEARCH (kept only under Landlock, which then
   decides what it reads). Permission bits and RLIMIT_NPROC bind it, it cannot signal or trace the
   judge, the reference child or another candidate (each has its own uid), and after its verdict
   every process of its uid is killed (`reap`), a daemon in a new session included.
4. `landlock`: reads only of the system's, Python's and the judge's own files, the build cache,
   the problem file and the candidate's folder; writes only in its working folder and a private
   temporary folder inside it; no TCP (ABI 4 on); no signals to processes outside (ABI 6 on).
5. `seccomp`: socket() fails but for unix sockets, which the CUDA driver needs (no network,
   loopback included), and so do ptrace, process_vm_*, io_uring, bpf, keyctl, open_by_handle_at,
   mount, unshare and setns. The judge's own unix sockets (the shared fork server's, the service's)
   refuse a peer more confined than they are (judge.sandbox_check): where the judge is not root, its
   candidates have its uid, and permission bits alone would let them in.

The full sandbox is all five: a judge that is not root gets the others (Landlock with ABI 6 keeps
signals in, RLIMIT_NPROC counts the user's processes) and a verdict that says what is missing. `--sandbox` (Policy.sandbox):
`auto` applies what the machine allows and says what is missing, `strict` refuses to judge without
the full sandbox, `off` applies only the environment's allow-list (and says so in every verdict).

Under the uid layer every folder above a confined process's working folder must let its uid through
(judge.host_folders): where one does not, nothing confined starts there, and the verdict is the judge's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwright.judge import confine, host_folders, quota, uids
from kernelwright.judge.quota_usage import memory_total
from kernelwright.runtime.build import CONFINED_ENV

log = logging.getLogger(__name__)

MODES = ("auto", "strict", "off")
LAYERS = ("env", "limits", "uid", "landlock", "seccomp")
SPEC_ENV = "KERNELWRIGHT_SANDBOX"  # the child's sandbox (JSON, `Spec.to_env`), set by the judge
READ_ENV = "KERNELWRIGHT_SANDBOX_READ"  # a spawned candidate child's problem and candidate folder (os.pathsep-separated)
SPARE_INPUTS = "in"  # a spare's folder for the problem and candidate of the evaluation that takes it (judge.spares)
UID_BASE = uids.UID_BASE  # 1795162112 and up: no account's; a child's uid is this plus its pid
# Names that say a secret, anywhere in a variable's name (upper-cased), and the judge's own doors.
SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PRIVATE", "SIGNATURE")
DENIED_NAMES = frozenset({"KERNELWRIGHT_STORE", "KERNELWRIGHT_SERVICE", "KERNELWRIGHT_SERVICE_TOKEN", "KERNELWRIGHT_FORKSERVER_SOCKET"})
ALLOWED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "CC", "CXX", "CPATH", "LIBRARY_PATH", "USER", "LOGNAME"})  # a user name: getpass needs one where the uid has no account
ALLOWED_PREFIXES = ("PYTHON", "LD_", "LC_", "CUDA_", "NVIDIA_", "TORCH", "PYTORCH_", "OMP_", "MKL_", "KMP_", "OPENBLAS_", "TRITON_", "KINETO_",
                    "CUBLAS_", "CUDNN_", "NVCC_", "KERNELWRIGHT_")
LIMITS = {"NOFILE": 4096, "CORE": 0, "FSIZE": 16 << 30, "CPU": 3600}  # and DATA (limits()); KERNELWRIGHT_SANDBOX_<NAME> overrides
NPROC = 512  # tasks (threads count) of a child's own uid: torch's thread pools fit many times over (KERNELWRIGHT_SANDBOX_NPROC)
SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/opt", "/proc", "/sys", "/run/nvidia-persistenced")
ETC_READ = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "passwd", "group", "nsswitch.conf", "alternatives",
            "nvidia", "OpenCL", "vulkan", "gai.conf", "mime.types", "os-release", "debian_version")
DEVICE_FILES = ("null", "zero", "full", "random", "urandom")


def secret_name(name: str) -> bool:
    up = name.upper()
    return up in DENIED_NAMES or any(w in up for w in SECRET_WORDS)


def clean_env(env: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of `env`: what a judge child (and the fork server) may see."""
    return {k: v for k, v in env.items() if (k in ALLOWED_NAMES or k.startswith(ALLOWED_PREFIXES)) and not secret_name(k)}


@dataclass(frozen=True, kw_only=True)
class Support:
    """What this machine lets a judge child be confined by (probed once per process)."""

    uid: bool  # the judge is root and a child can become another uid
    landlock: int  # Landlock's ABI version that a confined child got (0: none)
    seccomp: bool  # a seccomp filter can be installed
    why: tuple[str, ...]  # what failed, in words

    def layers(self, mode: str) -> tuple[str, ...]:
        if mode == "off":
            return ("env",)
        got = ["env", "limits"]
        got += ["uid"] if self.uid else []
        got += ["landlock"] if self.landlock else []
        got += ["seccomp"] if self.seccomp else []
        return tuple(got)

    def missing(self) -> tuple[str, ...]:
        """What the full sandbox needs that this machine does not give, in words; empty when full."""
        out = []
        if not self.landlock:
            out.append("landlock (filesystem)")
        if not self.seccomp:
            out.append("seccomp (network)")
        if not self.uid:
            out.append("an uid of its own (a root judge): without it a process the candidate starts in a session of its own "
                       "outlives the verdict where its child was spawned afresh (the fork server kills what its children leave)"
                       + ("" if self.landlock >= 6 else ", nothing keeps it from signalling the judge")
                       + ", and on a GPU, where unix sockets stay open to it, the user's own (a D-Bus session bus, tmux, an ssh "
                       "agent, docker's) are reachable: an escape")
        return tuple(out)


@functools.lru_cache(maxsize=1)
def support() -> Support:
    """Confine a short-lived process with every layer, one at a time, and see what holds."""
    try:
        out = subprocess.run([sys.executable, "-I", "-S", confine.__file__, "probe"], capture_output=True, text=True, timeout=60)
        got = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError) as exc:
        return Support(uid=False, landlock=0, seccomp=False, why=(f"the probe failed: {exc}",))
    return Support(uid=bool(got.get("uid")), landlock=int(got.get("landlock") or 0), seccomp=bool(got.get("seccomp")),
                   why=tuple(str(x) for x in got.get("why", [])))


def limits() -> dict[str, int]:
    """The rlimits a confined process gets. DATA bounds its private writable memory (what malloc,
    torch's CPU allocator and a private mmap take) at three quarters of the machine's; shared
    mappings escape it (see docs/judge.md, Not yet), and CUDA's address-space reservations are not
    writable, so they do not count (CUDA works under RLIMIT_DATA 64 GiB: benchmarks/results/sandbox_gpu.md)."""
    out = dict(LIMITS)
    out["DATA"] = memory_total() * 3 // 4
    for name in out:
        raw = os.environ.get(f"KERNELWRIGHT_SANDBOX_{name}")
        if raw:
            out[name] = int(raw)
    return {k: v for k, v in out.items() if k != "DATA" or v > 0}


# Socket address families a confined process may still open. The CUDA driver does not start
# (error 304) without an AF_UNIX socket, and does with AF_UNIX alone
# (benchmarks/results/sandbox_gpu.md). No host and no loopback port is reachable through one; a
# named unix socket is, where permission bits let the child's uid write it (the judge's own are
# 0600; Landlock ABI 7 does not cover connecting to one). KERNELWRIGHT_SANDBOX_SOCKETS ("" for
# none, "1,16" with netlink) overrides.
SOCKET_FAMILIES = (1,)


def socket_families() -> tuple[int, ...]:
    raw = os.environ.get("KERNELWRIGHT_SANDBOX_SOCKETS")
    if raw is None:
        return SOCKET_FAMILIES
    return tuple(int(x) for x in raw.split(",") if x.strip())


def nproc() -> int:
    raw = os.environ.get("KERNELWRIGHT_SANDBOX_NPROC")
    return int(raw) if raw else NPROC


@dataclass(frozen=True, kw_only=True)
class Spec:
    """One confined process: what it may read and write, and how."""

    mode: str  # auto, strict or off
    layers: tuple[str, ...]  # the layers to apply (Support.layers)
    landlock_abi: int  # 0 without Landlock
    read: tuple[str, ...] = ()  # extra paths readable (the problem file, the candidate's folder, the cache)
    write: tuple[str, ...] = ()  # paths writable besides the working folder (a build's own output folder)
    profiler: bool = False  # leave perf_event_open allowed (an ncu run)
    # socket families it may open: None, the machine's default (socket_families(): AF_UNIX, which the
    # CUDA driver needs); () for a process that needs none (a CPU candidate, a compiler), so that no
    # unix socket of the user's is reachable where the judge is not root and the child has its uid
    sockets: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"sandbox must be one of {MODES}, got {self.mode!r}")
        bad = [x for x in self.layers if x not in LAYERS]
        if bad:
            raise ValueError(f"unknown sandbox layers {bad}; known: {LAYERS}")

    def families(self) -> tuple[int, ...]:
        """The socket families its seccomp filter lets it open."""
        return socket_families() if self.sockets is None else self.sockets

    def to_env(self) -> str:
        return json.dumps({"mode": self.mode, "layers": list(self.layers), "landlock_abi": self.landlock_abi, "read": list(self.read),
                           "write": list(self.write), "profiler": self.profiler,
                           "sockets": None if self.sockets is None else list(self.sockets)}, sort_keys=True)

    @staticmethod
    def from_env(text: str) -> "Spec":
        d = json.loads(text)
        return Spec(mode=d["mode"], layers=tuple(d["layers"]), landlock_abi=int(d["landlock_abi"]), read=tuple(d.get("read", ())),
                    write=tuple(d.get("write", ())), profiler=bool(d.get("profiler")),
                    sockets=None if d.get("sockets") is None else tuple(int(x) for x in d["sockets"]))


def spec_for(mode: str, *, read: Sequence[str | Path] = (), write: Sequence[str | Path] = (), profiler: bool = False,
             sockets: tuple[int, ...] | None = None) -> Spec:
    """The spec a child of this judge gets under `mode` on this machine."""
    if mode not in MODES:
        raise ValueError(f"sandbox must be one of {MODES}, got {mode!r}")
    sup = support() if mode != "off" else Support(uid=False, landlock=0, seccomp=False, why=())
    return Spec(mode=mode, layers=sup.layers(mode), landlock_abi=sup.landlock, read=tuple(str(p) for p in read),
                write=tuple(str(p) for p in write), profiler=profiler, sockets=sockets)


def for_candidate(mode: str, cache: str, extension: str | None = None, device: str | None = None) -> Spec:
    """A candidate child's spec: the build cache readable, its torch-extension folder (if any)
    writable; on the CPU backend no socket at all (only the CUDA driver needs a unix one)."""
    return spec_for(mode, read=[cache], write=[extension] if extension else [], sockets=() if device == "cpu" else None)


def refusal(mode: str) -> str:
    """Why `mode` cannot judge here ('' when it can): strict needs the full sandbox."""
    if mode != "strict":
        return ""
    missing = support().missing()
    return f"--sandbox strict: this machine does not give the full sandbox (missing: {', '.join(missing)})" if missing else ""


# ---- in the confined process -------------------------------------------------------------------


def read_rules(spec: Spec) -> list[str]:
    """Paths a confined process reads: the system's, Python's, the judge's, and the spec's own."""
    home = str(Path.home())
    py = [sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(sys.executable).resolve().parent),
          str(Path(__file__).resolve().parents[2])]
    py += [p for p in sys.path if p and os.path.isabs(p) and p not in ("/", home, *_launch_folders())]
    cuda = [os.environ.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH")]
    return [*SYSTEM_READ, *(f"/etc/{x}" for x in ETC_READ), *py, *(c for c in cuda if c), *spec.read]


def _launch_folders() -> tuple[str, ...]:
    """The folders Python put on sys.path for how this process was started, not for what it
    imports: the working folder (`python -m`, `-c`) and the main script's folder. They are the
    user's project (its `.env`, its store), and a confined compiler's `#include` or a confined
    tool's program would read them there and print them into a log the agent sees."""
    out = {os.getcwd()}
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        out.add(str(Path(main).resolve().parent))
        out.add(os.path.dirname(os.path.abspath(main)))
    return tuple(out - {str(Path(__file__).resolve().parents[2])})  # the package's own root stays readable


def rules(spec: Spec, workdir: str) -> list[tuple[str, int]]:
    """Landlock's rules: (path, rights)."""
    abi = spec.landlock_abi
    out = [(p, confine.READ) for p in read_rules(spec)]
    # the CUDA driver writes under /proc (error 304 without it: benchmarks/results/sandbox_gpu.md); what is there to
    # write is the process's own, or root's (permission bits), or behind ptrace's checks
    out.append(("/proc", confine.READ | confine.FS_WRITE_FILE | confine.FS_TRUNCATE))
    out += [(f"/dev/{d}", confine.FILE_RIGHTS) for d in DEVICE_FILES]  # named device files only: not /dev/shm, not a disk
    out += [(str(p), confine.FILE_RIGHTS) for p in gpu_files()]
    out += [(p, confine.fs_rights(abi)) for p in (workdir, *spec.write)]
    return out


def gpu_files() -> list[Path]:
    """The NVIDIA device files a child may open: the driver's shared ones (nvidiactl, nvidia-uvm,
    ...) and the GPUs CUDA_VISIBLE_DEVICES pins it to (all GPUs when it names them otherwise)."""
    pinned = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    found = []
    for p in sorted(Path("/dev").glob("nvidia*")):
        if p.is_dir():
            continue
        index = p.name[len("nvidia"):]
        if index.isdigit() and pinned and all(v.isdigit() for v in pinned) and index not in pinned:
            continue  # another GPU: its timings are other verdicts'
        found.append(p)
    return found


def enter(spec: Spec, parent: str) -> dict[str, Any]:
    """Confine this process (a judge child, before generated code runs) by `spec`: a new folder
    inside `parent` becomes its working folder, the only one it writes besides spec.write, with
    `tmp/` inside for TMPDIR (the judge's own files in `parent`, its log among them, stay out of
    its reach); what was applied. Raises OSError when a layer the spec names fails, or when the
    process has a second thread (seccomp, Landlock and capabilities bind the calling thread): the
    child must not go on half-confined."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1 and spec.layers != ("env",):
        raise OSError(f"the sandbox binds one thread, and this process has {threads}: it must be entered before any other starts "
                      "(a child spawned afresh, without the fork server, has torch's threads by then: judge with the fork server, "
                      "or with --sandbox off)")
    box = tempfile.mkdtemp(prefix="box-", dir=parent)
    tmp = os.path.join(box, "tmp")
    os.mkdir(tmp, 0o700)
    confine.home_env(os.environ, box, tmp, keep_under=tuple(spec.write))  # type: ignore[arg-type]
    tempfile.tempdir = tmp  # tempfile read /tmp once, in the fork server: its answer is inherited
    os.environ[CONFINED_ENV] = "1"
    os.chdir(box)
    layers = spec.layers
    if "limits" in layers:
        confine.set_limits(limits())
    if "uid" in layers:
        uid = UID_BASE + os.getpid()
        # access(2), which compilers ask of TMPDIR, checks without capabilities: the folder holding
        # the box must be traversable by the uid (not listable; what the judge keeps there is 0600),
        # and every folder above it (the host's: refused here, before anything is confined)
        os.chmod(parent, 0o711)
        host_folders.refuse_closed(layers, box, "the sandbox's folder")
        for path in (box, tmp):
            os.chown(path, uid, uid, follow_symlinks=False)
        for path in spec.write:
            confine.chown_tree(path, uid)
        confine.set_limits({"NPROC": nproc()})
        confine.become(uid, keep_read_search="landlock" in layers)
        os.environ.update(confine.account_env(uid))
        if not os.access(tmp, os.W_OK | os.X_OK):  # closed other than by mode bits (an ACL, a mount): compilers will fall back to /tmp
            sys.stderr.write(f"kernelwright: warning: TMPDIR {tmp} is not reachable by the sandbox's uid {uid}, "
                             "though every folder above it lets others through\n")
    elif "limits" in layers and os.getuid() != 0 and spec.mode != "off":
        confine.set_limits({"NPROC": len(uids.pids_of_uid(os.getuid())) + nproc()})
    if spec.mode != "off" and layers != ("env",):  # always: the judge's sockets tell a sandboxed peer by it (sandbox_check.confined_peer)
        confine.no_new_privs()
    if "landlock" in layers:
        confine.landlock(rules(spec, box), abi=spec.landlock_abi)
    if "seccomp" in layers:
        confine.seccomp(confine.PROFILER_NEEDS if spec.profiler else (), spec.families())
    return {"layers": list(layers), "uid": os.getuid(), "folder": box}


ENTERED: dict[str, Any] | None = None  # what enter_spawned applied, for the candidate's setup to report


def enter_spawned() -> None:
    """A candidate child spawned afresh (no fork server), and a hosted child however it started
    (judge.child), enters the sandbox here, before torch's import starts threads the layers would
    not bind: its problem and candidate (READ_ENV) and a spare's in/ readable."""
    global ENTERED
    parent = os.getcwd()
    read = [p for p in os.environ.pop(READ_ENV, "").split(os.pathsep) if p] + [os.path.join(parent, SPARE_INPUTS)]
    ENTERED = enter_from_env(parent, read)


def candidate_spec(env: Mapping[str, str]) -> Spec:
    """The spec a candidate child with the environment `env` confines itself by (enter_from_env):
    SPEC_ENV's, else the candidate's under `auto`. The judge reads it too, to watch the child
    (judge.quota) as it is confined."""
    text = env.get(SPEC_ENV, "")
    if text:
        return Spec.from_env(text)
    from kernelwright.judge.build import cache_dir

    return for_candidate("auto", str(cache_dir(env)), env.get("TORCH_EXTENSIONS_DIR"))


def enter_from_env(parent: str, extra_read: Sequence[str] = ()) -> dict[str, Any]:
    """Enter the sandbox SPEC_ENV describes; where the judge set none (a caller that started a
    candidate child without one), the candidate's spec under `auto`: never unconfined by omission."""
    spec = candidate_spec(os.environ)
    os.environ.pop(SPEC_ENV, None)
    if extra_read:
        spec = dataclasses.replace(spec, read=(*spec.read, *extra_read))
    return enter(spec, parent)


def command(spec: Spec, cmd: Sequence[str], workdir: str | Path) -> list[str]:
    """`cmd` wrapped so that it runs confined by `spec` in `workdir` (a compiler, compute-sanitizer,
    ncu): a small launcher (judge.confine, the standard library only) confines itself, then execs."""
    if spec.layers == ("env",):
        return list(cmd)
    host_folders.refuse_closed(spec.layers, workdir, "the confined command's folder")  # its TMPDIR is `workdir`/tmp (confine._confine_and_exec)
    return [sys.executable, "-I", "-S", confine.__file__, "exec", json.dumps(_exec_plan(spec, str(workdir))), "--", *cmd]


def _exec_plan(spec: Spec, workdir: str) -> dict[str, Any]:
    return {"layers": list(spec.layers), "abi": spec.landlock_abi, "rules": rules(spec, workdir), "workdir": workdir,
            "chown": [workdir, *spec.write], "limits": limits(), "nproc": nproc(), "uid_base": UID_BASE, "profiler": spec.profiler,
            "families": list(spec.families())}


def read_regular(path: str | Path, limit: int = 1 << 20) -> str:
    """The last `limit` bytes of a file the confined side wrote, as text, never through a link it
    left there nor from a FIFO ('' when it is not a regular file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:  # a hard link to a file elsewhere is not the tool's report
            return ""
        start = max(0, st.st_size - limit)
        return os.pread(fd, st.st_size - start, start).decode(errors="replace")
    finally:
        os.close(fd)


def run_tool(cmd: Sequence[str], *, mode: str, cwd: Path, output: Path, timeout_s: float, env: Mapping[str, str],
             read: Sequence[str | Path] = (), write: Sequence[str | Path] = (), profiler: bool = False) -> tuple[bool, str]:
    """Run a tool over candidate code (compute-sanitizer, ncu) confined by `mode` in `cwd`, in a
    process group of its own, its output in `output`, the environment allow-listed; afterwards
    whatever it left running is killed. (Whether it ran past `timeout_s`, the output's last MiB,
    read through the judge's own descriptor: the confined side may replace the file at that path.)"""
    spec = spec_for(mode, read=read, write=write, profiler=profiler)
    lim = watched(spec)
    tool_env = clean_env(env)
    if spec is not None and spec.mode != "off":  # a kernel it must build goes to its own folder: the shared cache is read-only there
        tool_env.update({CONFINED_ENV: "1", "TMPDIR": str(cwd)})
    with open(output, "w+b") as out:
        proc = subprocess.Popen(command(spec, cmd, cwd), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=tool_env, cwd=cwd, start_new_session=True)
        watch = watch_for(spec, proc.pid, [cwd, *write], lim)
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            stop_launcher(spec, proc)
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        finally:
            if watch is not None:
                watch.stop()
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, 9)  # what stayed in the tool's group
            if spec is not None and "uid" in spec.layers:
                reap(proc.pid)
        size = os.fstat(out.fileno()).st_size
        start = max(0, size - (1 << 20))
        text = os.pread(out.fileno(), size - start, start).decode(errors="replace")
        return timed_out, text + (f"\nkernelwright: {watch.over}\n" if watch is not None and watch.over else "")


def stop_launcher(spec: Spec | None, proc: subprocess.Popen[Any]) -> None:
    """Stop a confined command that ran out of time, before its group is killed. Without the uid
    layer its launcher stays as the subreaper of what the command started (confine.exec_confined):
    SIGTERM makes it kill the command and sweep. With the uid layer every process of the uid goes
    (reap), while the launcher's pid, and so the uid, is still its own."""
    if spec is None or tuple(spec.layers) == ("env",):
        return
    if "uid" in spec.layers:
        reap(proc.pid)
        return
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        proc.terminate()
        proc.wait(timeout=confine.SWEEP_S + 1)


def watched(spec: Spec | None) -> quota.Limits | None:
    """The judge.quota limits a process confined by `spec` is watched under (ValueError for a bad
    setting: asked before the process starts, so that none is left unwatched); None under `off`,
    which applies the environment's allow-list only."""
    if spec is None or spec.mode == "off" or tuple(spec.layers) == ("env",):
        return None
    return quota.limits()


def watch_for(spec: Spec | None, pid: int, roots: Sequence[str | Path], lim: quota.Limits | None,
              signaller: uids.Signaller | None = None) -> quota.Watch | None:
    """A judge.quota watch over the confined process `pid` (its disk across `roots`, its host
    memory across its processes) under `lim` (watched(spec)), killing through `signaller` (the
    uid's kept helper) if any; None without limits."""
    if spec is None or lim is None:
        return None
    return quota.Watch(pid, roots, uid=UID_BASE + pid if "uid" in spec.layers else None, lim=lim, signaller=signaller)


def reap(pid: int, by: uids.Signaller | None = None) -> None:
    """Kill every process left of the confined child `pid` (its own uid's, when the judge is root;
    through `by`, its kept signaller, if any)."""
    if os.getuid() == 0 and pid > 0:
        uids.kill_uid(UID_BASE + pid, by=by)
