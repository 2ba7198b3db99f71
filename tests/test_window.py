"""Between timed calls: no later call's seed in the child before its turn, nothing of the
candidate's freed after a seed arrived, and the hooks that could run its code there switched off
and reported (judge.inputs.asking_getter, judge.window.quiet_window, judge.workers.Child.call's
answers). The end-to-end tricks are in the zoo (zoo_next_*)."""

from __future__ import annotations

import gc
import os
import signal
import sys
import types
import weakref

import pytest
import torch
import torch.utils._device
from conftest import needs_gpu

from kernelwright.judge import inputs, timing, watch
from kernelwright.judge import window as seed_window  # the module; `window` is this file's fixture
from kernelwright.core.records import ASK_SEED


def _problem() -> types.ModuleType:
    m = types.ModuleType("window_problem")
    m.torch = torch
    exec("def get_inputs():\n    return [torch.randn(4, 6), torch.randn(6)]\n", vars(m))
    return m


class _Probe:
    """A candidate's forward that hangs weak-reference callbacks on everything the judge may let go
    of between calls (its output, each input tensor, each input's storage, re-hung on the storage
    the tensor holds at each callback), and records how many seeds had been handed out and how
    many calls made when each callback ran."""

    def __init__(self) -> None:
        self.asked = 0
        self.called = 0
        self.fired: list[tuple[int, int, str]] = []
        self.refs: list[weakref.ref] = []

    def ask(self, _index: int, _found: list) -> int:
        self.asked += 1
        return 1000 + self.asked

    def _hang(self, obj, what: str) -> None:
        def gone(_ref, what=what):
            self.fired.append((self.asked, self.called, what))

        self.refs.append(weakref.ref(obj, gone))

    def forward(self, x, w):
        self.called += 1
        for i, t in enumerate((x, w)):
            self._hang(t.untyped_storage(), f"storage of input {i}")
            self._hang(t, f"input {i}")

            def rehang(_ref, t=t, i=i):
                self.fired.append((self.asked, self.called, f"storage of input {i}"))
                self._hang(t.untyped_storage(), f"storage input {i} held after a release")

            self.refs.append(weakref.ref(t.untyped_storage(), rehang))
        out = x @ w
        self._hang(out, "output")
        return out


def _run(getter_for) -> _Probe:
    probe = _Probe()
    problem = _problem()
    cpu = torch.device("cpu")
    pool = inputs.make_pool(problem, [1, 2], cpu)
    calls = [[0, ASK_SEED], [1, ASK_SEED], [0, ASK_SEED], [0, None], [1, ASK_SEED]]
    get_args = getter_for(problem, pool, calls, cpu, probe)
    timing.time_calls(probe.forward, get_args, len(calls), cuda=False, switches=timing.switches_from(
        {"flush": False, "events": False, "sync": False}, cuda=False))
    return probe


def test_no_callback_of_the_candidate_runs_once_its_next_seed_is_in_the_process():
    dropped: list = []

    def asking(problem, pool, calls, cpu, probe):
        return inputs.asking_getter(problem, pool, calls, cpu, probe.ask, lambda first, keep: [], dropped)

    probe = _run(asking)
    assert probe.asked == 4 and probe.called == 5
    assert probe.fired, "the probe's callbacks never ran: the test would see nothing"
    late = [f for f in probe.fired if f[0] > f[1]]
    assert not late, f"callbacks ran with a seed handed out for a call not yet made: {late}"


def test_the_probe_sees_callbacks_after_the_seed_when_the_seed_comes_first():
    """The control: the same probe against a refresh that asks first and frees after (the order
    before asking_getter, with the batch's seeds in the command) catches callbacks late."""

    def seed_first(problem, pool, calls, cpu, probe):
        def get_args(i):
            slot, seed = calls[i]
            if seed is not None:
                s = probe.ask(i, [])
                layouts = [(v.shape, v.dtype, tuple(v.stride())) for v in pool[slot]]
                for v in pool[slot]:
                    v.set_()  # a fresh empty storage per release, as before
                dropped: list = []
                inputs.fill_slot(problem, pool[slot], layouts, s, cpu, dropped)
            return pool[slot]

        return get_args

    probe = _run(seed_first)
    assert [f for f in probe.fired if f[0] > f[1]]


def test_a_replaced_value_is_let_go_only_at_the_next_calls_turn():
    """A value the refresh cannot rebind (here: a tensor whose shape changes from draw to draw) is
    replaced; the old object waits in `dropped` until the next call's turn, before its seed is
    asked for."""
    problem = types.ModuleType("growing_problem")
    sizes = iter(range(3, 100))
    problem.get_inputs = lambda: [torch.randn(next(sizes))]
    cpu = torch.device("cpu")
    pool = inputs.make_pool(problem, [1], cpu)
    dropped: list = []
    asked: list[int] = []
    fired: list[int] = []
    get_args = inputs.asking_getter(problem, pool, [[0, ASK_SEED], [0, ASK_SEED]], cpu,
                                    lambda n, _f: asked.append(n) or 7 + n, lambda first, keep: [], dropped)
    first = pool[0][0]
    weakref.finalize(first, lambda: fired.append(len(asked)))
    del first
    get_args(0)
    assert fired == [] and len(dropped) == 1  # replaced after the seed: kept
    get_args(1)
    assert fired == [1]  # let go before the second seed was asked for


def test_released_tensors_share_one_kept_empty_storage():
    problem = _problem()
    cpu = torch.device("cpu")
    pool = inputs.make_pool(problem, [1], cpu)
    inputs.release_slot(pool[0])
    ptrs = {t.untyped_storage()._cdata for t in pool[0]}
    assert len(ptrs) == 1 and all(t.numel() == 0 for t in pool[0])
    kept = inputs._keeper(cpu)
    assert pool[0][0].untyped_storage()._cdata == kept._cdata


def test_asking_getter_refuses_a_seed_given_in_the_command():
    problem = _problem()
    cpu = torch.device("cpu")
    pool = inputs.make_pool(problem, [1], cpu)
    get_args = inputs.asking_getter(problem, pool, [[0, 12345]], cpu, lambda n, f: 1, lambda first, keep: [], [])
    with pytest.raises(ValueError, match="must come from the judge"):
        get_args(0)


_ALREADY: list[str] = []
_RUNNER: set[int] = set()  # the session's processes when the window opened (this worker's parent, the other worker, ...)
_KEEP: list = []  # what quiet_window took away, held as a batch holds it
_NOTED: list = []  # the problem module the window fixture's note_window recorded


def _quiet(first: bool = True) -> list[str]:
    """quiet_window's findings less the threads and processes the test runner had already, and
    less processes of this session that this worker did not start: under xdist the other worker
    shares the session, and its tests start CLI subprocesses at any moment."""
    return [f for f in seed_window.quiet_window(first, _KEEP) if f not in _ALREADY and not _elsewhere(f)]


def _elsewhere(finding: str) -> bool:
    """A 'process: PID (in this session)' finding whose process descends from one the runner had
    already (the other xdist worker), not from this worker: an orphan (reparented to init, as a
    daemon is) still counts."""
    if not finding.startswith("process: "):
        return False
    known = _RUNNER
    pid = int(finding.split()[1])
    while pid > 1:
        if pid == os.getpid():
            return False
        if pid in known:
            return True
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            return False
        pid = int(stat[stat.rindex(b")") + 2:].split()[1])
    return False


@pytest.fixture
def window():
    """A window opened as a timed batch opens it (the collector on: another test in the same worker
    may have left it otherwise)."""
    was_gc = gc.isenabled()
    gc.enable()
    seed_window.note_hooks()
    _NOTED[:] = [_problem()]
    seed_window.note_window(_NOTED[0], torch.device("cpu"))
    _ALREADY[:] = [f for f in seed_window.quiet_window(True, _KEEP) if f.startswith(("thread: ", "process: "))]  # the test runner's own
    _RUNNER.clear()
    _RUNNER.update(int(pid) for pid in seed_window._session())
    gc.enable()
    collector = seed_window.open_window()
    yield
    _KEEP.clear()
    seed_window.close_window(collector)
    sys.settrace(None)
    sys.setprofile(None)
    if not was_gc:
        gc.disable()


def test_quiet_window_reports_and_removes_a_profile_and_a_trace_function(window):
    sys.setprofile(lambda *a: None)
    assert _quiet() == ["hook: a profile function (sys.setprofile)"]
    assert sys.getprofile() is None
    sys.settrace(lambda *a: None)
    assert _quiet() == ["hook: a trace function (sys.settrace)"]
    assert sys.gettrace() is None


def test_quiet_window_reports_a_signal_handler_and_leaves_the_signal_ignored(window):
    before = signal.getsignal(signal.SIGUSR1)
    try:
        signal.signal(signal.SIGUSR1, lambda *_a: None)
        assert _quiet() == [f"hook: a handler for signal {int(signal.SIGUSR1)}"]
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_IGN  # a timer still armed cannot kill the child
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # no Python code runs there: not a hook (SIGPIPE's usual reset)
        assert _quiet() == []
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_quiet_window_turns_the_collector_off_and_close_window_puts_it_back(window):
    gc.enable()
    collector = seed_window.open_window()
    assert _quiet() == []
    assert not gc.isenabled()
    seed_window.close_window(collector)
    assert gc.isenabled()  # as it was when the window opened


def test_quiet_window_finds_nothing_in_a_quiet_process(window):
    assert _quiet() == []


def test_quiet_window_reports_a_python_thread(window):
    import threading

    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="racer", daemon=True)
    t.start()
    try:
        assert _quiet() == ["thread: racer"]
    finally:
        stop.set()
        t.join()
    assert _quiet() == []


def test_quiet_window_reports_a_process_left_in_the_session_once_a_batch(window, tmp_path):
    """A double fork leaves this process's children, not its session: a relay there could read each
    seed off an inherited descriptor (a red-team review, 2026-12-05). Looked for at a batch's first ask."""
    import os
    import subprocess
    import time

    code = ("import os, sys, time\nif os.fork() == 0:\n    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "    time.sleep(30)\n")
    out = tmp_path / "pid"
    subprocess.run([sys.executable, "-c", code, str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30, check=True)
    for _ in range(100):
        if out.exists() and out.read_text():
            break
        time.sleep(0.05)
    pid = out.read_text()
    try:
        assert pid and f"process: {pid} (in this session)" in _quiet(first=True)
        assert f"process: {pid} (in this session)" not in _quiet(first=False)  # a batch's first ask only
    finally:
        os.kill(int(pid), 9)


@pytest.mark.parametrize("change,said", [
    (lambda: setattr(torch.Tensor, "dtype", property(lambda self: torch.float32)), "the class dict of Tensor"),
    (lambda: setattr(torch.utils._device.DeviceContext, "__torch_function__", lambda *a, **k: None), "the class dict of DeviceContext"),
    (lambda: setattr(torch, "randn", torch.randn.__call__), "torch.randn, which the problem's get_inputs() reads"),
])
def test_quiet_window_reports_what_the_draw_reads_changed(window, change, said):
    """A class dict entry added or replaced, or a module attribute the problem's get_inputs() reads
    (a red-team review, 2026-12-05: each computed the answer inside the draw)."""
    import importlib

    saved = {"dtype": vars(torch.Tensor).get("dtype"), "tf": vars(torch.utils._device.DeviceContext)["__torch_function__"],
             "randn": torch.randn}
    try:
        change()
        assert f"hook: {said} changed" in _quiet()
    finally:
        if saved["dtype"] is None and "dtype" in vars(torch.Tensor):
            delattr(torch.Tensor, "dtype")
        torch.utils._device.DeviceContext.__torch_function__ = saved["tf"]
        torch.randn = saved["randn"]
        importlib.invalidate_caches()
    assert _quiet() == []


def test_quiet_window_reports_random_given_another_class(window):
    import random

    inst = random._inst
    was = type(inst)

    class Sneaky(random.Random):
        pass

    inst.__class__ = Sneaky
    try:
        assert "hook: random's global generator changed" in _quiet()
    finally:
        inst.__class__ = was


@pytest.mark.skipif(not hasattr(sys, "monitoring"), reason="sys.monitoring came with Python 3.12")
def test_quiet_window_reports_and_frees_a_monitoring_tool(window):
    mon = sys.monitoring
    tool = next(t for t in range(6) if mon.get_tool(t) is None)
    mon.use_tool_id(tool, "candidate")
    mon.register_callback(tool, mon.events.CALL, lambda *a: None)
    mon.set_events(tool, mon.events.CALL)
    try:
        assert _quiet() == [f"hook: sys.monitoring tool {tool} ('candidate')"]
        assert mon.get_tool(tool) is None and mon.get_events(tool) == 0
    finally:
        if mon.get_tool(tool) is not None:
            mon.set_events(tool, 0)
            mon.free_tool_id(tool)


_AUDIT_PROBE = r"""
import sys, types, torch
from kernelwright.judge import inputs, timing
from kernelwright.core.records import ASK_SEED
device = torch.device(sys.argv[1])
cuda = device.type == "cuda"
state = {"on": False, "events": []}
sys.addaudithook(lambda ev, _args: state["events"].append(ev) if state["on"] else None)
m = types.ModuleType("p")
m.get_inputs = lambda: [torch.randn(64, 513), torch.rand(513)]
pool = inputs.make_pool(m, [1, 2], device)
def ask(i, _found):
    state["on"] = True
    return 100 + i
def fn(x, w):
    state["on"] = False
    return x @ w
calls = [[i % 2, ASK_SEED] for i in range(8)]
get_args = inputs.asking_getter(m, pool, calls, device, ask, lambda first, keep: [], [])
sw = timing.switches_from({"flush": cuda, "events": cuda, "sync": cuda}, cuda=cuda)
timing.time_calls(fn, get_args, len(calls), cuda=cuda, switches=sw)
print(sorted(set(state["events"])))
"""


def _audit_events(device: str) -> str:
    import os
    import subprocess
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", _AUDIT_PROBE, device], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_no_audit_event_between_a_seed_and_its_call_on_the_cpu():
    """An audit hook cannot be removed, so nothing the judge does between a timed call's seed and
    its start may raise an audit event: torch.manual_seed did (a traceback.format_stack() of the
    draw, with CUDA not up), and a hook of the candidate's saw the seed."""
    assert _audit_events("cpu") == "[]"


@pytest.mark.gpu
@needs_gpu()
def test_no_audit_event_between_a_seed_and_its_call_on_the_gpu():
    assert _audit_events("cuda") == "[]"


def test_quiet_window_reports_numpys_bit_generator_replaced(window):
    """numpy.random.set_bit_generator keeps the global RandomState and its class; an MT19937
    subclass's _legacy_seeding then ran inside the draw's numpy seeding (red team, 2026-12-05)."""
    np = pytest.importorskip("numpy")
    was = np.random.get_bit_generator()

    class Spy(np.random.MT19937):
        pass

    np.random.set_bit_generator(Spy(0))
    try:
        assert "hook: numpy's global bit generator changed" in _quiet()
        np.random.set_bit_generator(np.random.MT19937(0))  # the same class, not the same object
        assert "hook: numpy's global bit generator changed" in _quiet()
    finally:
        np.random.set_bit_generator(was)
    assert _quiet() == []


def test_quiet_window_holds_randoms_cached_gauss_value_until_the_batch_lets_go(window):
    """random._inst.gauss_next, which the draw's seeding sets to None: an object there with a
    __del__ ran after the seed (red team, 2026-12-05). quiet_window takes it away before the ask and
    the batch holds it, so its __del__ runs only when the next call's turn begins; one that puts
    itself back in that __del__ is taken away again then."""
    import random

    freed: list[int] = []

    class Trig:
        def __del__(self):
            freed.append(1)

    random._inst.gauss_next = Trig()
    assert _quiet() == []  # a value random.gauss() left there is no hook of itself
    assert vars(random._inst)["gauss_next"] is None and freed == []
    _KEEP.clear()
    assert freed == [1]
    random.gauss(0, 1)  # leaves a float cached
    assert _quiet() == [] and vars(random._inst)["gauss_next"] is None


def test_quiet_window_reports_and_pops_a_dispatch_mode_left_on(window):
    """A dispatch mode pushed between calls saw the refresh's set_ take the fresh draw's storage (red
    team, 2026-12-05)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    torch._C._push_on_torch_dispatch_stack(Spy())
    try:
        assert _quiet() == ["hook: a torch dispatch mode left on after the call"]
        assert torch._C._len_torch_dispatch_stack() == 0
    finally:
        while torch._C._len_torch_dispatch_stack():
            torch._C._pop_torch_dispatch_stack(None)


def test_quiet_window_reports_the_problems_get_inputs_replaced_or_its_code_swapped(window):
    problem = _NOTED[0]
    fn = problem.get_inputs
    problem.get_inputs = lambda: fn()
    try:
        assert "hook: window_problem.get_inputs, which the problem's get_inputs() reads changed" in _quiet()
    finally:
        problem.get_inputs = fn
    code = fn.__code__
    fn.__code__ = (lambda: [torch.zeros(4, 6), torch.zeros(6)]).__code__
    try:
        assert any("the code, defaults or closure of get_inputs" in f for f in _quiet())
    finally:
        fn.__code__ = code
    assert _quiet() == []


def test_batch_getter_draws_from_the_noted_problem_and_says_a_replaced_one(window):
    """The child's state object is the candidate's to reach: a proxy put at S.problem ran inside the
    draw. batch_getter uses what note_window recorded and says the change."""
    from unittest import mock

    seen: list[str] = []

    class Proxy:
        def get_inputs(self):
            seen.append("proxy")
            return _NOTED[0].get_inputs()

    cpu = torch.device("cpu")
    pool = inputs.make_pool(_NOTED[0], [1], cpu)
    asks: list[list[str]] = []
    with mock.patch.object(seed_window, "ask_seed", lambda n, found: asks.append(found) or 5):
        get_args, finish = seed_window.batch_getter(Proxy(), pool, [[0, ASK_SEED]], cpu)
        get_args(0)
        finish()
    assert seen == [] and "hook: the problem module the draw reads replaced" in asks[0]


def test_asking_getter_replaces_a_pool_entry_that_is_not_a_plain_list():
    """A list subclass's __getitem__ read the fresh draw off fill_slot's frame (red team, 2026-12-05):
    the entry is said and replaced before the seed is asked for; nothing of it runs after."""
    problem, cpu = _problem(), torch.device("cpu")
    pool = inputs.make_pool(problem, [1], cpu)
    seen: list[int] = []
    asks: list[list[str]] = []

    class Entry(list):
        def __getitem__(self, i):
            seen.append(len(asks))
            return list.__getitem__(self, i)

        def __len__(self):
            seen.append(len(asks))
            return list.__len__(self)

    pool[0] = Entry(pool[0])
    get_args = inputs.asking_getter(problem, pool, [[0, ASK_SEED]], cpu, lambda n, f: asks.append(f) or 9,
                                    lambda first, keep: [], [])
    args = get_args(0)
    assert asks == [["hook: a timing pool entry replaced"]] and type(args) is list and len(args) == 2
    assert all(n == 0 for n in seen)  # nothing of the subclass ran once a seed was out


class _Collides:
    """A dict key with the hash of a name and an __eq__ of its own, which a lookup of that name runs
    (red team, 2026-12-05)."""

    def __init__(self, name: str) -> None:
        self.name, self.ran = name, 0

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other) -> bool:
        self.ran += 1
        return False


def _put_ahead(d: dict, name: str, key) -> None:
    value = d.pop(name)
    d[key] = 0
    d[name] = value


def test_quiet_window_reports_a_key_that_is_not_a_string_on_the_way_to_the_call(window):
    import builtins
    import operator

    for d, name, what in [(vars(_NOTED[0]), "get_inputs", "module window_problem"), (vars(builtins), "len", "module builtins"),
                          (vars(operator), "index", "module operator")]:
        key = _Collides(name)
        _put_ahead(d, name, key)
        try:
            assert f"hook: a key that is not a string in {what}" in _quiet()
        finally:
            del d[key]
    key = type("Name", (str,), {"__eq__": lambda s, o: False, "__hash__": lambda s: hash("randn")})("randn")
    _put_ahead(vars(torch), "randn", key)  # a str subclass is no exact str
    try:
        assert "hook: a key that is not a string in module torch" in _quiet()
    finally:
        del vars(torch)[key]


def test_quiet_window_lets_a_namespace_grow_by_plain_names(window):
    for i in range(200):  # enough to resize torch's dict: its size moves, its keys are all names
        setattr(torch, f"_kw_window_test_{i}", i)
    try:
        assert _quiet() == []
    finally:
        for i in range(200):
            delattr(torch, f"_kw_window_test_{i}")


def test_quiet_window_reports_randoms_instance_given_another_dict(window):
    import random

    inst, was = random._inst, vars(random._inst)
    inst.__dict__ = dict(was)
    try:
        assert "hook: random's instance given another dict" in _quiet()
    finally:
        inst.__dict__ = was


def test_the_module_watch_refuses_a_key_that_is_not_a_string_builtins_included():
    import builtins

    recorded = watch.module_state()
    key = _Collides("len")
    _put_ahead(vars(builtins), "len", key)
    try:
        assert "builtins (a key that is not a string)" in watch.modules_moved(recorded)
    finally:
        del vars(builtins)[key]
    assert "builtins (a key that is not a string)" not in watch.modules_moved(recorded)
