"""judge.quota: the disk and host memory a confined process takes where no rlimit reaches, and the
watch that kills it past a limit. Plain processes here (no sandbox needed); the zoo's disk and
shared-memory attacks (tests/test_sandbox.py) show it inside a verdict."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelwright.judge import build, quota, quota_usage, sandbox

MIB = 1 << 20


def _py(code: str, cwd: Path | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def _ready(proc: subprocess.Popen) -> str:
    """Wait for the script's first line (it prints one when it is set up)."""
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def test_disk_use_counts_blocks_and_entries_and_a_hard_link_once(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_bytes(b"\1" * (2 * MIB))
    os.link(tmp_path / "a" / "f", tmp_path / "g")
    (tmp_path / "sparse").touch()
    os.truncate(tmp_path / "sparse", 512 * MIB)  # no blocks: counts nothing
    (tmp_path / "link").symlink_to("/usr")  # not followed
    used, entries = quota_usage.disk_use([tmp_path, tmp_path / "missing"])
    assert entries == 5
    assert 2 * MIB <= used < 3 * MIB


def test_disk_use_stops_at_its_limits_and_at_deep_nesting(tmp_path):
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"\1" * MIB)
    with pytest.raises(quota_usage.Over, match="more than 3 MiB on disk"):
        quota_usage.disk_use([tmp_path], stop_bytes=3 * MIB)
    with pytest.raises(quota_usage.Over, match="more than 4 files"):
        quota_usage.disk_use([tmp_path], stop_files=4)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:  # deeper than any path may be long: made and walked through descriptors
        for _ in range(quota_usage.MAX_DEPTH + 2):
            os.mkdir("d" * 200, dir_fd=fd)
            nxt = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
    finally:
        os.close(fd)
    with pytest.raises(quota_usage.Over, match="nested more than"):
        quota_usage.disk_use([tmp_path])
    removed = subprocess.run(["rm", "-rf", str(tmp_path / ("d" * 200))], capture_output=True)  # rmtree's paths would be too long
    assert removed.returncode == 0, removed.stderr


def test_hidden_files_are_unlinked_ones_held_open_and_memfds(tmp_path):
    proc = _py(f"""
        import os, time
        f = open({str(tmp_path / 'gone')!r}, "wb")
        os.unlink({str(tmp_path / 'gone')!r})
        f.write(b"\\1" * (3 << 20)); f.flush()
        m = os.memfd_create("kw")
        os.write(m, b"\\1" * (2 << 20))
        kept = open({str(tmp_path / 'kept')!r}, "wb"); kept.write(b"\\1" * (4 << 20)); kept.flush()
        print("ready", flush=True)
        time.sleep(30)
    """)
    try:
        assert _ready(proc) == "ready"
        hidden = quota_usage.hidden_files({proc.pid: {}})
        assert 3 * MIB <= hidden.disk < 4 * MIB and 2 * MIB <= hidden.shmem < 3 * MIB  # the kept file is in a folder: the walk counts it
        # an unlinked file on no filesystem of its folders is not its own (a library deleted under a warm fork server)
        assert quota_usage.hidden_files({proc.pid: {}}, devices=frozenset({-1})).disk == 0
        assert quota_usage.disk_use([tmp_path])[0] >= 4 * MIB
    finally:
        proc.kill()
        proc.wait()


def test_processes_without_a_uid_are_its_descendants_group_and_session():
    proc = _py("""
        import subprocess, sys, time
        a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])  # its group
        b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)  # a session of its own
        print(a.pid, b.pid, flush=True)
        time.sleep(30)
    """)
    a = b = 0
    try:
        a, b = (int(x) for x in _ready(proc).split())
        found = quota_usage.processes(proc.pid, None)
        assert {proc.pid, a, b} <= set(found)
        assert os.getpid() not in found
        assert all("RssAnon" in st for st in found.values())
    finally:
        for pid in (a, b):
            if pid:
                os.kill(pid, 9)
        proc.kill()
        proc.wait()


def test_memory_use_takes_the_fair_share_of_pages_a_fork_shares():
    proc = _py("""
        import os, time
        data = bytearray(b"\\1" * (256 << 20))  # touched, then shared copy-on-write with the fork
        pid = os.fork()
        if pid == 0:
            time.sleep(30); os._exit(0)
        time.sleep(0.3)
        print(pid, flush=True)
        time.sleep(30)
    """)
    try:
        _ready(proc)
        procs = quota_usage.processes(proc.pid, None)
        assert len(procs) == 2
        quick = quota_usage.memory_use(procs)
        fair = quota_usage.memory_use(procs, limit=1)  # past the limit: the fair share decides
        assert quick > 500 * MIB  # each process's RSS counts the shared pages
        assert 250 * MIB < fair < 0.7 * quick
    finally:
        subprocess.run(["pkill", "-9", "-s", str(proc.pid)], check=False)
        proc.wait()


def _watched(code: str, lim: quota.Limits, roots: list[Path], cwd: Path, ready: bool = False) -> tuple[int, str, float]:
    """Run `code` watched; with `ready`, the watch starts once it has printed its first line (what
    it set up before is then there for the first look to find)."""
    proc = _py(code, cwd=cwd)
    if ready:
        assert _ready(proc) == "ready"
    watch = quota.Watch(proc.pid, roots, uid=None, lim=lim, every_s=0.05)
    t0 = time.monotonic()
    try:
        proc.wait(timeout=60)
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, watch.over, time.monotonic() - t0


def test_a_watch_kills_a_disk_fill_across_many_files(tmp_path):
    code, over, took = _watched("""
        import time
        for i in range(64):
            with open(f"f{i}", "wb") as f:
                f.write(b"\\1" * (1 << 20))
        time.sleep(20)
    """, quota.Limits(disk=16 * MIB, files=0, memory=0), [tmp_path], tmp_path)
    assert code == -9 and "more than 16 MiB on disk" in over, over
    assert took < 10


SHARED = {
    "mapped": """
        import mmap, time
        m = mmap.mmap(-1, 512 << 20, flags=mmap.MAP_SHARED)
        for _ in range(32):
            m.write(b"\\1" * (16 << 20))
        time.sleep(20)
    """,
    "memfd": """
        import os, time
        fd = os.memfd_create("kw")  # written, never mapped: in no process's RSS
        for _ in range(32):
            os.write(fd, b"\\1" * (16 << 20))
        time.sleep(20)
    """,
}


@pytest.mark.parametrize("how", sorted(SHARED))
def test_a_watch_kills_a_process_past_its_memory_in_shared_pages(tmp_path, how):
    code, over, _ = _watched(SHARED[how], quota.Limits(disk=0, files=0, memory=256 * MIB), [tmp_path], tmp_path)
    assert code == -9 and "more than 256 MiB of host memory" in over, over


def test_a_watch_kills_every_process_of_a_child_past_its_files(tmp_path):
    code, over, _ = _watched("""
        import os, subprocess, sys, time
        sub = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"], start_new_session=True)
        open("pid", "w").write(str(sub.pid))
        for i in range(300):
            open(f"e{i}", "w").close()
        time.sleep(20)
    """, quota.Limits(disk=0, files=200, memory=0), [tmp_path], tmp_path)
    assert code == -9 and "more than 200 files" in over, over
    pid = int((tmp_path / "pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and b"Z" not in Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1][:3]:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1][:3]


def test_a_watch_leaves_an_honest_process_alone(tmp_path):
    code, over, _ = _watched("""
        import time
        open("out", "wb").write(b"\\1" * (1 << 20))
        time.sleep(0.5)
    """, quota.limits(), [tmp_path], tmp_path)
    assert code == 0 and over == ""


def test_limits_come_from_the_environment_and_bad_ones_are_named(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_SANDBOX_DISK", "0")
    monkeypatch.setenv("KERNELWRIGHT_SANDBOX_FILES", "12")
    lim = quota.limits()
    assert lim.disk == 0 and lim.files == 12 and lim.memory == quota_usage.memory_total() * 3 // 4
    monkeypatch.setenv("KERNELWRIGHT_SANDBOX_MEMORY", "lots")
    with pytest.raises(ValueError, match="KERNELWRIGHT_SANDBOX_MEMORY must be a whole number"):
        quota.limits()
    monkeypatch.setenv("KERNELWRIGHT_SANDBOX_MEMORY", "-1")
    with pytest.raises(ValueError, match="0 or more"):
        quota.limits()


def test_off_has_no_watch_and_auto_has_one():
    assert sandbox.watched(sandbox.spec_for("off")) is None and sandbox.watched(None) is None
    auto = sandbox.spec_for("auto")
    if auto.layers == ("env",):
        pytest.skip("this machine gives no layer but env")
    lim = sandbox.watched(auto)
    assert lim == quota.limits()
    watch = sandbox.watch_for(auto, os.getpid(), [], lim)
    try:
        assert watch is not None and watch._thread is not None and watch._thread.is_alive()
    finally:
        watch.stop()


def test_a_candidate_child_without_a_spec_is_watched_as_under_auto(tmp_path):
    """The agent's extension build starts a candidate child with no spec; it confines itself as
    under auto (judge.sandbox.enter_from_env), so it is watched as one."""
    ext = str(tmp_path / "ext")
    spec = sandbox.candidate_spec({"TORCH_EXTENSIONS_DIR": ext, "KERNELWRIGHT_CACHE": str(tmp_path / "cache")})
    assert spec.mode == "auto" and ext in spec.write and str(tmp_path / "cache") in spec.read
    set_spec = sandbox.spec_for("strict")
    assert sandbox.candidate_spec({sandbox.SPEC_ENV: set_spec.to_env()}) == set_spec


def test_a_process_whose_main_thread_exited_is_still_counted(tmp_path):
    """Its main thread's status shows no memory once that thread has exited; a live thread's does."""
    code, over, _ = _watched("""
        import ctypes, threading, time
        def hold():
            time.sleep(0.3)  # the main thread has exited by then
            data = bytearray(b"\\1" * (300 << 20))
            print("ready", flush=True)
            time.sleep(20)
        threading.Thread(target=hold).start()
        ctypes.CDLL(None).syscall(60 if __import__("platform").machine() == "x86_64" else 93, 0)  # exit, this thread only
    """, quota.Limits(disk=0, files=0, memory=200 * MIB), [tmp_path], tmp_path, ready=True)
    assert code == -9 and "more than 200 MiB of host memory" in over, over


@pytest.mark.skipif(os.geteuid() != 0, reason="a mapping is sized through /proc/PID/map_files, which only root may follow")
def test_shared_pages_a_fork_touched_are_counted_where_no_rss_shows_them(tmp_path):
    """A shared anonymous mapping filled by a forked child that then exits: the pages stay, in no
    process's RSS (the parent never touched them)."""
    code, over, _ = _watched("""
        import mmap, os, time
        m = mmap.mmap(-1, 320 << 20, flags=mmap.MAP_SHARED)
        pid = os.fork()
        if pid == 0:
            for _ in range(20):
                m.write(b"\\1" * (16 << 20))
            os._exit(0)
        os.waitpid(pid, 0)
        print("ready", flush=True)
        time.sleep(20)
    """, quota.Limits(disk=0, files=0, memory=200 * MIB), [tmp_path], tmp_path, ready=True)
    assert code == -9 and "more than 200 MiB of host memory" in over, over


@pytest.mark.skipif(os.geteuid() != 0, reason="a mapping is sized through /proc/PID/map_files, which only root may follow")
@pytest.mark.parametrize("kind", ["memfd", "unlinked"])
def test_a_file_mapped_and_closed_is_still_counted(tmp_path, kind):
    """Written, one page mapped, its descriptor closed: in no descriptor table, one page of RSS."""
    lim = quota.Limits(disk=0, files=0, memory=200 * MIB) if kind == "memfd" else quota.Limits(disk=200 * MIB, files=0, memory=0)
    code, over, _ = _watched(f"""
        import ctypes, os, time
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        if {kind!r} == "memfd":
            fd = os.memfd_create("kw")
        else:
            fd = os.open("held", os.O_RDWR | os.O_CREAT)
            os.unlink("held")
        for _ in range(20):
            os.write(fd, b"\\1" * (16 << 20))
        assert libc.mmap(None, 4096, 1, 1, fd, 0) not in (None, ctypes.c_void_p(-1).value)  # PROT_READ, MAP_SHARED
        os.close(fd)
        print("ready", flush=True)
        time.sleep(20)
    """, lim, [tmp_path], tmp_path, ready=True)
    assert code == -9 and "more than 200 MiB" in over, over


def test_what_the_judge_cannot_read_is_over(tmp_path, monkeypatch):
    """A non-root judge's candidate can make itself non-dumpable (its descriptors unreadable) or a
    folder of its own unreadable; either is over, not skipped."""
    real_listdir, real_open = os.listdir, os.open

    def listdir(path):
        if str(path).endswith("/fd"):
            raise PermissionError(13, "Permission denied")
        return real_listdir(path)

    monkeypatch.setattr(quota_usage.os, "listdir", listdir)
    me = os.getpid()
    with pytest.raises(quota_usage.Over, match="descriptors of its process .* could be read and now cannot"):
        quota_usage.hidden_files({me: {}}, read_before={me})
    # never read (a root judge without CAP_SYS_PTRACE reads no other uid's): its RssShmem counts instead
    assert me not in quota_usage.hidden_files({me: {}}, read_before=set()).mapped
    # a zombie holds nothing, and a non-root judge may not read its descriptors: not over
    assert quota_usage.hidden_files({me: {"Zombie": 1}}, read_before={me}).shmem == 0
    monkeypatch.setattr(quota_usage.os, "listdir", real_listdir)
    (tmp_path / "shut").mkdir()

    def opener(path, flags, *a, **kw):
        if path == "shut":
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *a, **kw)

    monkeypatch.setattr(quota_usage.os, "open", opener)
    with pytest.raises(quota_usage.Over, match="cannot be read"):
        quota_usage.disk_use([tmp_path])


def test_a_slow_look_a_failing_look_and_a_machine_short_of_memory_are_over(tmp_path, monkeypatch):
    pid = os.getpid()
    monkeypatch.setattr(quota, "LOOK_S", -1.0)
    assert "longer than" in quota.look(pid, [tmp_path], None, quota.Limits(disk=MIB, files=0, memory=0))[0]
    monkeypatch.setattr(quota, "LOOK_S", 1.0)
    assert "available memory fell" in quota.look(pid, [tmp_path], None, quota.Limits(disk=0, files=0, memory=0, floor=1 << 60))[0]
    assert quota.look(pid, [tmp_path], None, quota.Limits(disk=0, files=0, memory=0, floor=1))[0] == ""

    def broken(*a, **kw):
        raise RuntimeError("proc is gone")

    proc = _py("import time; time.sleep(20)")
    monkeypatch.setattr(quota, "look", broken)
    watch = quota.Watch(proc.pid, [tmp_path], uid=None, lim=quota.Limits(disk=MIB, files=0, memory=0), every_s=0.02)
    try:
        assert proc.wait(timeout=10) == -9
        assert f"could not look at it {quota.FAILS} times in a row" in watch.over
    finally:
        watch.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_once_the_child_is_reaped_its_pid_names_nothing(tmp_path):
    proc = _py("import time; time.sleep(20)")
    watch = quota.Watch(proc.pid, [tmp_path], uid=None, lim=quota.Limits(disk=0, files=0, memory=0))
    try:
        assert proc.pid in watch.mine()
        proc.kill()
        proc.wait()
        assert proc.pid not in watch.mine()
    finally:
        watch.stop()


def test_a_compiler_that_fills_the_disk_is_killed_and_the_build_log_says_why(open_tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_SANDBOX_DISK", str(16 * MIB))
    script = "import time\nfor i in range(64):\n    open(f'o{i}', 'wb').write(b'\\1' * (1 << 20))\ntime.sleep(20)\n"
    code, out, timed_out = build._run_group([sys.executable, "-c", script], open_tmp_path, 60)
    assert code is None and not timed_out
    assert "the sandbox killed it: more than 16 MiB on disk" in out, out


def test_a_tool_that_fills_the_disk_is_killed_and_its_output_says_why(open_tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_SANDBOX_DISK", str(16 * MIB))
    script = "import time\nfor i in range(64):\n    open(f'o{i}', 'wb').write(b'\\1' * (1 << 20))\ntime.sleep(20)\n"
    timed_out, text = sandbox.run_tool([sys.executable, "-c", script], mode="auto", cwd=open_tmp_path, output=open_tmp_path / "out.txt",
                                       timeout_s=60, env=os.environ)
    assert not timed_out
    assert "the sandbox killed it: more than 16 MiB on disk" in text, text


@pytest.mark.skipif(not quota_usage.maps_readable(), reason="a mapping is sized through /proc/PID/map_files, which this process may not follow")
def test_shared_memory_of_a_process_whose_main_thread_exited_is_counted(tmp_path):
    """Its mappings are read through a live thread (the main thread's map_files answer nothing):
    a memfd written, one page of it mapped, its descriptor closed (in no RSS but that page)."""
    code, over, _ = _watched("""
        import ctypes, os, threading, time
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        def hold():
            time.sleep(0.3)
            fd = os.memfd_create("kw")
            for _ in range(20):
                os.write(fd, b"\\1" * (16 << 20))
            libc.mmap(None, 4096, 1, 1, fd, 0)
            os.close(fd)
            print("ready", flush=True)
            time.sleep(20)
        threading.Thread(target=hold).start()
        ctypes.CDLL(None).syscall(60 if __import__("platform").machine() == "x86_64" else 93, 0)
    """, quota.Limits(disk=0, files=0, memory=200 * MIB), [tmp_path], tmp_path, ready=True)
    assert code == -9 and "more than 200 MiB of host memory" in over, over


def test_page_tables_count_as_memory(tmp_path):
    """Reading one byte every 2 MiB of a huge read-only private mapping takes a page table per
    2 MiB and no RSS (the zero page), and RLIMIT_DATA does not count a read-only mapping."""
    assert quota_usage.memory_use({1: {"RssAnon": 10, "RssShmem": 7, "VmPTE": 5, "VmSwap": 3}}, mapped={1}) == 18
    code, over, _ = _watched("""
        import ctypes, time
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        size = 160 << 30
        base = libc.mmap(None, size, 1, 0x22 | 0x4000, -1, 0)  # PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE
        for off in range(0, size, 2 << 20):
            ctypes.c_char.from_address(base + off).value
        print("ready", flush=True)
        time.sleep(20)
    """, quota.Limits(disk=0, files=0, memory=200 * MIB), [tmp_path], tmp_path, ready=True)
    assert code == -9 and "more than 200 MiB of host memory" in over, over


def test_without_pidfds_the_start_time_pins_the_child(tmp_path, monkeypatch):
    def no_pidfd(pid):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(quota_usage.os, "pidfd_open", no_pidfd)
    code, over, _ = _watched(SHARED["mapped"], quota.Limits(disk=0, files=0, memory=256 * MIB), [tmp_path], tmp_path)
    assert code == -9 and "more than 256 MiB of host memory" in over, over


def test_the_machine_floor_is_the_machines_not_the_childs(tmp_path):
    proc = _py("import time; time.sleep(20)")
    watch = quota.Watch(proc.pid, [tmp_path], uid=None, lim=quota.Limits(disk=0, files=0, memory=0, floor=1 << 60), every_s=0.02)
    try:
        assert proc.wait(timeout=10) == -9
        assert watch.machine and quota.MACHINE in watch.over
    finally:
        watch.stop()
