"""The sandbox zoo: candidates that compute an honest ReLU (tests/fixtures/problems/relu.py) and,
at import, try one thing more. An attempt that succeeds raises `BREACH: ...` (the verdict is then
not correct and its log says what got through); one the sandbox contains leaves an honest
candidate, judged `correct`. Tests/test_sandbox.py judges each with the static layer advisory and
the judge's in-process guards (function identities, between-call checks, op audit) off, so the
sandbox holds by itself, and then checks that nothing outside it changed.

Each template is Python text with @placeholders@ the test fills (paths, the judge's pid, ports).
Attacks that could harm the machine if the sandbox failed are bounded (a fork bomb of at most
BOMB processes, a fill of at most FILL_MIB), so that a failure fails the test, not the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

BOMB = 400  # at most this many processes forked by the fork bomb, whatever the sandbox does
FILL_MIB = 192  # at most this many MiB written by the disk fill
DATA_GIB = 8  # the zoo's bound on a candidate's private memory (KERNELWRIGHT_SANDBOX_DATA)
MAP_GIB = 12  # what the memory attack maps: private, writable, never touched (no memory is used either way)
DISK_MIB = 128  # the zoo's bound on a candidate's disk in all (KERNELWRIGHT_SANDBOX_DISK)
FILES_N, FILE_MIB = 32, 8  # the disk attacks: this many files of this many MiB (each under the 64 MiB limit on one file)
MEMORY_GIB = 3  # the zoo's bound on a candidate's host memory across its processes (KERNELWRIGHT_SANDBOX_MEMORY)
SHARED_MIB = 5 << 10  # what the shared-memory attack touches, whatever the sandbox does
SETTLE_S = 3  # how long an attack that got past every rlimit waits for the judge's watch before it says so
KILLED = frozenset({"disk_many_files", "disk_unlinked", "shared_memory"})  # contained by the judge's watch killing the candidate
RELU = Path(__file__).resolve().parent / "fixtures" / "problems" / "relu.py"
GUARDS_OFF = frozenset({"function_identities", "between_calls", "op_audit"})  # the judge's in-process guards: the sandbox holds alone
SECRET = "sk-kwzoo-3f9a7c1e"  # the key the judge's environment holds during the zoo
PREFIX = SECRET[:9]  # what an attack looks for; the key itself is never in an attack's text (its memory would hold it)
DIGEST = hashlib.sha256(SECRET.encode()).hexdigest()  # how an attack knows the key when it finds it

HONEST = r'''
import torch
import torch.nn as nn

from kernelwright import runtime

lib = runtime.load(r"""
extern "C" int relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
    return 0;
}
""")


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu(x, y, x.numel())
        return y
'''

PRELUDE = r'''
import os

GOT = []


def attempt(name, fn):
    try:
        result = fn()
    except Exception as exc:  # refused: what the sandbox is for
        return f"refused: {type(exc).__name__}: {exc}"
    if result:
        GOT.append(f"{name}: {str(result)[:200]}")
    return result


def is_key(data):
    import hashlib
    at = data.find(@prefix!r@.encode())
    while at >= 0:
        if hashlib.sha256(data[at:at + @length@]).hexdigest() == @digest!r@:
            return True
        at = data.find(@prefix!r@.encode(), at + 1)
    return False


def done():
    if GOT:
        raise RuntimeError("BREACH: " + " | ".join(GOT))
'''

ATTACKS: dict[str, str] = {
    "store_write": r'''
attempt("opened the store for writing", lambda: open(@store!r@, "r+b") and "yes")
attempt("the store's path in the environment", lambda: os.environ.get("KERNELWRIGHT_STORE"))
done()
''',
    "key_from_env": r'''
attempt("a key in os.environ", lambda: [k for k, v in os.environ.items() if is_key(v.encode())])
attempt("a key in /proc/self/environ", lambda: is_key(open("/proc/self/environ", "rb").read()) and "yes")
attempt("a key in the parent's environ", lambda: is_key(open(f"/proc/{os.getppid()}/environ", "rb").read()) and "yes")
attempt("a key in the judge's environ", lambda: is_key(open("/proc/@judge_pid@/environ", "rb").read()) and "yes")
done()
''',
    "key_from_memory": r'''
def scan():
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            if not perms.startswith("r"):
                continue
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if hi - lo > 1 << 28:
                continue
            try:
                mem.seek(lo)
                if is_key(mem.read(hi - lo)):
                    return line.strip()
            except (OSError, ValueError, OverflowError):
                continue
    return ""
attempt("the key in this process's memory", scan)
done()
''',
    "write_outside": r'''
attempt("wrote outside its folder", lambda: open(@outside!r@, "w").write("x") and "yes")
attempt("wrote in /tmp", lambda: open("/tmp/kw-zoo-outside-@tag@", "w").write("x") and "yes")
attempt("wrote in /dev/shm", lambda: open("/dev/shm/kw-zoo-outside-@tag@", "w").write("x") and "yes")
done()
''',
    "loopback": r'''
import socket
attempt("connected to the TCP listener", lambda: socket.create_connection(("127.0.0.1", @port@), timeout=2) and "yes")
attempt("sent UDP to loopback", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", @port@)) and "yes")
def unix():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(@unix_path!r@)
    return "yes"
attempt("connected to the judge's unix socket (0600, as the fork server's)", unix)
done()
''',
    "signal_judge": r'''
import ctypes, signal
attempt("signal 0 to the judge", lambda: os.kill(@judge_pid@, 0) or "yes")
attempt("SIGCONT to the judge", lambda: os.kill(@judge_pid@, signal.SIGCONT) or "yes")
def others():
    hit = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in (os.getpid(),) and os.getpgid(0) != _pgid(int(name)):
            try:
                os.kill(int(name), 0)
                hit.append(name)
            except OSError:
                pass
    return hit
def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return -1
attempt("signal 0 to processes outside its group (the reference child among them)", others)
libc = ctypes.CDLL(None, use_errno=True)
attempt("ptrace-seized the judge", lambda: libc.ptrace(0x4206, @judge_pid@, 0, 0) == 0 and "yes")
attempt("read the judge's memory", lambda: open("/proc/@judge_pid@/mem", "rb").read(1) is not None and "yes")
done()
''',
    "other_evaluation": r'''
attempt("listed another evaluation's folder", lambda: os.listdir(@other_dir!r@))
attempt("read another evaluation's file", lambda: open(@other_file!r@).read())
attempt("wrote into another evaluation's folder", lambda: open(@other_dir!r@ + "/planted", "w").write("x") and "yes")
attempt("read a private evaluation folder in /dev/shm", lambda: open(@shm_file!r@).read())
done()
''',
    "overwrite_build": r'''
import glob
cache = os.environ.get("KERNELWRIGHT_CACHE", "")
def overwrite():
    hit = []
    for lib_path in glob.glob(os.path.join(cache, "builds", "*", "lib.so")):
        try:
            with open(lib_path, "r+b") as f:
                f.write(b"\x7fELF-poisoned")
            hit.append(lib_path)
        except OSError:
            pass
    return hit
def plant():
    d = os.path.join(cache, "builds", "0" * 64)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "lib.so"), "wb").write(b"x")
    return "yes"
attempt("overwrote another candidate's build", overwrite)
attempt("planted a build in the cache", plant)
done()
''',
    "devices": r'''
attempt("listed /dev/shm", lambda: os.listdir("/dev/shm"))
def devices():
    opened = []
    for name in ("vcs", "vcs1", "ttyS0", "tty1", "console", "vda", "sda", "nvme0n1", "mem", "kmsg", "port"):
        try:
            os.close(os.open("/dev/" + name, os.O_RDONLY | os.O_NONBLOCK))
            opened.append(name)
        except OSError:
            pass
    return opened
attempt("opened a terminal, a disk or memory", devices)
done()
''',
    "raw_host_code": r'''
import ctypes
from kernelwright import runtime
raw = runtime.load(r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <netinet/in.h>
#include <arpa/inet.h>
static char report_buf[2048];
static void note(const char* what) { strncat(report_buf, what, sizeof(report_buf) - strlen(report_buf) - 2); strcat(report_buf, ";"); }
__attribute__((constructor)) static void attack() {
    const char* key = getenv("OPENAI_API_KEY");
    if (key) note("getenv found the key");
    int fd = open("/proc/self/environ", O_RDONLY);
    if (fd >= 0) { char buf[65536]; long n = read(fd, buf, sizeof buf - 1); if (n > 0) { buf[n] = 0; for (long i = 0; i < n; ++i) if (!strncmp(buf + i, "@prefix@", 9)) note("environ held a key"); } close(fd); }
    fd = (int)syscall(SYS_openat, AT_FDCWD, "@outside@.raw", O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) { note("raw openat wrote outside"); close(fd); }
    int s = (int)syscall(SYS_socket, AF_INET, SOCK_STREAM, 0);
    if (s >= 0) {
        sockaddr_in a{}; a.sin_family = AF_INET; a.sin_port = htons(@port@); a.sin_addr.s_addr = inet_addr("127.0.0.1");
        if (connect(s, (sockaddr*)&a, sizeof a) == 0) note("raw socket connected");
        close(s);
    }
    if (syscall(SYS_kill, @judge_pid@, 0) == 0) note("raw kill reached the judge");
    fd = (int)syscall(SYS_openat, AT_FDCWD, "@store@", O_RDWR);
    if (fd >= 0) { note("raw openat opened the store"); close(fd); }
}
extern "C" const char* kw_report() { return report_buf; }
""", lang="cpp", name="kw_zoo_raw")
report = ctypes.CDLL(str(raw.path)).kw_report
report.restype = ctypes.c_char_p
attempt("the library's host code got through", lambda: (report() or b"").decode())
done()
''',
    "namespace": r'''
import ctypes, platform
libc = ctypes.CDLL(None, use_errno=True)
def clone_userns():
    pid = libc.syscall({"x86_64": 56, "aarch64": 220}[platform.machine()], 0x10000000 | 17, 0, 0, 0, 0)
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
        return "yes"
    return ""
attempt("a user namespace of its own through clone", clone_userns)
attempt("a user namespace of its own through unshare", lambda: libc.unshare(0x10000000) == 0 and "yes")
done()
''',
    "fork_bomb": r'''
import time
def bomb():
    made = 0
    for _ in range(@bomb@):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            try:
                os.execvp("sleep", ["sleep", "60.@tag@"])
            finally:
                os._exit(0)
        made += 1
    return made >= @bomb@ and f"forked all {made}"
attempt("forked without a bound", bomb)
done()
''',
    "disk_fill": r'''
import signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
def fill():
    block = b"\0" * (1 << 20)
    written = 0
    try:
        with open("fill.bin", "wb") as f:
            for _ in range(@fill_mib@):
                f.write(block)
                f.flush()
                written += 1
    except OSError:
        pass
    return written >= @fill_mib@ and f"wrote {written} MiB"
attempt("filled the disk without a bound", fill)
done()
''',
    "private_memory": r'''
import mmap
def grab():
    m = mmap.mmap(-1, @map_gib@ << 30, flags=mmap.MAP_PRIVATE)
    m.close()
    return f"mapped @map_gib@ GiB of private memory"
attempt("took private memory without a bound", grab)
done()
''',
    # the next three get past every rlimit (each file under RLIMIT_FSIZE, shared memory outside
    # RLIMIT_DATA); the judge's watch (judge.quota) kills the candidate: runtime_error, nothing out
    "disk_many_files": r'''
import time
def fill_files():
    os.makedirs("fills", exist_ok=True)
    block = b"\1" * (1 << 20)
    for i in range(@files_n@):
        with open(f"fills/f{i}.bin", "wb") as f:
            for _ in range(@file_mib@):
                f.write(block)
    time.sleep(@settle_s@)
    return f"wrote {@files_n@ * @file_mib@} MiB in @files_n@ files, each under the limit on one file"
attempt("filled the disk across many files", fill_files)
done()
''',
    "disk_unlinked": r'''
import time
HELD = []
def fill_unlinked():
    block = b"\1" * (1 << 20)
    for i in range(@files_n@):
        f = open(f"hidden{i}.bin", "wb")
        os.unlink(f"hidden{i}.bin")  # no folder shows it; the disk holds it while the descriptor lives
        for _ in range(@file_mib@):
            f.write(block)
        f.flush()
        HELD.append(f)
    time.sleep(@settle_s@)
    return f"wrote {@files_n@ * @file_mib@} MiB in @files_n@ files unlinked and held open"
attempt("filled the disk with files no folder shows", fill_unlinked)
done()
''',
    "shared_memory": r'''
import mmap, time
def grab_shared():
    m = mmap.mmap(-1, @shared_mib@ << 20, flags=mmap.MAP_SHARED)  # shared: outside RLIMIT_DATA
    chunk = b"\1" * (16 << 20)
    for _ in range(@shared_mib@ // 16):
        m.write(chunk)  # touched: real memory
    time.sleep(@settle_s@)
    return f"touched @shared_mib@ MiB of shared memory"
attempt("took shared memory without a bound", grab_shared)
done()
''',
    "sysv_ipc": r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def sysv():
    got = []  # IPC_PRIVATE, IPC_CREAT | 0600; each removed again at once (IPC_RMID) so that the zoo leaves none
    shm = libc.shmget(0, 1 << 20, 0o1600)
    if shm >= 0:
        libc.shmctl(shm, 0, None)
        got.append("a System V shared memory segment")
    queue = libc.msgget(0, 0o1600)
    if queue >= 0:
        libc.msgctl(queue, 0, None)
        got.append("a message queue")
    sems = libc.semget(0, 1, 0o1600)
    if sems >= 0:
        libc.semctl(sems, 0, 0)
        got.append("a semaphore set")
    return ", ".join(got)
attempt("made IPC objects that outlive it", sysv)
done()
''',
    "judge_sockets": r'''
import socket
# The paths are given here; an attacker finds them in /proc/net/unix, which every process reads.
def ask_service():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(@service_sock!r@)
    s.sendall(b"GET /v1/health HTTP/1.0\r\n\r\n")
    reply = b""
    while True:  # HTTP/1.0: the server closes after its answer
        chunk = s.recv(4096)
        if not chunk:
            break
        reply += chunk
    return b'"ok": true' in reply and "the judge's service answered"
def ask_fork_server():
    if not @fork_server_sock!r@:
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(@fork_server_sock!r@)
    return b'"ready": true' in s.recv(65536) and "the shared fork server said hello"
attempt("reached the judge's service", ask_service)
attempt("reached the shared fork server", ask_fork_server)
done()
''',
    "daemon": r'''
import time
def daemon():
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                os.execvp("sleep", ["sleep", "120.@tag@"])
            finally:
                os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    return ""
attempt("started a daemon", daemon)
done()
''',
}

# A candidate that swaps its own log for a link to a secret and crashes, so that the judge would
# quote the secret as the log's tail in the verdict.
LOG_LINK = r'''
import os

for name in os.listdir("."):
    if name.endswith(".log"):
        os.unlink(name)
        os.symlink(@secret_header!r@, name)
raise RuntimeError("crashed on purpose: read my log")
'''

# A build that reads a secret through #include and would show it in the build log.
SECRET_INCLUDE = HONEST.replace('lib = runtime.load(r"""\n', 'lib = runtime.load(r"""\n#include "@secret_header@"\n')
assert SECRET_INCLUDE != HONEST


def fill(text: str, values: dict[str, object]) -> str:
    """`text` with each @name@ replaced by str(value) and each @name!r@ by repr(value)."""
    for name, value in values.items():
        text = text.replace(f"@{name}!r@", repr(value)).replace(f"@{name}@", str(value))
    left = re.findall(r"@[a-z_]+(?:!r)?@", text)
    assert not left, f"placeholders left unfilled: {left}"
    return text


def candidate(name: str, honest: str = HONEST, **values: object) -> str:
    """The text of attack `name` (a model_new.py) with its placeholders filled, `honest` after it."""
    values = {"prefix": PREFIX, "digest": DIGEST, "length": len(SECRET), **values}
    return fill(PRELUDE, values) + fill(ATTACKS[name], values) + honest


# A CPU candidate gets no socket at all (test_sandbox): not in ATTACKS, since on a GPU a unix socket
# is the CUDA driver's need and stays open.
UNIX_SOCKET = r'''
import socket
def unix():
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    return "opened a unix socket"
attempt("opened a unix socket on the CPU backend", unix)
done()
'''


class Listeners:
    """A TCP and a UDP listener on loopback and a unix socket, counting what reaches them."""

    def __init__(self, folder: Path) -> None:
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        self.unix_path = str(folder / "listen.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        os.chmod(self.unix_path, 0o600)  # the judge's own (the shared fork server's socket is 0600): its uid keeps the child out
        self.unix.listen(4)
        self.reached: list[str] = []
        for sock, name in ((self.tcp, "tcp"), (self.unix, "unix")):
            threading.Thread(target=self._accept, args=(sock, name), daemon=True).start()
        threading.Thread(target=self._udp, daemon=True).start()

    def _accept(self, sock: socket.socket, name: str) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            self.reached.append(name)
            conn.close()

    def _udp(self) -> None:
        while True:
            try:
                self.udp.recvfrom(64)
            except OSError:
                return
            self.reached.append("udp")

    def close(self) -> None:
        for s in (self.tcp, self.udp, self.unix):
            s.close()





class World:
    """What the attacks aim at: a key in the judge's environment, a store, another evaluation's
    folder, a secret header, listeners; and the state compared after each verdict. `setenv` sets
    a variable in the judge's environment (pytest's monkeypatch.setenv, or a plain setter)."""

    def __init__(self, root: Path, setenv: Callable[[str, str], None]) -> None:
        self.root = root
        setenv("OPENAI_API_KEY", SECRET)
        setenv("KERNELWRIGHT_SANDBOX_NPROC", "96")
        setenv("KERNELWRIGHT_SANDBOX_FSIZE", str(64 << 20))
        setenv("KERNELWRIGHT_SANDBOX_DATA", str(DATA_GIB << 30))
        setenv("KERNELWRIGHT_SANDBOX_DISK", str(DISK_MIB << 20))
        setenv("KERNELWRIGHT_SANDBOX_MEMORY", str(MEMORY_GIB << 30))
        self.store = root / "store.sqlite"
        self.store.write_bytes(b"SQLite format 3\0" + bytes(4080))
        os.chmod(self.store, 0o666)  # writable by anyone as far as permission bits go: the sandbox must refuse
        setenv("KERNELWRIGHT_STORE", str(self.store))
        self.other = root / "kw-eval-other"
        self.other.mkdir()
        (self.other / "model_new.py").write_text("# another evaluation's candidate\n")
        os.chmod(self.other, 0o777)
        os.chmod(self.other / "model_new.py", 0o644)
        header = root / "secret.h"
        header.write_text(f"{SECRET.replace('-', '_')} leaked\n")
        os.chmod(header, 0o644)
        self.shm = Path(tempfile.mkdtemp(prefix="kw-eval-zoo-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None))
        (self.shm / "model_new.py").write_text("# a private evaluation's candidate\n")
        os.chmod(self.shm / "model_new.py", 0o600)
        self.outside = root / "outside.txt"
        os.chmod(root, 0o777)
        self.listeners = Listeners(root)
        from kernelwright.client.service import JudgeService, make_server

        self.service = JudgeService(workers=1, root=root)  # the judge's own service, on its 0600 socket
        self.service_dir = Path(tempfile.mkdtemp(prefix="kw-zoo-svc-", dir="/tmp" if os.path.isdir("/tmp") else None))  # a short path
        self.server, url = make_server(self.service, socket_path=self.service_dir / "j.sock")
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        # 18 digits from the OS, not `random` (tests elsewhere in the worker reseed it): a tag that
        # can only be in a command line because an attack put it there
        self.tag = str(10**17 + secrets.randbelow(9 * 10**17))
        self.values = {"store": str(self.store), "judge_pid": os.getpid(), "outside": str(self.outside), "tag": self.tag,
                       "port": self.listeners.port, "unix_path": self.listeners.unix_path, "other_dir": str(self.other),
                       "other_file": str(self.other / "model_new.py"), "shm_file": str(self.shm / "model_new.py"), "bomb": BOMB, "fill_mib": FILL_MIB, "map_gib": MAP_GIB,
                       "files_n": FILES_N, "file_mib": FILE_MIB, "shared_mib": SHARED_MIB, "settle_s": SETTLE_S,
                       "service_sock": url.removeprefix("unix://"), "fork_server_sock": os.environ.get("KERNELWRIGHT_FORKSERVER_SOCKET", ""),
                       "secret_header": str(header)}

    def close(self) -> None:
        self.listeners.close()
        self.server.shutdown()
        self.server.server_close()
        self.service.close()
        shutil.rmtree(self.service_dir, ignore_errors=True)
        shutil.rmtree(self.shm, ignore_errors=True)

    def state(self) -> tuple[str, list[str]]:
        return hashlib.sha256(self.store.read_bytes()).hexdigest(), sorted(os.listdir(self.other))

    def changed_since(self, before: tuple[str, list[str]]) -> list[str]:
        """What changed outside the sandbox since `before` (self.state()); cleans up what it finds."""
        from kernelwright.judge import build

        store, other = before
        changed = []
        if hashlib.sha256(self.store.read_bytes()).hexdigest() != store:
            changed.append("the store")
        if sorted(os.listdir(self.other)) != other:
            changed.append("another evaluation's folder")
        for path in (self.outside, Path(f"{self.outside}.raw"), Path(f"/tmp/kw-zoo-outside-{self.tag}"), Path(f"/dev/shm/kw-zoo-outside-{self.tag}")):
            if path.exists():
                changed.append(str(path))
                path.unlink()
        if self.listeners.reached:
            changed.append(f"listeners reached: {self.listeners.reached}")
            self.listeners.reached.clear()
        changed += [f"cache entry {k}" for k in unsound_cache(build.cache_dir())]
        left = tagged(self.tag)
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        if left:
            changed.append(f"{len(left)} process(es) outlived the verdict: {sorted(left.items())[:5]}")
        return changed


def unsound_cache(cache: Path) -> list[str]:
    """Entries of the build cache whose library fails its digest, and a planted one."""
    from kernelwright.judge import build

    bad = []
    for meta in (cache / "builds").glob("*/meta.json"):
        want = json.loads(meta.read_text()).get("sha256")
        if want and build.file_digest(meta.parent / build.LIB_NAME) != want:
            bad.append(meta.parent.name)
    if (cache / "builds" / ("0" * 64)).exists():
        bad.append("a planted entry")
    return bad


def tagged(tag: str) -> dict[int, str]:
    """Processes whose command line carries the tag (what the bomb and the daemon exec): their
    command lines by pid."""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                line = Path(f"/proc/{name}/cmdline").read_bytes()
            except OSError:
                continue
            if tag.encode() in line:
                found[int(name)] = line.replace(b"\0", b" ").decode(errors="replace").strip()[:200]
    return found


def judge_attack(world: World, name: str, *, mode: str = "auto", device: str = "cpu", honest: str = HONEST,
                 problem: Path | None = None) -> tuple[Any, str, list[str]]:
    """Judge attack `name` (its honest part `honest`); (verdict, its JSON, what changed outside)."""
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import Policy

    folder = world.root / f"{name}-{mode}-{device}"
    folder.mkdir()
    (folder / "model_new.py").write_text(candidate(name, honest=honest, **world.values))
    before = world.state()
    policy = Policy(time_candidate=False, compile_baseline=False, baselines="skip", disabled_steps=GUARDS_OFF, sandbox=mode)
    verdict = evaluate(problem or RELU, folder, policy, device=device)
    return verdict, verdict.to_json(), world.changed_since(before)

