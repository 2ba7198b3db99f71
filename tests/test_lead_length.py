"""The lead spin's length (judge.lead.lead_for): the policy's, or longer where the reference's
baselines take longer to queue one call on the host, set from the reference child only."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time

import pytest

from kernelwright.judge import lead, measure, timing
from kernelwright.judge.policy import Policy, TimingConfig


def test_a_short_launch_keeps_the_policys_lead():
    assert lead.lead_for(200.0, {"eager": 0.05, "compile": 0.02}) == 200.0
    assert lead.lead_for(200.0, {}) == 200.0 and lead.lead_for(200.0, None) == 200.0


def test_a_long_launch_lengthens_the_lead_by_the_margin_up_to_the_cap():
    assert lead.lead_for(200.0, {"eager": 1.2, "compile": 0.3}) == pytest.approx(1.2e3 * lead.MARGIN)
    assert lead.lead_for(200.0, {"eager": 60.0}) == lead.MAX_US
    assert lead.lead_for(8000.0, {"eager": 1.0}) == 8000.0  # a policy's longer lead is never cut


def test_off_stays_off_and_nonsense_is_ignored():
    assert lead.lead_for(0.0, {"eager": 3.0}) == 0.0
    assert lead.lead_for(200.0, {"eager": math.nan, "compile": -5.0, "x": "9", "y": math.inf}) == 200.0


def test_the_warm_up_gives_each_calls_host_time_to_its_return():
    import time

    launched = []
    calls, _ = timing.warm_up(lambda: time.sleep(0.002), lambda _i: [], 0.0, cuda=False, launched=launched)
    assert calls == len(launched) == 3 and all(ms >= 2.0 for ms in launched)


class _Child:
    """A child that answers the timing commands with fixed times and keeps what it was sent."""

    def __init__(self, setup_reply, log=None):
        self.setup_reply, self.sent, self.log = setup_reply, [], log if log is not None else []

    @contextlib.contextmanager
    def paused(self, on=True, whole_uid=False):
        self.log.append(("pause", self) if not whole_uid else ("pause with its uid", self))
        yield getattr(self, "quiet", True)
        self.log.append(("continue", self))

    def call(self, cmd, args, timeout_s=None, answers=None, found=None, **_kw):
        self.sent.append((cmd, args))
        self.log.append((cmd, self))
        if cmd == "setup_timing":
            return dict(self.setup_reply)
        if cmd == "time":
            n = len(args["calls"])
            return {"times_ms": [1.0] * n, "synced_ms": [1.0] * n}
        if cmd == "check":
            return {}
        if cmd == "recheck":
            return {"ok": True, "message": ""}
        raise AssertionError(cmd)

    def received_fds(self):
        return []


def _run(ref, cand, want):
    policy = Policy(time_candidate=True, compile_baseline=True, disabled_steps=("timed_recheck",),
                    timing=TimingConfig(min_runs=2, max_runs=4, batch=2, budget_s=5.0, recheck=0))
    return measure.run_timing(policy, ref, cand, None, baselines=True, lead_us=want, cuda=True)


def test_every_contender_is_timed_behind_the_lead_the_reference_sets(tmp_path):
    ref = _Child({"compile_s": 1.0, "per_call_ms": {"eager": 1.0, "compile": 1.0}, "launch_ms": {"eager": 2.0, "compile": 0.5}})
    cand = _Child({"per_call_ms": 1.0, "launch_ms": {"candidate": 0.0}})
    out = _run(ref, cand, 200.0)
    assert out.lead_us == pytest.approx(2500.0)
    leads = {args["switches"]["lead_us"] for child in (ref, cand) for cmd, args in child.sent if cmd == "time"}
    assert leads == {2500.0}  # eager, compile, the candidate and the re-timed batches alike
    # the candidate's rehearsal runs behind the same lead
    cand_setup = next(args for cmd, args in cand.sent if cmd == "setup_timing")
    assert cand_setup["rehearse"]["switches"]["lead_us"] == pytest.approx(2500.0)


def test_the_candidate_cannot_lengthen_the_lead(tmp_path):
    ref = _Child({"compile_s": 1.0, "per_call_ms": {"eager": 1.0, "compile": 1.0}, "launch_ms": {"eager": 0.01, "compile": 0.01}})
    cand = _Child({"per_call_ms": 1.0, "launch_ms": {"eager": 40.0, "compile": 40.0, "candidate": 40.0}})
    out = _run(ref, cand, 200.0)
    assert out.lead_us == 200.0
    assert {args["switches"]["lead_us"] for cmd, args in cand.sent if cmd == "time"} == {200.0}


def test_the_candidate_child_is_stopped_while_the_reference_measures_its_launch_times():
    # a thread of the candidate's burning the host's cores would slow the reference's launches and so
    # lengthen the lead behind which the candidate's own host work goes untimed
    log = []
    ref = _Child({"compile_s": 1.0, "per_call_ms": {"eager": 1.0, "compile": 1.0}, "launch_ms": {"eager": 0.01}}, log)
    cand = _Child({"per_call_ms": 1.0}, log)
    _run(ref, cand, 200.0)
    # with every process of its uid: one it moved out of its group (setsid) would load the host as well
    assert log[:3] == [("pause with its uid", cand), ("setup_timing", ref), ("continue", cand)]


@pytest.mark.parametrize("rec_lead, flow_lead, used", [(0.0, 200.0, False), (None, 200.0, False), (2500.0, 0.0, False),
                                                       (2500.0, 200.0, True), (200.0, 200.0, True), (5000.0, 200.0, True),
                                                       # leads no lead_for gives: a record written by something else
                                                       (100000.0, 200.0, False), (float("inf"), 200.0, False),
                                                       (float("nan"), 200.0, False), (100.0, 200.0, False), (True, 200.0, False)])
def test_cached_baselines_are_used_only_when_timed_as_this_verdict_times(monkeypatch, rec_lead, flow_lead, used):
    # a record timed without the lead spin (it failed to load then) would pair launch-latency baselines with a
    # candidate timed behind a lead: its speedup inflated
    from types import SimpleNamespace

    from kernelwright.judge import baseline, phases_timing

    rec = {"eager_ms": 1.0, "compile_ms": 1.0, "detail": {} if rec_lead is None else {"lead_us": rec_lead}}
    monkeypatch.setattr(baseline, "lookup", lambda *a, **k: rec)
    flow = SimpleNamespace(baseline_store=None, problem=SimpleNamespace(hash="h"), meta={}, device="cuda", policy=Policy(),
                           vb=SimpleNamespace(size="full"), cache_note="", lead_us=lambda: (flow_lead, ""))
    got = phases_timing.cached_baselines(flow)
    assert (got is not None) == used
    assert used or "measured now" in flow.cache_note


def test_a_cached_lead_under_a_policys_longer_lead_is_used():
    from kernelwright.judge import baseline

    assert baseline.well_formed({"eager_ms": 1.0, "compile_ms": 1.0, "detail": {"lead_us": 8000.0}}, "cuda", True, 8000.0) == ""
    assert baseline.well_formed({"eager_ms": 1.0, "compile_ms": 1.0, "detail": {"lead_us": 9000.0}}, "cuda", True, 8000.0) != ""


@pytest.mark.parametrize("times", [{"eager_ms": -1.0, "compile_ms": 1.0}, {"eager_ms": float("nan"), "compile_ms": 1.0},
                                   {"eager_ms": 1.0, "compile_ms": "40"}, {"eager_ms": 1.0, "compile_ms": 0.0}])
def test_cached_baselines_with_times_no_timing_gives_are_measured_again(monkeypatch, times):
    from types import SimpleNamespace

    from kernelwright.judge import baseline, phases_timing

    monkeypatch.setattr(baseline, "lookup", lambda *a, **k: {**times, "detail": {"lead_us": 200.0}})
    flow = SimpleNamespace(baseline_store=None, problem=SimpleNamespace(hash="h"), meta={}, device="cuda", policy=Policy(),
                           vb=SimpleNamespace(size="full"), cache_note="", lead_us=lambda: (200.0, ""))
    assert phases_timing.cached_baselines(flow) is None
    assert "not used" in flow.cache_note


@pytest.mark.parametrize("claimed, here, used", [(["uid"], ("env", "uid"), True), (["landlock"], ("env", "landlock"), True),
                                                 (["uid"], ("env", "limits"), False), (["env"], ("env", "uid"), False)])
def test_a_cached_record_is_trusted_only_where_this_machine_also_keeps_candidates_off_the_store(monkeypatch, claimed, here, used):
    # on a machine with neither layer a candidate can write the store, the record's claim of its layers included
    from types import SimpleNamespace

    from kernelwright.judge import baseline, sandbox

    monkeypatch.setattr(sandbox, "support", lambda: SimpleNamespace(layers=lambda mode: here))
    assert baseline.trusted({"sandbox": {"version": baseline.SANDBOX_VERSION, "layers": claimed}}) is used


@pytest.mark.parametrize("reply, fails", [({"ok": True, "message": ""}, False), ({"ok": "no", "message": "x"}, True),
                                          ({"message": "x"}, True), ({"ok": 1}, True),
                                          ({"ok": False, "guard": "precision", "message": "drift"}, True)])
def test_a_recheck_passes_only_on_a_plain_true(reply, fails):
    class _Ref(_Child):
        def call(self, cmd, args, **kw):
            return dict(reply) if cmd == "recheck" else super().call(cmd, args, **kw)

    ref = _Ref({"compile_s": 1.0, "per_call_ms": {"eager": 1.0, "compile": 1.0}, "launch_ms": {"eager": 0.01}})
    cand = _Child({"per_call_ms": 1.0})
    policy = Policy(time_candidate=True, compile_baseline=True, timing=TimingConfig(min_runs=2, max_runs=4, batch=2, budget_s=5.0, recheck=1))
    out = measure.run_timing(policy, ref, cand, None, baselines=True, lead_us=200.0, cuda=True)
    assert bool(out.recheck_failure) is fails
    if fails:
        assert out.recheck_guard == ("precision" if reply.get("guard") == "precision" else "timed_recheck")


ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="the uid layer, and so signalling a uid's processes, needs a root judge")
# kills every process of its uid it sees start: a helper that ran as that uid to stop it was killed first in 11 of 20 tries
KILLER = """
import os, signal
me = os.getpid()
while True:
    for n in os.listdir("/proc"):
        if n.isdigit() and int(n) != me:
            try:
                if os.stat("/proc/" + n).st_uid == os.getuid():
                    os.kill(int(n), signal.SIGKILL)
            except OSError:
                pass
"""


def _system_python():
    """A python3 another uid may run (the test's own may sit below a folder closed to it)."""
    import shutil

    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 that another uid may run")
    return python


def _as_uid(uid, argv):
    import subprocess

    return subprocess.Popen(argv, user=uid, group=uid, extra_groups=[], env={"PATH": "/usr/bin:/bin"})


@ROOT_ONLY
def test_stopping_a_candidates_uid_reaches_a_process_that_left_its_group_and_session():
    from kernelwright.judge import sandbox, uids

    fake_child_pid = 4_000_000 + os.getpid() % 100_000  # the uid of a confined child of this pid; no such child runs
    escaped = _as_uid(sandbox.UID_BASE + fake_child_pid, ["/bin/sh", "-c", "exec setsid sleep 60"])
    try:
        _wait_state(escaped.pid, ("S",))
        assert uids.stop_child(fake_child_pid) is True
        assert _state(escaped.pid) == "T"
        uids.continue_child(fake_child_pid)
        assert _wait_state(escaped.pid, ("S", "R")) in ("S", "R")
    finally:
        escaped.kill()
        escaped.wait()


@ROOT_ONLY
def test_a_process_that_kills_its_uids_newcomers_cannot_stop_the_stop_or_the_kill():
    from kernelwright.judge import sandbox, uids

    python = _system_python()
    fake_child_pid = 4_100_000 + os.getpid() % 100_000
    killer = _as_uid(sandbox.UID_BASE + fake_child_pid, [python, "-I", "-S", "-c", KILLER])
    try:
        _wait_state(killer.pid, ("R", "S"))
        for _ in range(5):
            assert uids.stop_child(fake_child_pid) is True
            assert _state(killer.pid) == "T"
            uids.continue_child(fake_child_pid)
        uids.kill_uid(sandbox.UID_BASE + fake_child_pid)
        killer.wait(timeout=10)
    finally:
        killer.kill()
        killer.wait()


@ROOT_ONLY
def test_a_candidate_childs_pause_with_its_uid_stops_what_left_its_group(tmp_path):
    from kernelwright.judge import sandbox
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.workers import Child, ChildConfig

    env = {sandbox.SPEC_ENV: sandbox.for_candidate("auto", str(cache_dir()), device="cpu").to_env()}
    child = Child(ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env=env))
    escaped = _as_uid(sandbox.UID_BASE + child._proc.pid, ["/bin/sh", "-c", "exec setsid sleep 60"])
    try:
        _wait_state(escaped.pid, ("S",))
        with child.paused(True, whole_uid=True) as quiet:
            assert quiet and _state(escaped.pid) == "T"
            time.sleep(0.3)  # the reference's measurement: nothing of the uid runs meanwhile
        assert quiet  # read after the block, as the lead is
        assert _wait_state(escaped.pid, ("S",)) == "S"
        with child.paused(True) as quiet:  # the group only, as around a re-check's hand-over
            assert _state(escaped.pid) == "S"
    finally:
        escaped.kill()
        escaped.wait()
        child.close()


@ROOT_ONLY
def test_a_pause_whose_uid_stop_fails_leaves_nothing_stopped(tmp_path, monkeypatch):
    from kernelwright.judge import sandbox, uids
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.workers import Child, ChildConfig

    env = {sandbox.SPEC_ENV: sandbox.for_candidate("auto", str(cache_dir()), device="cpu").to_env()}
    child = Child(ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env=env))
    escaped = _as_uid(sandbox.UID_BASE + child._proc.pid, ["/bin/sh", "-c", "exec setsid sleep 60"])
    real = uids.stop_child

    def fails(pid, by=None):
        real(pid, by)  # it stopped the uid's processes, then failed
        raise OSError("the helper's report could not be read")

    monkeypatch.setattr(uids, "stop_child", fails)
    try:
        _wait_state(escaped.pid, ("S",))
        with pytest.raises((OSError, RuntimeError)):
            with child.paused(True, whole_uid=True):
                pass
        assert _wait_state(escaped.pid, ("S",)) == "S" and _wait_state(child._proc.pid, ("S", "R")) in ("S", "R")
    finally:
        escaped.kill()
        escaped.wait()
        child.close()


# stopped, it continues itself: while it runs it keeps pushing a one-shot timer 30 ms ahead, so the
# timer fires, with SIGCONT, only once it has been stopped
SELF_WAKER = """
import ctypes, struct
libc = ctypes.CDLL(None, use_errno=True)
event = ctypes.create_string_buffer(64)
struct.pack_into("ii", event, 8, 18, 0)  # sigev_signo SIGCONT, sigev_notify SIGEV_SIGNAL
timer = ctypes.c_void_p()
assert libc.timer_create(1, event, ctypes.byref(timer)) == 0, ctypes.get_errno()
ahead = (ctypes.c_long * 4)(0, 0, 0, 30_000_000)
while True:
    libc.timer_settime(timer, 0, ahead, None)
"""


@ROOT_ONLY
def test_a_process_that_continues_itself_during_the_pause_makes_it_not_quiet(tmp_path):
    """A stop is undone by a SIGCONT the process arranged itself: the pause finds that it ran
    (its CPU time grew) and says so after the block, so the lead is the policy's alone."""
    from kernelwright.judge import sandbox
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.workers import Child, ChildConfig

    python = _system_python()
    env = {sandbox.SPEC_ENV: sandbox.for_candidate("auto", str(cache_dir()), device="cpu").to_env()}
    child = Child(ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env=env))
    waker = _as_uid(sandbox.UID_BASE + child._proc.pid, [python, "-I", "-S", "-c", SELF_WAKER])
    try:
        deadline = time.monotonic() + 30
        while _cpu_ticks(waker.pid) < 10:  # in its loop, the timer armed (not still starting)
            assert time.monotonic() < deadline and waker.poll() is None
            time.sleep(0.02)
        with child.paused(True, whole_uid=True) as quiet:
            time.sleep(0.3)
            assert _state(waker.pid) == "R"  # it continued itself: the stop did not hold
        assert not quiet
    finally:
        waker.kill()
        waker.wait()
        child.close()


# runs a thread to bank CPU time; once continued, runs another thread and lets the banked one exit,
# so the live threads' run time is lower after than before though it ran
BANKER = """
import signal, threading, time
woken, banked_may_exit = threading.Event(), threading.Event()
def spin(s):  # s seconds of this thread's own CPU time
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
def banked():
    spin(0.4)
    banked_may_exit.wait()
t = threading.Thread(target=banked)
t.start()
signal.signal(signal.SIGCONT, lambda *_: woken.set())
while not woken.wait(0.01):  # the handler runs in the main thread, between these waits
    pass
worker = threading.Thread(target=spin, args=(0.3,))
worker.start()
banked_may_exit.set()
worker.join()
t.join()
time.sleep(60)
"""


@ROOT_ONLY
def test_run_time_of_threads_that_exit_during_the_pause_is_not_lost():
    from kernelwright.judge import sandbox, uids

    python = _system_python()
    fake_child_pid = 4_500_000 + os.getpid() % 100_000
    uid = sandbox.UID_BASE + fake_child_pid
    proc = _as_uid(uid, [python, "-I", "-S", "-c", BANKER])
    try:
        deadline = time.monotonic() + 30
        while _cpu_ticks(proc.pid) < 35:  # the banked thread has spun
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        time.sleep(0.2)
        assert uids.stop_child(fake_child_pid) is True
        before = uids.cpu_times(uid)
        assert not uids.ran_since(uid, before)
        os.kill(proc.pid, signal.SIGCONT)  # as its own timer would
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{proc.pid}/task")) > 1:  # until the new thread has run and the banked one is gone
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        assert uids.ran_since(uid, before)
    finally:
        proc.kill()
        proc.wait()


@ROOT_ONLY
def test_a_candidates_kept_signaller_stops_continues_and_kills_its_uid_without_a_helper_start(tmp_path, monkeypatch):
    from kernelwright.judge import sandbox, uids
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.workers import Child, ChildConfig

    started = []
    monkeypatch.setattr(uids, "signal_uid", lambda *a, **k: started.append(a))  # a one-off helper's start
    env = {sandbox.SPEC_ENV: sandbox.for_candidate("auto", str(cache_dir()), device="cpu").to_env()}
    child = Child(ChildConfig(role="candidate", device="cpu", gpu_index=0, workdir=tmp_path, env=env))
    kept = child._signaller._proc
    assert child._watch is None or child._watch.signaller is child._signaller  # the quota's kill goes through it too
    escaped = _as_uid(sandbox.UID_BASE + child._proc.pid, ["/bin/sh", "-c", "exec setsid sleep 60"])
    try:
        _wait_state(escaped.pid, ("S",))
        for _ in range(3):
            with child.paused(True, whole_uid=True) as quiet:
                assert _state(escaped.pid) == "T"
            assert quiet and _wait_state(escaped.pid, ("S",)) == "S"
        child.close()  # its uid killed through the kept helper, which then ends
        escaped.wait(timeout=10)
        assert kept.wait(timeout=10) == 0
        assert started == []
    finally:
        escaped.kill()
        escaped.wait()
        child.close()


@ROOT_ONLY
def test_a_kept_signaller_outlives_a_process_that_kills_its_uids_newcomers_and_one_that_died_is_stood_in_for():
    import subprocess

    from kernelwright.judge import sandbox, uids

    python = _system_python()
    fake_child_pid = 4_600_000 + os.getpid() % 100_000
    uid = sandbox.UID_BASE + fake_child_pid
    kept = uids.Signaller(uid)
    uids.continue_child(fake_child_pid, kept)  # it has answered once: its uids are set
    # idle, it is root's to schedule: the uid's processes cannot make it SCHED_IDLE (they could where its effective uid was theirs)
    idle = ("import os, sys\nos.sched_setscheduler(int(sys.argv[1]), os.SCHED_IDLE, os.sched_param(0))")
    tried = subprocess.run([python, "-I", "-S", "-c", idle, str(kept._proc.pid)], user=uid, group=uid, extra_groups=[],
                           env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30)
    assert tried.returncode != 0 and "PermissionError" in tried.stderr, tried.stderr
    killer = _as_uid(uid, [python, "-I", "-S", "-c", KILLER])
    try:
        _wait_state(killer.pid, ("R", "S"))
        for _ in range(5):
            assert uids.stop_child(fake_child_pid, kept) is True and _state(killer.pid) == "T"
            uids.continue_child(fake_child_pid, kept)
            time.sleep(0.05)  # the killer looks at /proc meanwhile
        assert kept._proc is not None and kept._proc.poll() is None
        kept._proc.kill()  # it died: the one-off helper stands in
        kept._proc.wait()
        assert uids.stop_child(fake_child_pid, kept) is True and _state(killer.pid) == "T"
        assert kept._proc is None
        uids.kill_uid(uid, by=kept)
        killer.wait(timeout=10)
    finally:
        kept.close()
        killer.kill()
        killer.wait()


@ROOT_ONLY
def test_a_process_whose_leader_exited_runs_while_a_thread_of_it_runs():
    """/proc/PID/stat is the leader thread's: a leader that called pthread_exit shows as a zombie
    while its other threads run on, and only the threads' own states say so."""
    import subprocess

    from kernelwright.judge import sandbox, uids

    fake_child_pid = 4_200_000 + os.getpid() % 100_000
    uid = sandbox.UID_BASE + fake_child_pid
    code = ("import ctypes, os, threading, time\n"
            "os.setgroups([]); os.setresgid(%d, %d, %d); os.setresuid(%d, %d, %d)\n"
            "def spin():\n    while True:\n        time.sleep(0.005)\n"
            "threading.Thread(target=spin, daemon=True).start()\nctypes.CDLL(None).pthread_exit(None)\n") % ((uid,) * 6)
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", code])
    try:
        _wait_state(proc.pid, ("Z",))
        assert _state(proc.pid) == "Z" and not uids.all_stopped(uid)
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not uids.all_stopped(uid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGCONT)
        deadline = time.monotonic() + 10
        while uids.all_stopped(uid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()


def test_the_lead_falls_back_to_the_policys_when_a_process_of_the_candidates_still_ran():
    ref = _Child({"compile_s": 1.0, "per_call_ms": {"eager": 1.0, "compile": 1.0}, "launch_ms": {"eager": 2.0}})
    cand = _Child({"per_call_ms": 1.0})
    cand.quiet = False
    assert _run(ref, cand, 200.0).lead_us == 200.0


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def _wait_state(pid, states):
    import time

    for _ in range(100):
        state = _state(pid)
        if state in states:
            return state
        time.sleep(0.02)
    return state


@ROOT_ONLY
def test_a_helper_for_one_uid_leaves_the_helpers_of_others_alone():
    # with one signaller uid for all, a helper's kill(-1) stopped and killed another target's helper running at the time
    import subprocess

    from kernelwright.judge import uids

    other = uids.UID_BASE + 4_300_000 + os.getpid() % 100_000
    s = uids.signaller(other)
    code = f"import os, time; os.setgroups([]); os.setresgid({s}, {s}, {s}); os.setresuid({s}, {other}, {s}); time.sleep(60)"
    standin = subprocess.Popen([sys.executable, "-I", "-S", "-c", code])  # what a helper for `other` is while it runs
    try:
        time.sleep(0.5)
        mine = uids.UID_BASE + 4_400_000 + os.getpid() % 100_000
        uids.signal_uid(mine, signal.SIGSTOP)
        assert _state(standin.pid) == "S"
        uids.kill_uid(mine)
        assert standin.poll() is None
    finally:
        standin.kill()
        standin.wait()


def test_a_compile_error_is_not_replaced_by_the_reset_after_it(monkeypatch):
    # on a GPU the reset imports inductor's cache module; one that failed once fails differently the second time
    from types import SimpleNamespace

    from kernelwright.judge import reference_checks as rc

    resets = []

    def reset():
        resets.append(1)
        if len(resets) > 1:
            raise AssertionError("Artifact of type=inductor already registered")

    def broken(*_a, **_k):
        raise ImportError("the first failure, the one that says why")

    monkeypatch.setattr(rc, "_native", lambda seed: [])
    monkeypatch.setattr(rc.ref, "_forward", lambda values: [])
    monkeypatch.setattr(rc.ref, "S", SimpleNamespace(model=None, device=SimpleNamespace(type="cpu")), raising=False)
    monkeypatch.setattr(rc.torch._dynamo, "reset", reset)
    monkeypatch.setattr(rc.torch, "compile", broken)
    got = rc.compiled({"seed": 1, "backend": "inductor"})
    assert got["ok"] is False and "the first failure" in got["error"]
