"""The sandbox zoo (tests/sandbox_zoo.py): every attack contained, every control correct, and a
check after each verdict that nothing outside the sandbox changed. Judged with the judge's own
in-process guards off, so the sandbox holds by itself (the static layer only ever advises)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import sandbox_zoo as zoo
from conftest import CANDIDATES, JUDGE_TIMEOUT_S, PROBLEMS
from kernelwright.judge import build, confine, host_folders, sandbox, sandbox_check
from kernelwright.judge.evaluate import evaluate
from kernelwright.judge.policy import Policy

pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S * 2)

GUARDS_OFF = zoo.GUARDS_OFF
FULL = sandbox.support().missing() == ()
needs_full = pytest.mark.skipif(not FULL, reason=f"this machine does not give the full sandbox: {sandbox.support().missing()}")


def zoo_policy(**kw) -> Policy:
    return Policy(time_candidate=False, compile_baseline=False, baselines="skip", disabled_steps=GUARDS_OFF, **kw)


@pytest.fixture()
def world(tmp_path, monkeypatch):
    """What the attacks aim at (sandbox_zoo.World), the key in the judge's environment."""
    w = zoo.World(tmp_path, monkeypatch.setenv)
    yield w
    w.close()


@needs_full
@pytest.mark.parametrize("name", sorted(zoo.ATTACKS))
def test_each_attack_is_contained(world, name):
    verdict, text, changed = zoo.judge_attack(world, name)
    assert verdict.sandbox["full"] and verdict.sandbox["layers"] == list(sandbox.LAYERS), verdict.sandbox
    if name in zoo.KILLED:  # past every rlimit: the judge's watch kills it and says why
        assert verdict.status.value == "runtime_error" and "the sandbox killed it" in verdict.log, (verdict.status, verdict.log)
    else:
        assert verdict.status.value == "correct", verdict.log
    assert "BREACH" not in text and zoo.SECRET not in text
    assert not changed, changed


@needs_full
def test_a_build_that_includes_a_secret_cannot_read_it(world):
    folder = world.root / "secret_include"
    folder.mkdir()
    (folder / "model_new.py").write_text(zoo.fill(zoo.SECRET_INCLUDE, world.values))
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(), device="cpu")
    assert verdict.status.value == "compile_error", verdict.log
    assert "Permission denied" in verdict.log
    assert zoo.SECRET.replace("-", "_") not in verdict.to_json()


needs_uid = pytest.mark.skipif("uid" not in sandbox.spec_for("auto").layers, reason="no uid layer here (the judge is not root)")
WHO = r"""
import getpass
import torch.nn as nn

NAME = getpass.getuser()  # torch before 2.13 asks this when its inductor cache module is imported


class ModelNew(nn.Module):
    def forward(self, x):
        assert NAME.startswith("sandbox"), NAME
        return x.clamp(min=0)
"""


@needs_uid
def test_a_candidate_under_a_uid_of_its_own_has_a_user_name(tmp_path):
    """The sandbox uid has no account: without USER and LOGNAME, getpass.getuser() raised KeyError in
    the child, and torch's inductor (torch 2.11 on the GPU machine) failed every compile there."""
    folder = tmp_path / "who"
    folder.mkdir()
    (folder / "model_new.py").write_text(WHO)
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(), device="cpu")
    assert "uid" in verdict.sandbox["layers"], verdict.sandbox
    assert verdict.status.value == "correct", verdict.log


@needs_uid
def test_a_confined_tool_under_a_uid_of_its_own_has_a_user_name(open_tmp_path):
    _, printed = sandbox.run_tool([sys.executable, "-I", "-c", "import getpass; print('name', getpass.getuser())"], mode="auto",
                                  cwd=open_tmp_path, output=open_tmp_path / "out.txt", timeout_s=60, env=dict(os.environ))
    assert "name sandbox" in printed, printed


TRITON_HOME = r"""
import os
import torch.nn as nn

HOMES = (os.environ.get("TRITON_HOME"), os.environ.get("HOME"), os.getcwd())


class ModelNew(nn.Module):
    def forward(self, x):
        assert HOMES[0] == HOMES[1] == HOMES[2], HOMES
        return x.clamp(min=0)
"""


def test_a_candidates_triton_home_is_its_own_folder(tmp_path):
    """Triton reads its home folder once, at import, and the fork server imported it as the judge's
    user: every Triton compile in a sandboxed child failed on "/root/.triton" (Permission denied)."""
    folder = tmp_path / "triton_home"
    folder.mkdir()
    (folder / "model_new.py").write_text(TRITON_HOME)
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(), device="cpu")
    assert verdict.status.value == "correct", verdict.log


def test_a_confined_tool_gets_no_shared_cache_folder_and_its_own_triton_home(open_tmp_path):
    env = dict(os.environ, TRITON_CACHE_DIR=str(open_tmp_path / "shared-triton"), TORCHINDUCTOR_CACHE_DIR=str(open_tmp_path / "shared-inductor"))
    code = "import os; print('homes', os.environ.get('TRITON_HOME') == os.environ['HOME'] == os.getcwd(), 'caches', " \
           "[v for v in ('TRITON_CACHE_DIR', 'TORCHINDUCTOR_CACHE_DIR') if v in os.environ])"
    _, printed = sandbox.run_tool([sys.executable, "-I", "-c", code], mode="auto", cwd=open_tmp_path, output=open_tmp_path / "out.txt", timeout_s=60,
                                  env=env)
    assert "homes True caches []" in printed, printed


# The environment's allow-list holds with --sandbox off too, so the key attacks find nothing there either.
REAL_WITHOUT = sorted(set(zoo.ATTACKS) - {"key_from_env", "key_from_memory"})


@pytest.mark.parametrize("name", REAL_WITHOUT)
def test_each_attack_gets_through_without_the_sandbox(world, name, tmp_path, monkeypatch):
    """The zoo's attacks are real: with --sandbox off each one gets through (a private build cache,
    since one of them poisons it)."""
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "private-cache"))
    if name == "daemon":  # the fork server kills what its children leave (test below): a child spawned afresh
        monkeypatch.setenv("KERNELWRIGHT_FORKSERVER", "0")
    verdict, text, changed = zoo.judge_attack(world, name, mode="off")
    assert "BREACH" in text or changed, (verdict.status, verdict.log)


NOTE = r"""
import ctypes, os, threading, time
import torch.nn as nn

def note(what):
    with open(@record!r@, "a") as f:
        f.write(f"{what} {os.getpid()}\n")

def orphan_with_child():  # a process in a session of its own with a child in another
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.setsid()
            note("grandchild")
            time.sleep(120)
            os._exit(0)
        note("orphan")
        time.sleep(120)
        os._exit(0)
"""
HIDERS = NOTE + r"""

def hide_main_thread():  # the main thread exits, another runs on: /proc reads the process as a zombie
    threading.Thread(target=time.sleep, args=(120,)).start()
    note("hidden")
    ctypes.CDLL(None).syscall(60, 0)

a = os.fork()
if a == 0:  # its children become orphans when it exits, all at once
    os.setsid()
    if os.fork() == 0:
        hide_main_thread()
    orphan_with_child()
    time.sleep(0.5)
    os._exit(0)
os.waitpid(a, 0)
time.sleep(0.5)


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp(min=0)
"""


# The candidate's child keeps its own child in a session of its own, and the candidate then dies:
# both generations are handed to the fork server at once, the second only when the first is killed.
GENERATIONS = NOTE + r"""

orphan_with_child()
time.sleep(0.5)


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(3)
"""


def _running(pid: int) -> bool:
    """Whether any thread of `pid` runs (a process whose main thread exited has others)."""
    try:
        states = [Path(f"/proc/{pid}/task/{t}/stat").read_text().rsplit(")", 1)[1].split()[0] for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, IndexError):
        return False
    return any(s not in ("Z", "X") for s in states)


@pytest.mark.parametrize("text, status, expected", [(HIDERS, "correct", {"orphan", "grandchild", "hidden"}),
                                                   (GENERATIONS, "runtime_error", {"orphan", "grandchild"})], ids=["hiders", "generations"])
def test_the_fork_server_kills_orphans_of_orphans_and_hidden_main_threads(world, text, status, expected):
    """What a sweep must find: an orphan's own child in a session of its own (handed to the fork
    server only when the orphan dies: a sweep goes round again) and a process whose main thread
    exited while another runs (it reads as a zombie). Judged with --sandbox off (no uid of its
    own), through the fork server."""
    from kernelwright.judge import forkpool

    if forkpool.server() is None:
        pytest.skip("no fork server here")
    record = world.root / "hiders.txt"
    folder = world.root / "hiders"
    folder.mkdir()
    (folder / "model_new.py").write_text(text.replace("@record!r@", repr(str(record))))
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(sandbox="off"), device="cpu")
    assert verdict.status.value == status, verdict.log
    noted = dict(line.split() for line in record.read_text().splitlines())
    assert set(noted) == expected, noted
    left = {what: pid for what, pid in noted.items() if _running(int(pid))}
    for pid in left.values():
        os.kill(int(pid), 9)
    assert not left, f"still running after the verdict: {left}"


def test_the_fork_server_kills_a_daemon_where_no_uid_of_its_own_does(world):
    """Without the uid layer (a judge that is not root, or --sandbox off) nothing kills a process
    that a candidate started in a session of its own by its uid; the fork server, the subreaper of
    its children's orphans, kills it before the judge hears the child's exit."""
    from kernelwright.judge import forkpool

    if forkpool.server() is None:
        pytest.skip("no fork server here")
    verdict, text, changed = zoo.judge_attack(world, "daemon", mode="off")
    assert verdict.status.value == "correct", verdict.log
    assert not changed, changed


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_a_log_swapped_for_a_link_is_not_followed(world, mode):
    """The judge reads a child's log through the descriptor it opened, never the path the child
    can replace: the secret behind the link stays out of the verdict."""
    folder = world.root / f"log_link_{mode}"
    folder.mkdir()
    (folder / "model_new.py").write_text(zoo.fill(zoo.LOG_LINK, world.values))
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(sandbox=mode), device="cpu")
    assert verdict.status.value == "runtime_error" and "crashed on purpose" in verdict.log, verdict.log
    assert zoo.SECRET.replace("-", "_") not in verdict.to_json()


@pytest.mark.parametrize("name", ["key_from_env", "key_from_memory"])
def test_the_key_attacks_find_a_key_that_is_there(world, name, monkeypatch):
    """Positive control for the key attacks: with the allow-list bypassed and no sandbox, the
    child's environment holds the key, and each attack finds it."""
    monkeypatch.setattr(sandbox, "clean_env", lambda env: {k: v for k, v in env.items() if k not in sandbox.DENIED_NAMES})
    verdict, text, _ = zoo.judge_attack(world, name, mode="off")
    assert verdict.status.value == "runtime_error" and "BREACH" in verdict.log, verdict.log


def test_without_the_sandbox_the_verdict_says_so(world):
    """The zoo's attacks are real: with --sandbox off (the environment's allow-list only) writing
    outside the folder and the store succeed, and the verdict says it was judged without one."""
    folder = world.root / "unconfined"
    folder.mkdir()
    (folder / "model_new.py").write_text(zoo.candidate("write_outside", **world.values))
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(sandbox="off"), device="cpu")
    assert verdict.status.value == "runtime_error" and "BREACH" in verdict.log, verdict.log
    assert verdict.sandbox == {"mode": "off", "layers": ["env"], "full": False, "missing": ["every layer but env: judged without the sandbox"]}
    for path in (world.outside, Path(f"/tmp/kw-zoo-outside-{world.tag}"), Path(f"/dev/shm/kw-zoo-outside-{world.tag}")):
        path.unlink(missing_ok=True)
    key = world.root / "key_env"
    key.mkdir()
    (key / "model_new.py").write_text(zoo.candidate("key_from_env", **world.values))
    verdict = evaluate(PROBLEMS / "relu.py", key, zoo_policy(sandbox="off"), device="cpu")
    assert verdict.status.value == "correct", verdict.log  # the environment's allow-list holds even then


@pytest.mark.parametrize("mode", ["auto", "strict", "off"])
def test_the_honest_control_is_correct_in_every_mode(mode):
    verdict = evaluate(PROBLEMS / "relu.py", CANDIDATES / "relu_correct", zoo_policy(sandbox=mode), device="cpu")
    if mode == "strict" and not FULL:
        assert verdict.status.value == "infra_error" and "--sandbox strict" in verdict.log
        return
    assert verdict.status.value == "correct", verdict.log
    assert verdict.sandbox["mode"] == mode


def test_strict_refuses_where_the_full_sandbox_is_missing(monkeypatch):
    monkeypatch.setattr(sandbox, "support", lambda: sandbox.Support(uid=False, landlock=0, seccomp=True, why=("no landlock",)))
    verdict = evaluate(PROBLEMS / "relu.py", CANDIDATES / "relu_correct", zoo_policy(sandbox="strict"), device="cpu")
    assert verdict.status.value == "infra_error"
    assert "landlock (filesystem)" in verdict.log


def test_the_environment_allow_list():
    env = {"PATH": "/bin", "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "HF_TOKEN": "t", "AWS_SECRET_ACCESS_KEY": "s",
           "KERNELWRIGHT_STORE": "/s", "KERNELWRIGHT_SERVICE_TOKEN": "t", "KERNELWRIGHT_CACHE": "/c", "CUDA_VISIBLE_DEVICES": "0",
           "GITHUB_TOKEN": "t", "MY_PASSWORD": "p", "HOME": "/root", "SSH_AUTH_SOCK": "/s", "PYTHONPATH": "src", "TORCH_LOGS": "x",
           "CUDA_API_KEY": "k", "LD_LIBRARY_PATH": "/l"}
    assert sandbox.clean_env(env) == {"PATH": "/bin", "KERNELWRIGHT_CACHE": "/c", "CUDA_VISIBLE_DEVICES": "0", "PYTHONPATH": "src",
                                      "TORCH_LOGS": "x", "LD_LIBRARY_PATH": "/l"}


def test_the_seccomp_program_covers_every_machine():
    for arch in ("x86_64", "aarch64"):
        prog = confine.seccomp_program(arch)
        socket_rule = 4  # the call, its family loaded, refused, allowed
        assert len(prog) % 8 == 0 and len(prog) // 8 == 4 + (2 if arch == "x86_64" else 0) + socket_rule + 2 * (len(confine.DENIED) - 1) + 2 + 5 + 1
        assert len(confine.seccomp_program(arch, families=(1, 16))) // 8 == len(prog) // 8 + 2
    with pytest.raises(OSError):
        confine.seccomp_program("riscv64")


@needs_full
def test_the_build_cache_refuses_an_entry_that_fails_its_digest(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    spec = build.spec_from_text('extern "C" int one() { return 1; }', lang="cpp", name="one")
    first = build.build(spec)
    assert first.ok and not first.cached
    assert build.build(spec).cached
    first.lib_path.write_bytes(b"poisoned")  # as a candidate that could write the cache would
    again = build.build(spec)
    assert again.ok and not again.cached and build.file_digest(again.lib_path) == json.loads((again.lib_path.parent / "meta.json").read_text())["sha256"]


@needs_full
def test_a_confined_command_writes_only_its_folder(open_tmp_path):
    """The launcher that compilers, compute-sanitizer and ncu start through: its own folder is
    writable, the rest is not, and the network is refused."""
    import subprocess

    own = open_tmp_path / "own"
    own.mkdir()
    os.chmod(open_tmp_path, 0o777)  # writable by every uid: only Landlock refuses the write outside `own`
    spec = sandbox.spec_for("auto")
    script = f"echo ok > {own}/in.txt; echo x > {open_tmp_path}/out.txt; id -u"
    done = subprocess.run(sandbox.command(spec, ["sh", "-c", script], own), cwd=own, capture_output=True, text=True, timeout=60)
    assert (own / "in.txt").read_text() == "ok\n"
    assert not (open_tmp_path / "out.txt").exists() and "Permission denied" in done.stderr
    assert int(done.stdout.split()[-1]) >= sandbox.UID_BASE


def test_the_judges_working_folder_is_not_readable_by_confined_commands(tmp_path, monkeypatch):
    """`python -m` and `-c` put the working folder first on sys.path, a script its own folder: the
    user's project, with its `.env`. Confined compilers and tools get no read rule for them (a
    `#include` of the file printed its line into the verdict's log before)."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    spec = sandbox.spec_for("auto")
    rules = sandbox.read_rules(spec)
    assert str(project) not in rules
    assert str(Path(sandbox.__file__).resolve().parents[2]) in rules  # the package's own root stays


@pytest.mark.skipif(not sandbox.support().landlock, reason="Landlock is what refuses the read here; this machine has none")
def test_a_confined_command_cannot_read_the_judges_working_folder(open_dir, monkeypatch):
    project = open_dir / "project"
    project.mkdir()
    os.chmod(project, 0o755)
    secret = project / ".env"
    secret.write_text("KEY=not-for-the-candidate\n")
    os.chmod(secret, 0o644)  # permission bits would let any uid read it: only the rules may refuse
    own = open_dir / "own"
    own.mkdir()
    os.chmod(own, 0o777)
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    import subprocess

    done = subprocess.run(sandbox.command(sandbox.spec_for("auto"), ["cat", str(secret)], own), cwd=own, capture_output=True, text=True,
                          timeout=60)
    assert "not-for-the-candidate" not in done.stdout and "Permission denied" in done.stderr


def _as_non_root(monkeypatch):
    """This machine's layers but the uid: what a judge that is not root gets."""
    import dataclasses

    real = sandbox.support()
    monkeypatch.setattr(sandbox, "support", lambda: dataclasses.replace(real, uid=False))


def _assert_gone(pid):
    import time

    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return  # killed; its reaper (init) gets to it in its own time
        except (OSError, IndexError):
            return
        time.sleep(0.02)
    raise AssertionError(f"the tool's process {pid} outlived it")


@pytest.mark.parametrize("timeout_s", [30.0, 1.0])
def test_a_tool_leaves_nothing_running_where_no_uid_of_its_own_marks_its_processes(tmp_path, monkeypatch, timeout_s):
    """A judge that is not root has no uid to sweep a tool's leftovers by: the launcher stays as the
    subreaper of what it starts and kills it when the tool exits or times out, a process in a
    session of its own included (before, it outlived the verdict)."""
    _as_non_root(monkeypatch)
    assert "uid" not in sandbox.spec_for("auto").layers
    script = "setsid sleep 300 & echo leftover $!; " + ("sleep 5" if timeout_s < 5 else "true")
    timed_out, printed = sandbox.run_tool(["/bin/sh", "-c", script], mode="auto", cwd=tmp_path, output=tmp_path / "out.txt",
                                          timeout_s=timeout_s, env=dict(os.environ))
    assert timed_out is (timeout_s < 5)
    _assert_gone(int(printed.split("leftover")[1].split()[0]))


@pytest.mark.parametrize("ends", ["times out", "exits"])
@pytest.mark.parametrize("layers", ["own uid", "no uid", "off"])
def test_a_compiler_leaves_nothing_running_and_the_build_waits_for_nothing(open_tmp_path, monkeypatch, layers, ends):
    """A process a compiler moved to a session of its own, holding the build's output: without the
    uid layer the launcher's group was killed outright at the timeout and never swept; with it, the
    uid's sweep came only after the output pipe's end, so the build waited as long as that process
    lived, and a compiler that exited at once was reported as timed out; with --sandbox off the build
    waited for it without limit. The output now goes to a file."""
    import signal
    import time

    from kernelwright.judge import build

    if layers == "own uid" and "uid" not in sandbox.spec_for("auto").layers:
        pytest.skip("no uid layer here (the judge is not root)")
    if layers == "no uid":
        _as_non_root(monkeypatch)
    script = "setsid sleep 300 & echo leftover $!; " + ("sleep 30" if ends == "times out" else "exit 0")
    t0 = time.monotonic()
    code, out, timed_out = build._run_group(["/bin/sh", "-c", script], open_tmp_path, timeout_s=3.0, sandbox_mode="off" if layers == "off" else "auto")
    took = time.monotonic() - t0
    leftover = int(out.split("leftover")[1].split()[0])
    if layers == "off":  # nothing confines it, nothing sweeps: only the wait is the build's business
        os.kill(leftover, signal.SIGKILL)
    else:
        _assert_gone(leftover)
    assert (timed_out, code) == ((True, None) if ends == "times out" else (False, 0)), (code, out)
    assert took < (3.0 + confine.SWEEP_S + 5 if ends == "times out" else 2.5), took


def test_the_sweeping_launcher_passes_its_commands_exit_status_on(tmp_path, monkeypatch):
    # a compiler's status is the build's verdict: the launcher that stays as the subreaper must hand it on
    import subprocess

    _as_non_root(monkeypatch)
    spec = sandbox.spec_for("auto")
    for script, code in (("exit 3", 3), ("true", 0), ("kill -9 $$", 128 + 9)):
        done = subprocess.run(sandbox.command(spec, ["/bin/sh", "-c", script], tmp_path), cwd=tmp_path, timeout=60)
        assert done.returncode == code, script
    # and the launcher did stay, as the tool's parent
    done = subprocess.run(sandbox.command(spec, ["/bin/sh", "-c", "tr '\\0' ' ' < /proc/$PPID/cmdline"], tmp_path), cwd=tmp_path,
                          timeout=60, capture_output=True, text=True)
    assert "confine.py exec" in done.stdout, done.stdout


@pytest.mark.skipif(sandbox.support().landlock < 6, reason="Landlock's signal scope (ABI 6) is what keeps the tool from killing its launcher")
def test_a_tool_cannot_kill_the_launcher_that_sweeps_after_it(tmp_path, monkeypatch):
    _as_non_root(monkeypatch)
    script = "setsid sleep 300 & echo leftover $!; kill -9 $PPID; echo killed $?"
    _, printed = sandbox.run_tool(["/bin/sh", "-c", script], mode="auto", cwd=tmp_path, output=tmp_path / "out.txt", timeout_s=30,
                                  env=dict(os.environ))
    assert "killed 0" not in printed, printed
    _assert_gone(int(printed.split("leftover")[1].split()[0]))


def test_the_sweeping_launcher_says_when_its_command_cannot_start(tmp_path, monkeypatch):
    import subprocess

    _as_non_root(monkeypatch)
    done = subprocess.run(sandbox.command(sandbox.spec_for("auto"), ["/no/such/tool"], tmp_path), cwd=tmp_path, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 126 and "could not start /no/such/tool" in done.stderr


_CONNECT = "import socket, sys, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.connect(sys.argv[1]); time.sleep(float(sys.argv[2]))"
# A confined peer must reach the socket through folders its uid may enter: under root without
# Landlock the sandbox's uid has no CAP_DAC_READ_SEARCH, and pytest's folders are root's (0700).
PEERS = pytest.mark.skipif(sandbox.support().layers("auto") == ("env", "limits") or (os.getuid() == 0 and not sandbox.support().landlock),
                           reason="no layer here a peer is told by, or a root judge without Landlock (its uid cannot enter the test's folders)")
REASONS = ("sandbox's", "no_new_privs", "seccomp filters", "seccomp mode")


@pytest.fixture()
def open_dir():
    """A short folder in /tmp that anyone may enter (a unix socket's path has at most 107 bytes)."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="kw-peer-", dir="/tmp" if os.path.isdir("/tmp") else None)
    os.chmod(d, 0o777)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def _open_listener(folder):
    """A unix socket that permission bits let anyone reach (as a judge's 0600 socket lets its own
    uid's candidates, where the judge is not root)."""
    import socket

    path = str(folder / "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(4)
    listener.settimeout(60)
    return listener, path


@PEERS
def test_the_judges_sockets_refuse_a_sandboxed_peer(open_dir):
    """sandbox_check.confined_peer, which the shared fork server and the service ask of every connection:
    a process confined by the launcher is refused, the same command unconfined is let in, and a
    peer that is gone before it is seen is refused, reaped or not."""
    import socket
    import subprocess
    import sys
    import time

    listener, path = _open_listener(open_dir)
    own = open_dir / "own"
    own.mkdir()
    confined = subprocess.Popen(sandbox.command(sandbox.spec_for("auto"), [sys.executable, "-c", _CONNECT, path, "5"], own), cwd=own)
    conn, _ = listener.accept()
    why = sandbox_check.confined_peer(conn)
    assert why and any(r in why for r in REASONS), why
    conn.close()
    confined.kill()
    confined.wait()
    plain = subprocess.Popen([sys.executable, "-c", _CONNECT, path, "5"])
    conn, _ = listener.accept()
    assert sandbox_check.confined_peer(conn) == ""
    conn.close()
    plain.kill()
    plain.wait()
    gone = subprocess.run([sys.executable, "-c", _CONNECT, path, "0"], timeout=60)
    assert gone.returncode == 0
    conn, _ = listener.accept()
    assert sandbox_check.confined_peer(conn), "a peer that exited and was reaped passed for a live one"
    conn.close()
    pid = os.fork()
    if pid == 0:  # a peer that exits and stays a zombie (its pid not yet free)
        try:
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(path)
        finally:
            os._exit(0)
    conn, _ = listener.accept()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sandbox_check.observed(pid) and not open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
        time.sleep(0.01)
    try:
        assert sandbox_check.confined_peer(conn), "a peer that exited (a zombie) passed for a live one"
    finally:
        os.waitpid(pid, 0)
        conn.close()
        listener.close()


@PEERS
def test_the_shared_fork_server_says_no_hello_to_a_sandboxed_peer(open_dir):
    """The session's shared fork server (conftest), its folder and socket opened up for the test as
    a judge that is not root leaves them to its candidates: a confined process gets a refusal, not
    the hello (and so cannot ask for a child), the same command unconfined gets it, and the
    server's log says why."""
    import subprocess
    import sys

    path = os.environ.get("KERNELWRIGHT_FORKSERVER_SOCKET")
    if not path or not os.path.exists(path):
        pytest.skip("the session's shared fork server is not up")
    hello = ("import socket, sys\ns = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\ns.settimeout(20)\ns.connect(sys.argv[1])\n"
             "print(s.recv(65536)[:300].decode(errors='replace'))")
    own = open_dir / "own"
    own.mkdir()
    folder = os.path.dirname(path)
    modes = (os.stat(folder).st_mode & 0o777, os.stat(path).st_mode & 0o777)
    try:
        os.chmod(folder, 0o711)
        os.chmod(path, 0o777)
        confined = subprocess.run(sandbox.command(sandbox.spec_for("auto"), [sys.executable, "-c", hello, path], own), cwd=own,
                                  capture_output=True, text=True, timeout=60)
        plain = subprocess.run([sys.executable, "-c", hello, path], capture_output=True, text=True, timeout=60)
    finally:
        os.chmod(folder, modes[0])
        os.chmod(path, modes[1])
    assert '"ready": false' in confined.stdout and "serves no sandboxed process" in confined.stdout, (confined.stdout, confined.stderr)
    assert '"ready": true' in plain.stdout, (plain.stdout, plain.stderr)
    assert "refused a connection from a sandboxed process" in Path(folder, "log").read_text(errors="replace")


@PEERS
def test_the_service_does_not_answer_a_sandboxed_peer(open_dir):
    """`kernelwright serve` on a unix socket opened up as a judge that is not root leaves it to its
    candidates: a confined process gets 403 and the reason (it could have asked for --sandbox off),
    the same request unconfined gets its answer."""
    import subprocess
    import sys
    import threading

    from kernelwright.client.service import JudgeService, make_server

    svc = JudgeService(workers=1, root=open_dir)
    server, url = make_server(svc, socket_path=open_dir / "svc" / "j.sock")
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    path = url.removeprefix("unix://")
    # with "first" the request is sent at once, else only what the server says is read (a refused
    # peer's request may meet a closed socket); HTTP/1.0: the server closes after its answer
    ask = ("import socket, sys\ns = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\ns.settimeout(20)\ns.connect(sys.argv[1])\n"
           "got = b''\ntry:\n    if sys.argv[2:] == ['first']:\n        s.sendall(b'GET /v1/health HTTP/1.0\\r\\n\\r\\n')\n    while True:\n        chunk = s.recv(4096)\n"
           "        if not chunk:\n            break\n        got += chunk\nexcept OSError as exc:\n    got += f'[{type(exc).__name__}]'.encode()\n"
           "print(got.decode(errors='replace'))")
    own = open_dir / "own"
    own.mkdir()
    try:
        os.chmod(os.path.dirname(path), 0o711)
        os.chmod(path, 0o777)
        confined = subprocess.run(sandbox.command(sandbox.spec_for("auto"), [sys.executable, "-c", ask, path], own), cwd=own,
                                  capture_output=True, text=True, timeout=60)
        hasty = subprocess.run(sandbox.command(sandbox.spec_for("auto"), [sys.executable, "-c", ask, path, "first"], own), cwd=own,
                               capture_output=True, text=True, timeout=60)
        plain = subprocess.run([sys.executable, "-c", ask, path, "first"], capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
        svc.close()
    assert " 403 " in confined.stdout and "serves no sandboxed process" in confined.stdout, (confined.stdout, confined.stderr)
    assert " 200 " not in hasty.stdout and ('"ok"' not in hasty.stdout), (hasty.stdout, hasty.stderr)
    assert " 200 " in plain.stdout and '"ok": true' in plain.stdout, (plain.stdout, plain.stderr)


def test_a_cpu_candidate_opens_no_socket_at_all(world):
    """On the CPU backend a candidate gets no socket family (only the CUDA driver needs a unix
    one), so no unix socket of the user's is in reach even where the judge is not root."""
    spec = sandbox.for_candidate("auto", "/nonexistent", device="cpu")
    assert spec.sockets == () and sandbox.Spec.from_env(spec.to_env()).sockets == ()
    assert sandbox.for_candidate("auto", "/nonexistent", device="cuda").sockets is None
    if not sandbox.support().seccomp:
        return
    folder = world.root / "unix_socket"
    folder.mkdir()
    (folder / "model_new.py").write_text(zoo.fill(zoo.PRELUDE, {"prefix": zoo.PREFIX, "digest": zoo.DIGEST, "length": len(zoo.SECRET)})
                                         + zoo.UNIX_SOCKET + zoo.HONEST)
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(), device="cpu")
    assert verdict.status.value == "correct", verdict.log
    off = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(sandbox="off"), device="cpu")
    assert "BREACH" in off.log, off.log


def test_a_tool_that_swaps_its_output_for_a_link_shows_nothing_behind_it(tmp_path, open_tmp_path):
    """compute-sanitizer's and ncu's output is read through the judge's own descriptor, and the
    reports they write never through a link or from a FIFO (the confined side may leave either)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the judge's secret\n")
    box = open_tmp_path / "box"
    box.mkdir()
    script = f"echo printed; rm -f output.txt; ln -s {secret} output.txt; ln -s {secret} report.txt; mkfifo fifo.txt"
    timed_out, printed = sandbox.run_tool(["sh", "-c", script], mode="auto", cwd=box, output=box / "output.txt", timeout_s=60, env=os.environ)
    assert not timed_out and printed == "printed\n"
    assert sandbox.read_regular(box / "report.txt") == "" and sandbox.read_regular(box / "fifo.txt") == ""
    assert sandbox.read_regular(secret) == "the judge's secret\n"


@pytest.mark.parametrize("mode, confined", [("auto", True), ("off", False)])
def test_a_confined_tool_builds_the_kernels_it_needs_in_its_own_folder(open_tmp_path, mode, confined):
    """The shared build cache is read-only to a confined tool (ncu, compute-sanitizer): a kernel the
    candidate's import must build goes to the tool's own folder (runtime.build.private_root). Before,
    a kernel not yet in the cache stopped ncu's forward with a PermissionError on the cache's lock
    (an H100 run of the agent's profile test)."""
    box = open_tmp_path / "box"
    box.mkdir()
    code = ("from kernelwright.runtime import build; r = build.private_root(); print(build.confined(), r)\n"
            "if r is not None: r.mkdir(parents=True, exist_ok=True); (r / 'lib.so').write_text('x'); print('writable')")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    timed_out, printed = sandbox.run_tool([sys.executable, "-c", code], mode=mode, cwd=box, output=box / "o.txt", timeout_s=120, env=env,
                                          read=[Path(__file__).resolve().parents[1] / "src"])
    assert not timed_out
    words = printed.split()
    if confined:  # inside the tool's own folder (the sandbox's private temporary folder there), and writable
        assert words[0] == "True" and Path(words[1]).is_relative_to(box) and words[2] == "writable", printed
    else:
        assert words == ["False", "None"], printed


def test_chown_tree_never_changes_what_a_link_points_at(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("x")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "own").write_text("y")
    (tree / "link_dir").symlink_to(outside)
    (tree / "sub" / "link_file").symlink_to(outside / "file")
    before = {p: p.stat().st_uid for p in (outside, outside / "file")}
    uid = sandbox.UID_BASE + 4242
    confine.chown_tree(str(tree), uid)
    assert (tree / "sub" / "own").stat().st_uid == uid and tree.stat().st_uid == uid
    assert {p: p.stat().st_uid for p in before} == before
    with pytest.raises(OSError):
        confine.chown_tree(str(tree / "link_dir"), uid)  # the top itself a link: refused


@needs_full
@pytest.mark.parametrize("name", ["write_outside", "signal_judge"])
def test_a_child_spawned_afresh_is_confined_before_torch_starts_threads(world, name, monkeypatch):
    """Without the fork server a candidate child enters the sandbox before importing torch (its
    threads would escape layers that bind one thread): the attack is contained there too."""
    monkeypatch.setenv("KERNELWRIGHT_FORKSERVER", "0")
    verdict, text, changed = zoo.judge_attack(world, name)
    assert verdict.workers["children"] == "spawned" and verdict.sandbox["full"], (verdict.workers, verdict.sandbox)
    assert verdict.status.value == "correct", verdict.log
    assert "BREACH" not in text and not changed, changed


HOLDER = """
import ctypes, os, time
import torch.nn as nn
if os.fork() == 0:  # inherits the child's end of the result channel and sleeps on it, named for the test to find
    ctypes.CDLL(None).prctl(15, b"@name@", 0, 0, 0)
    time.sleep(120)
    os._exit(0)


class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(3)
"""


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_a_process_left_holding_the_channel_does_not_hold_up_the_verdict(tmp_path, mode):
    """A candidate that forks a process and then dies: the judge sees its child exit and answers at
    once, not when the process it left (which holds the channel open) ends or the command times out."""
    import time

    import random

    name = f"kwhold{random.randrange(10**8, 10**9)}"
    folder = tmp_path / "holder"
    folder.mkdir()
    (folder / "model_new.py").write_text(HOLDER.replace("@name@", name))
    t0 = time.monotonic()
    verdict = evaluate(PROBLEMS / "relu.py", folder, zoo_policy(sandbox=mode), device="cpu")
    assert verdict.status.value == "runtime_error", verdict.log
    assert time.monotonic() - t0 < 60, f"the verdict waited {time.monotonic() - t0:.0f} s for a process the candidate left"
    running = []  # and it is gone, not dying, when the verdict is out
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if comm == name[:15] and state not in ("Z", "X"):
            running.append(pid)
            os.kill(int(pid), 9)
    assert not running, f"the process the candidate left still runs after its verdict: {running}"


def test_the_judges_user_name_reaches_its_children():
    """A judge under a uid no account has (a container's --user) knows its name only from USER and
    LOGNAME: dropped, every child's getpass.getuser() raised KeyError (torch before 2.13 calls it)."""
    kept = sandbox.clean_env({"USER": "someone", "LOGNAME": "someone", "API_KEY": "x"})
    assert kept == {"USER": "someone", "LOGNAME": "someone"}


def test_a_compiler_that_exits_leaves_nothing_in_its_group(tmp_path):
    """With the output in a file, nothing held the wait open any more, and what the compiler left in
    its own group ran on after it exited; its group is killed after it, as a tool's is."""
    from kernelwright.runtime import toolchain

    code, out, timed_out = toolchain.run_group(["/bin/sh", "-c", "sleep 300 & echo leftover $!; exit 0"], tmp_path, 30)
    assert (code, timed_out) == (0, False), out
    _assert_gone(int(out.split("leftover")[1].split()[0]))


def test_a_compiler_that_floods_its_output_is_killed_and_its_log_keeps_both_ends(tmp_path, monkeypatch):
    """The output file is the judge's, outside the sandbox's disk quota: past OUTPUT_CAP the command
    is killed; what is kept is the first and the last part, with the size of the cut between."""
    import time

    from kernelwright.runtime import toolchain

    monkeypatch.setattr(toolchain, "OUTPUT_CAP", 1 << 20)
    monkeypatch.setattr(toolchain, "OUTPUT_LIMIT", 1 << 16)
    t0 = time.monotonic()
    code, out, timed_out = toolchain.run_group(["/bin/sh", "-c", "echo FIRST; yes filler | head -c 3000000; echo LAST; sleep 60"], tmp_path, 60)
    assert time.monotonic() - t0 < 20 and code is None and not timed_out, out[-300:]
    assert out.startswith("FIRST") and "LAST" in out and "bytes of output cut]" in out and "more than 1 MiB of output; killed" in out
    assert len(out) < 3 * (1 << 16)


@needs_uid
def test_a_box_whose_ancestors_close_it_to_its_uid_is_refused_as_the_hosts_fault():
    """access(2), which compilers ask of TMPDIR, counts no capability: a box below a 0700 folder is
    no TMPDIR to its uid, and enter refuses it (HostFault, naming the folder) before it confines
    anything (enter opens only the box's own parent); the same box below open folders is entered."""
    import shutil
    import subprocess
    import tempfile

    code = ("import sys\nfrom kernelwright.judge import host_folders, sandbox\n"
            "try:\n    sandbox.enter(sandbox.spec_for('auto'), sys.argv[1])\n"
            "except host_folders.HostFault as exc:\n    print('refused:', exc)\nelse:\n    print('entered')\n")
    said = {}
    for mode in (0o700, 0o711):
        top = Path(tempfile.mkdtemp(prefix="kw-box-above-", dir="/tmp"))  # every uid traverses /tmp (pytest's own folders are 0700)
        try:
            (top / "parent").mkdir()
            top.chmod(mode)
            done = subprocess.run([sys.executable, "-c", code, str(top / "parent")], capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
        finally:
            shutil.rmtree(top, ignore_errors=True)
        said[mode] = (top, done.stdout.strip())
        assert done.returncode == 0, done.stderr
    assert said[0o711][1] == "entered"
    top, text = said[0o700]
    assert text.startswith("refused:") and f"below {top}, which a sandboxed uid cannot traverse" in text


def test_closed_above_names_every_folder_above_that_others_cannot_traverse(open_tmp_path):
    """The `other` bits decide for a uid of no account: o+x missing anywhere above closes the path,
    each such folder is named, topmost first; the path's own folder does not count."""
    a = open_tmp_path / "a"
    (a / "b" / "c").mkdir(parents=True)
    for folder in (a, a / "b", a / "b" / "c"):
        folder.chmod(0o755)
    assert host_folders.closed_above(a / "b" / "c" / "x") == []
    (a / "b" / "c").chmod(0o700)  # the path's own folder: the launcher makes it the uid's
    assert host_folders.closed_above(a / "b" / "c") == []
    assert host_folders.closed_above(a / "b" / "c" / "x") == [str(a / "b" / "c")]
    (a / "b").chmod(0o750)  # the group's bits do not count: the uid is in no group
    a.chmod(0o744)  # nor does reading: only searching lets it through
    assert host_folders.closed_above(a / "b" / "c" / "x") == [str(a), str(a / "b"), str(a / "b" / "c")]
    a.chmod(0o755)
    (a / "b").chmod(0o755)
    (a / "b" / "c").chmod(0o755)
    assert host_folders.closed_above("/") == []


def test_closed_above_walks_links_as_the_kernel_does(open_tmp_path):
    """A closed folder on the way is found wherever a link leads through it: on the path as
    written, as resolved, in the middle of a chain, behind a relative target, and after a `..`
    that follows a link (the physical parent, never the lexical one)."""
    root = open_tmp_path
    for folder in ("open/real", "x", "shut/sub/w", "shut2"):
        (root / folder).mkdir(parents=True)
    (root / "shut" / "l2").symlink_to(root / "open" / "real")  # inside a closed folder
    (root / "x" / "l1").symlink_to(root / "shut" / "l2")  # a chain through it: written and resolved paths both miss it
    (root / "x" / "rel").symlink_to("../shut/l2")
    (root / "x" / "into").symlink_to(root / "shut2" / "inner")  # resolved: the closed folder is on the resolved path only
    (root / "shut2" / "inner").mkdir()
    (root / "x" / "sub").symlink_to(root / "shut" / "sub")
    (root / "shut" / "l2-written").symlink_to(root / "open")  # written: the closed folder is on the written path only
    (root / "shut").chmod(0o700)
    (root / "shut2").chmod(0o700)
    shut, shut2 = str(root / "shut"), str(root / "shut2")
    assert host_folders.closed_above(root / "open" / "real" / "f") == []
    assert host_folders.closed_above(root / "x" / "l1" / "f") == [shut]
    assert host_folders.closed_above(root / "x" / "rel" / "f") == [shut]
    assert host_folders.closed_above(root / "x" / "into" / "f") == [shut2]
    assert host_folders.closed_above(root / "shut" / "l2-written" / "real" / "f") == [shut]
    assert host_folders.closed_above(root / "x" / "sub" / ".." / "sub" / "w" / "f") == [shut]  # `..` from shut/sub is shut
    (root / "shut").chmod(0o711)
    (root / "shut2").chmod(0o711)
    assert host_folders.closed_above(root / "x" / "l1" / "f") == host_folders.closed_above(root / "x" / "into" / "f") == []


@needs_uid
def test_a_candidate_childs_config_is_refused_below_a_closed_folder(open_tmp_path):
    """The judge's own look comes with the config of every candidate child (the evaluation's, the
    torch-extension build child's, the agent's compile tool's): refused below a closed folder,
    given below open ones."""
    from kernelwright.judge import extension

    (open_tmp_path / "shut" / "work").mkdir(parents=True)
    (open_tmp_path / "shut").chmod(0o700)
    with pytest.raises(host_folders.HostFault, match=f"below {open_tmp_path / 'shut'}, which a sandboxed uid cannot traverse"):
        extension.candidate_config("auto", "cpu", 0, open_tmp_path / "shut" / "work", ())
    (open_tmp_path / "shut").chmod(0o711)
    config, spec = extension.candidate_config("auto", "cpu", 0, open_tmp_path / "shut" / "work", ())
    assert "uid" in spec.layers and config.workdir == open_tmp_path / "shut" / "work"


@needs_uid
def test_a_confined_command_below_a_closed_folder_is_refused_before_it_starts():
    """The launcher's working folder is its TMPDIR (compilers, compute-sanitizer, ncu): below a
    folder closed to its uid the judge refuses to start it, where an open one starts it."""
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="kw-tool-above-", dir="/tmp"))
    try:
        (top / "work").mkdir()
        spec = sandbox.spec_for("auto")
        top.chmod(0o700)
        with pytest.raises(host_folders.HostFault, match=f"below {top}, which a sandboxed uid cannot traverse"):
            sandbox.command(spec, ["true"], top / "work")
        top.chmod(0o711)
        assert sandbox.command(spec, ["true"], top / "work")[-1] == "true"
    finally:
        shutil.rmtree(top, ignore_errors=True)


TORCH_RELU = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


@needs_uid
@pytest.mark.parametrize(("problem", "candidate", "children"), [
    ("rowsum", "rowsum_correct", "forked"),  # its raw build refused: no compiler starts
    ("relu", "", "forked"),  # no build: the judge refuses to fork the candidate child
    ("relu", "", "spawned"),  # no build: the judge refuses to spawn it (it would enter its box before serving)
])
def test_a_tmpdir_closed_to_the_sandbox_is_the_hosts_fault_never_the_candidates(problem, candidate, children, open_tmp_path, monkeypatch):
    """A host whose TMPDIR sits below a folder closed to the sandbox's uids (a 0700 /tmp): the raw
    build (a compiler would fall back to /tmp, which Landlock refuses) and the candidate child (its
    box) are refused before they start, and the verdict is `infra_error`, which a trainer retries,
    never the candidate's compile_error or runtime_error. The same candidate is correct once the
    folder is open."""
    import shutil
    import tempfile

    from kernelwright.judge import evaluate as evaluate_module

    if not candidate:
        (open_tmp_path / "torch_relu").mkdir()
        (open_tmp_path / "torch_relu" / "model_new.py").write_text(TORCH_RELU)
    if children == "spawned":
        monkeypatch.setenv("KERNELWRIGHT_FORKSERVER", "0")
    top = Path(tempfile.mkdtemp(prefix="kw-tmpdir-above-", dir="/tmp"))
    try:
        (top / "tmp").mkdir()
        monkeypatch.setenv("TMPDIR", str(top / "tmp"))
        monkeypatch.setattr(tempfile, "tempdir", str(top / "tmp"))
        monkeypatch.setattr(evaluate_module, "SHM_MIN_FREE", 1 << 62)  # the evaluation's folder in TMPDIR too, never /dev/shm
        monkeypatch.setenv("KERNELWRIGHT_CACHE", str(open_tmp_path / "cache"))  # a raw build compiles afresh; read by the bits, not a capability
        monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "0")  # no reference child left waiting in a folder this test removes
        verdicts = {}
        for mode in (0o700, 0o711):
            top.chmod(mode)
            verdicts[mode] = evaluate(PROBLEMS / f"{problem}.py", CANDIDATES / candidate if candidate else open_tmp_path / "torch_relu",
                                      zoo_policy(), device="cpu")
    finally:
        shutil.rmtree(top, ignore_errors=True)
    closed = verdicts[0o700]
    assert closed.status.value == "infra_error", (closed.status, closed.log)
    assert f"below {top}, which a sandboxed uid cannot traverse" in closed.log, closed.log
    assert ("the candidate child's folder" in closed.log) == (not candidate), closed.log
    assert verdicts[0o711].workers["children"] == children, verdicts[0o711].workers
    assert verdicts[0o711].status.value == "correct", verdicts[0o711].log
