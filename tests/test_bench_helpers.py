"""Helpers of the GPU benchmark scripts, on the CPU: the variants of tail_bench, the timing make-up
that warm_bench records for every verdict it compares, and the per-call records it reads from its
service's log (one test starts that service)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"kw_bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BENCH))
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(BENCH))
    return mod


tail = _load("tail_bench")
warm = _load("warm_bench")
replay = _load("charge_replay")


@pytest.mark.parametrize(("text", "want"), [("plain", (None, False, False)), ("spin", ("spin", False, False)), ("pin", (None, True, False)),
                                            ("blocking+pin", ("blocking", True, False)), ("pin+yield", ("yield", True, False)),
                                            ("fork", (None, False, True)), ("spin+fork+pin", ("spin", True, True))])
def test_tail_variants_parse(text, want):
    assert tail.parse_variant(text) == want


@pytest.mark.parametrize("text", ["", "fast", "spin+yield", "plain+pin", "spin+pin+x", "pin+pin"])
def test_tail_variants_refuse_what_they_cannot_run(text):
    with pytest.raises(ValueError, match="variant"):
        tail.parse_variant(text)


def test_tail_summary_counts_slow_processes_against_the_quietest():
    runs = [{"variant": "plain", "rows": {"spin": {"100": {"tail_median_us": m}}}} for m in (13.0, 14.5, 28.1, 40.0)]
    runs += [{"variant": "spin", "rows": {"spin": {"100": {"tail_median_us": 12.0}}}}, {"variant": "spin", "error": "no GPU"}]
    got = tail.summarize(runs, [100])
    assert got["plain"]["100"] == {"tail_medians_us": [13.0, 14.5, 28.1, 40.0], "spread_us": 27.0, "slow": 2, "processes": 4}
    assert got["spin"]["100"]["processes"] == 1 and got["spin"]["100"]["slow"] == 0
    assert tail.slow_processes([]) == 0
    later = [{"variant": "plain", "rows": {"spin": {"100": {"tail_median_us": 13.0}}}, "rows_later": {"spin": {"100": {"tail_median_us": 31.0}}}}]
    assert tail.summarize(later, [100])["plain later"]["100"]["tail_medians_us"] == [31.0]


def test_warm_timing_diag_reads_the_charge_and_the_kernel_time():
    row = {"runtime_ms": 0.5417, "timing": {"raw_median_ms": 0.543, "overhead_ms": 0.0013, "profiler_ms": 0.5523, "n": 24, "iqr_ms": 0.011},
           "steps": [{"name": "l2_flush", "ran": True, "reason": ""},
                     {"name": "device_sync", "ran": True, "reason": "device-wide synchronize ...; calls charged: candidate 23 of 24 (margin 10 us)"}],
           "phases": [(0.05, "starting the children"), (0.61, "timing the candidate")], "workers": {"reference": "new"}, "span_s": (225.3, 232.7)}
    d = warm.timing_diag(row)
    assert d["charged"] == "calls charged: candidate 23 of 24 (margin 10 us)"
    assert (d["profiler_ms"], d["n"], d["reference"], d["timing_began_s"]) == (0.5523, 24, "new", 225.91)


def test_warm_timing_diag_of_a_correctness_only_verdict_is_empty_not_an_error():
    d = warm.timing_diag({"runtime_ms": None, "timing": None, "steps": [], "phases": [], "workers": None})
    assert d["charged"] is None and d["raw_median_ms"] is None and d["timing_began_s"] is None


def test_warm_timing_diag_through_a_service_takes_the_services_log():
    row = {"runtime_ms": 0.26, "timing": {}, "steps": [], "phases": [(1.146, "verdict serialized")], "span_s": (10.0, 11.2),
           "service": {"queued_s": 0.25, "progress_log": [(0.1, "starting the children"), (0.586, "timing the candidate")]}}
    assert warm.timing_diag(row)["timing_began_s"] == 10.836


def _record(cand_hash: str, late_us: float, null: bool = True) -> dict:
    """A per-call record as judge.phases_pricing logs it: 24 calls of 0.27 ms whose device-wide end comes
    13 us (the empty call's tail) plus late_us after the stream's end."""
    stream = [0.270] * 24
    empty = {"reference": [0.004] * 6, "candidate": [0.004] * 6} if null else {}
    return {"contenders": {"candidate": {"times_ms": stream, "synced_ms": [t + 0.013 + late_us / 1e3 for t in stream]}},
            "null_ms": empty, "null_synced_ms": {k: [0.017] * 6 for k in empty}, "held": {}, "null_tail_before_ms": None,
            "held_tail_before_ms": None, "null_before_ms": None, "candidate_hash": cand_hash, "problem_hash": "p"}


def _line(rec: dict) -> str:
    import json

    from kernelwright.judge.phases_pricing import SAMPLES_PREFIX

    return f"DEBUG kernelwright.judge.phases_pricing: {SAMPLES_PREFIX}{json.dumps(rec)}\n"


def test_charge_replay_reads_records_from_a_log_and_keys_them_by_verdict():
    from kernelwright.judge.phases_pricing import SAMPLES_PREFIX

    text = "WARNING something else\n" + _line(_record("a", 2)) + _line(_record("c", 0)) + _line(_record("c", 0)) + f"{SAMPLES_PREFIX}{{cut"
    recs = replay.samples_in_log(text)
    assert [r["candidate_hash"] for r in recs] == ["a", "c", "c"]  # the line cut short is skipped
    keyed = replay.by_candidate(recs + [{**_record("a", 2), "problem_hash": "q"}])
    assert sorted(keyed) == ["p:a", "p:c", "q:a"] and keyed["p:c"] is None  # priced twice: whose record is which cannot be told
    retimed = replay.by_candidate([{**_record("d", 30), "superseded": True}, _record("d", 2)])
    assert retimed["p:d"] == _record("d", 2)  # the window timed again was not priced: the last one is the verdict's


def test_charge_replay_summarizes_a_record_with_and_without_the_charge():
    quiet, late = replay.replay_summary(_record("a", 2)), replay.replay_summary(_record("a", 30))
    assert quiet["n"] == late["n"] == 24 and quiet["stream_ms"] == pytest.approx(late["stream_ms"])
    assert quiet["beyond_charged"] == 0 and quiet["beyond_ms"] == pytest.approx(quiet["stream_ms"])
    assert late["beyond_charged"] == 24 and late["beyond_ms"] > late["stream_ms"] + 0.015  # 30 us late, 10 us margin
    bare = replay.replay_summary(_record("a", 0, null=False))  # no empty calls: every call priced at its device-wide time
    assert bare["beyond_charged"] == 24 and bare["beyond_ms"] == pytest.approx(0.283)
    assert replay.replay_summary(None) is None
    doc = {"samples_by_verdict": [{"label": "v0 (alone, correct)", "record": _record("a", 2)}, {"label": "v0 (concurrent)", "record": None}]}
    assert [label for label, _ in replay.records(doc)] == ["v0 (alone, correct)"]


def test_warm_gives_each_compared_verdict_its_own_record_alone_and_concurrent():
    """The sequential verdicts' log and the concurrent ones' are read apart: each row's concurrent
    record comes from the second, its alone record (by the alone verdict's own hash) from the first."""
    rows = [{"candidate": f"v{k}", "candidate_path": f"/x/v{k}", "status": "correct", "problem_hash": "p", "candidate_hash": h,
             "diag": {}, "alone_diag": {}} for k, h in enumerate(("a", "b"))]
    rows[1]["candidate_hash"], rows[1]["status"] = None, "error"  # the concurrent verdict ended before its build was hashed
    alone = {f"/x/v{k}": {"status": "correct", "problem_hash": "p", "candidate_hash": h} for k, h in enumerate(("a", "b"))}
    kept = warm.attach_records(rows, alone, _line(_record("a", 2)) + _line(_record("b", 2)), _line(_record("a", 30)))
    assert rows[0]["diag"]["replay"]["beyond_charged"] == 24 and rows[0]["alone_diag"]["replay"]["beyond_charged"] == 0
    assert rows[1]["diag"]["replay"] is None and rows[1]["alone_diag"]["replay"]["n"] == 24
    assert [k["label"] for k in kept] == ["v0 (concurrent, correct)", "v0 (alone, correct)", "v1 (alone, correct)"]
    broken = [{**rows[0], "diag": {}, "alone_diag": {}}]
    assert warm.attach_records(broken, alone, _line({**_record("a", 2), "contenders": None}), "") and broken[0]["alone_diag"]["replay"] is None
    assert "replay_error" in broken[0]["alone_diag"]  # a record the replay cannot read costs the row its replay, not the section


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_warm_benchs_service_logs_each_timed_verdicts_record(tmp_path):
    """The wiring end to end on the CPU: the service warm_bench starts has written the judge's
    per-call record of a timed verdict, with its hashes, by the time the verdict arrives (the
    concurrent section splits its log there), and nothing else at debug level."""
    import types

    from conftest import candidate, problem, timing_policy
    from kernelwright.client import Judge

    a = types.SimpleNamespace(out=tmp_path, work=tmp_path, store=tmp_path / "store.sqlite", serve_workers=1)
    proc, url = warm._service(a, "serve-test")
    try:
        v = Judge(url, device="cpu").evaluate(problem("rowsum"), candidate("rowsum_correct"), timing_policy())
        got = replay.by_candidate(replay.samples_in_log(warm._log_text(a, url, 0)))  # at once: no wait
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert v.status.value == "correct", v.log
    key = f"{v.problem['hash']}:{v.candidate['hash']}"
    assert list(got) == [key] and len(got[key]["contenders"]["candidate"]["times_ms"]) >= 5
    assert warm._log_size(a, url) > 0 and warm._log_text(types.SimpleNamespace(), url, 0) == ""
    assert "DEBUG" not in "".join(x for x in (tmp_path / "serve-test.log").read_text().splitlines(True) if "timing samples" not in x)


def test_warm_bench_reads_each_commands_memory_from_a_service_log(caplog):
    """The memory section's per-command figures: the lines judge.workers.memory writes when a
    child's reply carries them (written here through the judge's own Child), parsed back, and per
    child the command with the highest allocator peak plus staging."""
    import logging

    warm_bench = _load("warm_bench")
    from test_handover import _child

    with caplog.at_level(logging.DEBUG, logger="kernelwright.judge.workers.memory"):
        for command, mem in (("run_case", [900, 1200, 512, 700, 800, 10]), ("profile", [1500, 1600, 512, 1300, 1400, 0]),
                             ("time", [1500, 1550, 512, 1300, 1350, 0])):
            child, writer = _child()
            writer.send({"ok": True, "result": {"memory_mib": mem}})
            child.wait(command, timeout_s=2)
    pid = child._proc.pid
    old_line = "reference child 7 after 'compare': memory_mib [reserved, peak since its last reply, staging] [1, 2, 0]"  # before 2026-12-04's split figures
    rows = warm_bench.command_peaks(caplog.text + f"\n{old_line}\n"
                                    "reference child 8 after 'time': memory_mib [reserved, peak since its last reply, staging, allocated, "
                                    "allocated peak, inactive split] [5, 6, 0, 3, 4, 1]\n")
    assert rows[0] == ["candidate", pid, "run_case", 900, 1200, 512, 700, 800, 10] and len(rows) == 5
    assert rows[-1] == ["reference", 8, "time", 5, 6, 0, 3, 4, 1]  # the split figures, since they were added
    assert warm_bench.top_commands(rows) == {f"candidate:{pid}": ["profile", 2112], "reference:7": ["compare", 2], "reference:8": ["time", 6]}
    spare = ["candidate", 9, "warm", 2, 2, 0]
    assert warm_bench.own_children(rows + [spare]) == {pid, 7, 8}  # a spare made ready meanwhile is the service's


def test_warm_bench_seeds_the_baselines_once_when_its_section_did_not_run(monkeypatch):
    """Sections that judge with baselines cached store them first when section baseline has not
    run (a kbprotocol section alone measured baselines in every verdict: 2.2 s, not 1.3), and
    only once."""
    warm_bench = _load("warm_bench")

    ran = []

    def fake(a, doc):
        ran.append(1)
        doc["baseline"] = {"rc": 0}

    monkeypatch.setattr(warm_bench, "sec_baseline", fake)
    doc: dict = {}
    warm_bench._seed_baselines(None, doc)
    warm_bench._seed_baselines(None, doc)
    assert ran == [1] and doc["baseline"] == {"rc": 0}


def test_warm_bench_loaded_context_is_read_only_from_a_process_whose_allocator_is_empty(monkeypatch):
    """The loaded context (a process that ran the problem's forward and gave every tensor back) is
    nvidia-smi's figure for that process only when the process says its allocator holds nothing;
    a process that failed, or still holds memory, gives None, never a number the memory section
    would take off. The script itself compiles."""
    import io

    warm_bench = _load("warm_bench")
    compile(warm_bench.LOADED_CONTEXT, "loaded_context", "exec")

    class FakeProc:
        def __init__(self, line: str) -> None:
            self.stdout, self.pid, self.killed = io.StringIO(line), 4242, False

        def kill(self) -> None:
            self.killed = True

        def wait(self) -> int:
            return 0

    asked = []
    monkeypatch.setattr(warm_bench, "_smi_mib", lambda pid: asked.append(pid) or 700)
    monkeypatch.setattr(warm_bench.time, "sleep", lambda _s: None)
    for line, want in (("ready 0\n", 700), ("ready 5242880\n", None), ("", None), ("Traceback (most recent call last)\n", None)):
        procs = []
        monkeypatch.setattr(warm_bench.subprocess, "Popen", lambda *a, line=line, **k: procs.append(FakeProc(line)) or procs[-1])
        assert warm_bench.loaded_context_mib(BENCH.parent / "examples" / "cuda" / "softmax" / "problem.py") == want, line
        assert procs[0].killed  # never left running
    assert asked == [4242]


def test_flush_bench_ratios_and_its_refusal_without_a_gpu():
    """flush_bench's rows: the median under each flush and the old one's over the new one's; on a
    machine without CUDA it says so and exits 2 rather than time anything."""
    import subprocess

    flush_bench = _load("flush_bench")
    rows = flush_bench.ratio_rows({"eager": {"int32": [1.0, 2.0, 3.0], "int64": [2.0, 2.2, 2.4]}})
    assert rows == {"eager": {"int32_ms": 2.0, "int64_ms": 2.2, "old_over_new": 1.1}}
    import torch

    if not torch.cuda.is_available():
        proc = subprocess.run([sys.executable, str(BENCH / "flush_bench.py"), "--out", "/nonexistent/never"], capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2 and "needs a CUDA device" in proc.stderr


def test_warm_bench_prebuilds_the_candidate_into_the_cache_the_service_inherits(monkeypatch, tmp_path):
    """The serve section's first verdict is a cold reference (build cached): the bench builds the
    candidate's raw kernels first in the cache its service inherits, and a second build is a hit.
    Up to e2fbfda it did not, and that verdict compiled the kernel on the H200."""
    from kernelwright.judge import build

    if build.find_compiler("cpp") is None:
        pytest.skip("g++ is not installed")
    warm_bench = _load("warm_bench")
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    lines = []
    monkeypatch.setattr(warm_bench, "log_line", lambda a, text: lines.append(text))
    a = type("A", (), {"candidate": BENCH.parent / "examples" / "cpu" / "softmax"})()
    first = warm_bench._prebuild(a)
    again = warm_bench._prebuild(a)
    assert first and all(r["ok"] for r in first) and not any(r["cached"] for r in first), first
    assert all(r["ok"] and r["cached"] for r in again), again
    assert (tmp_path / "cache" / "builds").is_dir() and "prebuild" in lines[0]


def test_the_benches_provenance_names_the_hosts_cpu_and_its_calibration():
    """Two runs of one commit on two hosts differ by their CPUs: the provenance says which CPU and
    how fast it ran a fixed workload."""
    host = _load("hostinfo").host()
    assert isinstance(host["cpu_model"], str) and host["cpu_model"]
    cal = host["calibration"]
    assert set(cal) == {"python_loop_ms", "sha256_16mib_ms"}
    assert all(isinstance(v, float) and 0 < v < 60_000 for v in cal.values())
    import types

    prov = warm.provenance(types.SimpleNamespace(device="cpu", commit="c0ffee"))  # warm_bench's, which memory_bench uses too
    assert set(prov["host"]) == {"cpu_model", "calibration", "topology"} and prov["host"]["cpu_model"] == host["cpu_model"]
    assert set(host["topology"]) == {"numa_nodes", "gpu_local_cpus"}


def test_the_hosts_cpu_time_shares_between_two_readings():
    hostinfo = _load("hostinfo")
    before = {"user": 10.0, "idle": 80.0, "steal": 0.0}
    after = {"user": 13.0, "idle": 86.0, "steal": 1.0}
    assert hostinfo.shares(before, after) == {"user": 0.3, "idle": 0.6, "steal": 0.1}
    assert hostinfo.shares(after, after) == {}
    now = hostinfo.cpu_seconds()
    if Path("/proc/stat").exists():
        assert {"user", "idle", "steal"} <= set(now) and all(v >= 0 for v in now.values())


def test_memory_section_names_the_phase_its_peak_fell_in():
    """The peak of a verdict's own children, its sample's time and the service's progress message
    then: the sample of the highest own sum, other processes left out; the log shifted by the time
    queued."""
    mem = warm.GpuMemory("cpu")  # no sampling thread: the samples are written here
    mem.samples = [
        (10.0, 900, {"reference:1": 400, "candidate:2": 300, "other:9": 200}),
        (10.5, 1500, {"reference:1": 412, "candidate:2": 386, "other:9": 702}),  # the highest sum of all, not of pids 1 and 2
        (11.0, 1000, {"reference:1": 412, "candidate:2": 500, "other:9": 88}),
        (12.0, 1200, {"reference:1": 900, "candidate:2": 900}),  # after the window
    ]
    assert mem.peak_of(10.0, 11.5, {1, 2}) == (912, {"reference:1": 412, "candidate:2": 500}, 11.0)
    assert mem.peak_of(10.0, 11.5, {7}) == (None, {}, None)
    log = [[0.01, "problem loaded"], [0.1, "checking correctness on 15 input sets"], [0.8, "timing the candidate"]]
    assert warm.phase_at(log, 0.2, 1.05) == "timing the candidate"
    assert warm.phase_at(log, 0.2, 0.95) == "checking correctness on 15 input sets"  # 0.8 + 0.2 queued is after 0.95
    assert warm.phase_at(log, None, 0.005) == "before the first progress message"
    assert warm.phase_at(None, 0.0, 1.0) is None and warm.phase_at(log, 0.0, None) is None


def test_memory_rows_count_the_flush_buffers_held_at_the_peak():
    """A timed verdict's reference child holds its flush buffer from its set-up, the candidate
    child from its timing set-up; a correctness-only row takes none off."""
    assert warm.flush_buffers_at(True, "timed 24 candidate calls") == 0
    assert warm.flush_buffers_at(False, "checking correctness on 15 input sets") == 1
    assert warm.flush_buffers_at(False, "importing the candidate") == 1
    assert warm.flush_buffers_at(False, None) == 1
    for phase in ("warming up the candidate (baselines ready)", "timed 24 candidate calls (stop)", "profiled; applying the timing guards"):
        assert warm.flush_buffers_at(False, phase) == 2


def test_retime_replay_redraws_only_the_windows_its_trigger_picks(tmp_path):
    """Two candidates, each alone and concurrent: one pair 7.5 % apart by the charge (its
    concurrent window 30 us late), the other level. With no trigger the replay finds the recorded
    pair outside 2 %; with the charge trigger only that window is timed again (a quarter of the
    windows), drawn from the same problem's windows, three of four of them uncharged."""
    import json

    retime = _load("retime_replay")
    rows = [{"label": f"variants/softmax/{v} ({kind}, correct)", "status": "correct", "record": _record(v, late)}
            for v, kind, late in (("v0", "alone", 0), ("v0", "concurrent", 30), ("v1", "alone", 0), ("v1", "concurrent", 0))]
    path = tmp_path / "concurrent_samples.json"
    path.write_text(json.dumps({"provenance": {}, "samples_by_verdict": rows}))
    pairs = retime.windows([path])
    assert len(pairs) == 2 and pairs[(path.name, "softmax", "v0")]["concurrent"][1] == pytest.approx(20 / 266 * 100, rel=1e-3)  # less the 4 us harness overhead
    assert retime.simulate(pairs, retime.TRIGGERS["none"], 10, 1) == {"pairs_outside_2pct": 1.0, "windows_timed_again": 0.0}
    got = retime.simulate(pairs, retime.TRIGGERS["charge>1"], 400, 1)
    assert got["windows_timed_again"] == 0.25 and 0.1 < got["pairs_outside_2pct"] < 0.45


def test_verdict_phases_split_a_served_verdict_and_skip_what_they_cannot_read():
    """benchmarks/verdict_phases: the soak's and the throughput run's account of where a verdict's
    time went, from the service's progress log (the messages as judge.evaluate says them)."""
    phases = _load("verdict_phases")
    job = {"queued_s": 0.5, "judged_s": 2.0, "progress_log": [
        [0.01, "starting the children"], [0.1, "waiting for GPU memory: 2 GiB"], [0.2, "checking correctness on 15 input sets"],
        [0.9, "correctness cases done in 0.70 s"], [1.0, "waiting for the GPU (cuda-0): another evaluation is timing; then timing"],
        [1.3, "timing the candidate"], [1.8, "timed 24 candidate calls"], [1.9, "verdict correct"], [1.9, "verdict serialized"]]}
    got = phases.milestones(job)
    assert got["at"] == {"children": 0.01, "correctness": 0.2, "correctness_done": 0.9, "lock_wait": 1.0, "timing": 1.3, "timed": 1.8, "verdict": 1.9}
    rows = [{"status": "correct", "service": got}, {"status": "runtime_error", "service": got},
            {"status": "correct", "service": phases.milestones({"progress_log": [[0.1, None]]})}]
    summary = phases.phase_medians(rows)
    assert summary["n"] == 1 and summary["waited_for_the_lock"] == 1
    assert summary["median_s"] == pytest.approx({"queued": 0.5, "setup": 0.2, "correctness": 0.7, "to_timing": 0.4, "timing": 0.6, "after": 0.1})
    assert phases.phase_medians([]) == {"n": 0, "waited_for_the_lock": 0, "median_s": {}}


def test_rollout_bench_splits_a_final_verdict_into_its_phases():
    rollout = _load("rl_rollout_bench")
    heard = [[0.01, "building 1 raw kernel source(s)"], [0.5, "checking correctness on 11 input sets"],
             [2.0, "correctness cases done in 1.5 s"], [2.5, "waiting for the GPU (cuda): other work is running on it; then timing"],
             [9.0, "timing candidate, eager and torch.compile"], [20.0, "warming up the candidate (baselines ready, torch.compile took 8.5 s)"],
             [26.0, "timed 200 candidate calls (time budget 5 s spent); profiling one call"], [26.25, "verdict correct"]]
    assert rollout.final_phases(heard) == {"setup": 0.5, "correctness": 1.5, "to_timing": 7.0, "timing_setup": 11.0, "timing": 6.0,
                                           "guards": 0.25, "reference_compile": 8.5}
    assert rollout.final_phases(heard, seconds=30.0)["after_verdict"] == 3.75  # on CUDA the compute-sanitizer's run
    retimed = heard[:-1] + [[27.0, "retiming: torch.compile took 0.4 s"], [30.0, "verdict correct"]]
    assert rollout.final_phases(retimed)["reference_compile"] == 8.5  # the first build's, not the retime's cache load
    refused = heard[:3] + [[2.2, "verdict rejected"]]  # refused before timing: no timing phases, none made up
    assert rollout.final_phases(refused) == {"setup": 0.5, "correctness": 1.5}
    assert rollout.final_phases(refused, seconds=2.5) == {"setup": 0.5, "correctness": 1.5, "unheard": 0.5}
    assert rollout.final_phases([[1.0, "torch.compile took ? s"]]) == {}
    assert rollout.final_phases([]) == {}


def test_repeat_bench_spread_is_judged_only_when_every_verdict_asked_for_is_timed():
    rep = _load("repeat_bench")
    rows = [{"example": "a", "round": k, "status": "correct", "runtime_ms": t} for k, t in enumerate([1.00, 1.01, 1.015], 1)]
    rows += [{"example": "b", "round": 1, "status": "correct", "runtime_ms": 2.0}, {"example": "b", "round": 2, "status": "correct", "runtime_ms": 2.1},
             {"example": "b", "round": 3, "status": "incorrect", "runtime_ms": None}]
    s = rep.summarise(rows, ["a", "b", "c"], 3)
    assert s["a"]["median_ms"] == 1.01 and abs(s["a"]["spread"] - 0.015 / 1.01) < 1e-12 and s["a"]["within_limit"] is True
    # b: only 2 of 3 timed (one verdict incorrect), 2.0 -> 2.1 is 4.9 %: not judged, and the status shows
    assert s["b"]["within_limit"] is None and s["b"]["statuses"] == ["correct", "incorrect"] and s["b"]["spread"] > 0.02
    assert s["c"] == {"verdicts": 0, "statuses": [], "runtime_ms": [], "within_limit": None}
    wide = rep.summarise([{"example": "a", "round": k, "status": "correct", "runtime_ms": t} for k, t in enumerate([1.0, 1.03], 1)], ["a"], 2)
    assert wide["a"]["within_limit"] is False
    assert "| a | 2 | correct |" in rep.table({"provenance": {"device": "cpu", "gpu": None, "commit": "c", "date": "d", "command": "x"},
                                             "summary": wide})


def test_repeat_bench_names_the_examples_it_knows_and_refuses_others():
    rep = _load("repeat_bench")
    names = rep.examples("cpu", "")
    assert "softmax" in names and names == sorted(names)
    assert rep.examples("cpu", "softmax") == ["softmax"]
    with pytest.raises(SystemExit, match="no example nope"):
        rep.examples("cpu", "softmax,nope")


def test_repeat_bench_resumes_only_its_own_commit_and_device(tmp_path, monkeypatch):
    rep = _load("repeat_bench")
    old = {"provenance": {"commit": "aaaa", "device": "cpu"}, "rows": []}
    (tmp_path / "repeat_bench.json").write_text(__import__("json").dumps(old))
    monkeypatch.setattr(rep, "_provenance", lambda a: {"commit": "bbbb", "device": "cpu"})
    with pytest.raises(SystemExit, match=r"from aaaa on cpu \(no GPU, torch None\), not this run's bbbb"):
        rep.main(["--out", str(tmp_path), "--device", "cpu", "--n", "2", "--resume"])
    with pytest.raises(SystemExit, match="exists: pass --resume"):  # never written over without --resume
        rep.main(["--out", str(tmp_path), "--device", "cpu", "--n", "2"])


def test_repeat_bench_resumes_the_rounds_left_and_reruns_failed_ones(tmp_path, monkeypatch):
    """A fake judge: round 1 of softmax is in the file, round 1 of matmul ended infra_error. The
    resumed run judges only what is left, records a judgement that raised and runs on, and a
    deadline stops it with exit status 3."""
    import json

    from kernelwright.core.records import Status, Timing, Verdict
    from kernelwright.judge import evaluate as ev

    rep = _load("repeat_bench")
    prov = {"commit": "c", "device": "cpu", "gpu": None, "torch": "t", "date": "d", "command": "x"}
    monkeypatch.setattr(rep, "_provenance", lambda a: dict(prov))
    rows = [{"example": "softmax", "round": 1, "status": "correct", "runtime_ms": 1.0},
            {"example": "matmul", "round": 1, "status": "infra_error", "runtime_ms": None}]
    (tmp_path / "repeat_bench.json").write_text(json.dumps({"provenance": prov, "rows": rows}))
    asked = []

    def fake(problem, cand, policy, device):
        name = cand.name
        asked.append(name)
        assert policy.baselines == "skip" and device == "cpu"
        if name == "matmul" and asked.count("matmul") == 2:
            raise ValueError("a malformed setting")
        return Verdict(status=Status.CORRECT, problem={"name": "p"}, candidate={"hash": "h"}, policy={}, runtime_ms=1.0 + 0.001 * len(asked),
                       timing=Timing(n=24, median_ms=1.0, iqr_ms=0.01))

    monkeypatch.setattr(ev, "evaluate", fake)
    rc = rep.main(["--out", str(tmp_path), "--device", "cpu", "--n", "2", "--examples", "softmax,matmul", "--resume"])
    doc = json.loads((tmp_path / "repeat_bench.json").read_text())
    assert asked == ["matmul", "softmax", "matmul"]  # matmul 1 again, then round 2 of each; softmax 1 kept
    got = [(r["example"], r["round"], r["status"]) for r in doc["rows"]]
    assert got == [("softmax", 1, "correct"), ("matmul", 1, "infra_error"), ("matmul", 1, "correct"), ("softmax", 2, "correct"),
                   ("matmul", 2, "raised")]
    assert doc["rows"][2]["n"] == 24 and "ValueError: a malformed setting" in doc["rows"][4]["log"]
    assert rc == 1 and doc["summary"]["softmax"]["within_limit"] is True and doc["summary"]["matmul"]["within_limit"] is None
    asked.clear()
    rc = rep.main(["--out", str(tmp_path), "--device", "cpu", "--n", "3", "--examples", "softmax", "--resume", "--deadline-s", "0"])
    doc = json.loads((tmp_path / "repeat_bench.json").read_text())
    assert asked == [] and rc == rep.STOPPED and doc["stopped"].startswith("deadline")  # cut short, nothing wrong: 3, not 0 or 1


def test_suite_table_summary_per_level_and_one_record_check():
    suite = _load("suite_bench")
    prov = {"commit": "c1", "gpu": "G", "driver": "d", "torch": "t"}

    def row(name, level, eager=None, comp=None, gate=None, h=None):
        return {"name": name, "level": level, "category": "x", "hash": h or name, "eager_ms": eager, "compile_ms": comp,
                "baseline_source": "timed" if eager else None, "gate": gate, "floor_ms": 0.1, "bytes": 1e6, "flops": 0}

    ok, bad = {"degenerate": False, "findings": []}, {"degenerate": True, "findings": [{"check": "zeros", "native": True}]}
    call1 = {"provenance": prov, "policy": {}, "rows": [row("a", 1, 2.0, 1.0, ok), row("b", 1, 1.0, 2.0, ok), row("c", 2, None, None, bad),
                                                        row("d", 3, None, None, None)]}
    call2 = {"provenance": dict(prov), "policy": {}, "rows": [row("c", 2, 4.0, 1.0, None), row("d", 3, 1.0, 1.0, {"error": "boom"})]}
    s = suite.summary([call1, call2])
    l1, l2, l3 = s["levels"]["1"], s["levels"]["2"], s["levels"]["3"]
    assert (l1["problems"], l1["timed"], l1["gate_ok"]) == (2, 2, 2) and abs(l1["geomean_eager_over_compile"] - 1.0) < 1e-12
    assert l1["compile_slower"] == [("b", 0.5)]
    # call 2 timed c; its gate stays call 1's (degenerate), and d's failed gate counts as missing
    assert l2["timed"] == 1 and l2["gate_degenerate"] == ["c"] and abs(l2["geomean_eager_over_compile"] - 4.0) < 1e-12
    assert l3["gate_missing_or_error"] == ["d"] and l3["untimed"] == []
    assert s["one_record"] is True and "NOT ONE RECORD" not in suite.summary_text(s)
    mixed = suite.summary([call1, {**call2, "provenance": {**prov, "gpu": "H"}}])
    assert mixed["one_record"] is False and "gpu: G, H" in suite.summary_text(mixed)


scale = _load("pool_scale_bench")


def _bench(vpm: float, times: dict[str, float], status: str = "correct") -> dict:
    return {"verdicts_per_min": vpm, "rows": {n: {"status": status, "runtime_ms": t, "verdict_id": f"v{n}", "log_tail": ""} for n, t in times.items()}}


def test_pool_scale_summary_holds_issue_30s_limits_on_the_median_over_rounds():
    one = _bench(10.0, {"a": 1.0, "b": 2.0})
    rounds = [{"benches": {"1": one, "2": _bench(19.0, {"a": 1.01, "b": 2.0})}},
              {"benches": {"1": one, "2": _bench(17.0, {"a": 1.03, "b": 1.98})}},
              {"benches": {"1": one, "2": _bench(18.5, {"a": 1.015, "b": 2.02})}}]
    s = scale.scale_summary(rounds, 2)
    assert s["throughput_ratio_median"] == pytest.approx(1.85) and s["time_ratio_median"]["a"] == pytest.approx(1.015)
    assert s["worst_time_distance"] == pytest.approx(0.015) and s["same_statuses"] and s["within_limits"]
    slow = scale.scale_summary(rounds[1:2], 2)  # 1.7x: under 1.8
    assert not slow["within_limits"] and slow["worst_time_distance"] == pytest.approx(0.03)
    drift = [{"benches": {"1": one, "2": _bench(20.0, {"a": 1.03, "b": 2.0})}}]  # fast enough, a time 3 % off
    assert not scale.scale_summary(drift, 2)["within_limits"]
    other = [{"benches": {"1": one, "2": _bench(20.0, {"a": 1.0, "b": 2.0}, status="incorrect")}}]
    assert not scale.scale_summary(other, 2)["same_statuses"] and not scale.scale_summary(other, 2)["within_limits"]
    untimed = [{"benches": {"1": _bench(10.0, {"a": None}), "2": _bench(20.0, {"a": None})}}]
    assert not scale.scale_summary(untimed, 2)["within_limits"]  # nothing timed proves nothing
    four = [{"benches": {"1": one, "4": _bench(19.0, {"a": 1.0, "b": 2.0})}}]
    assert not scale.scale_summary(four, 4)["within_limits"]  # 1.9x on four workers: under 0.9 x 4
    assert scale.scale_summary([{"benches": {"1": one, "4": _bench(37.0, {"a": 1.0, "b": 2.0})}}], 4)["within_limits"]
    cut = rounds[:1] + [{"benches": {"1": one}}]  # a round cut between its benches does not count
    assert scale.scale_summary(cut, 2)["rounds"] == 1
    with pytest.raises(ValueError):
        scale.scale_summary([{"benches": {"1": one}}], 1)  # one worker against itself proves nothing


def test_pool_scale_kill_check_wants_every_row_once_and_the_lost_request_sent_again():
    b = _bench(10.0, {"a": 1.0, "b": 2.0})
    b["complete"] = True
    b["rows"]["b"]["log_tail"] = "...\n[pool] judged again after: worker 1: lost"
    want = {"a": "correct", "b": "correct"}
    ok = scale.kill_check(b, want, stored=2, replaced=1, retried=1, killed=True)
    assert ok["ok"] and ok["judged_again"] == ["b"]
    assert not scale.kill_check(b, want, stored=3, replaced=1, retried=1, killed=True)["checks"]["one_verdict_per_row"]  # one stored twice
    assert not scale.kill_check(b, want, stored=2, replaced=0, retried=0, killed=False)["ok"]  # the kill never happened
    assert not scale.kill_check(b, want, stored=2, replaced=1, retried=1, killed=False)["ok"]  # replaced, but not by the kill
    assert not scale.kill_check(b, {"a": "correct", "b": "incorrect"}, stored=2, replaced=1, retried=1, killed=True)["ok"]
    b["rows"]["b"]["verdict_id"] = "va"
    assert not scale.kill_check(b, want, stored=2, replaced=1, retried=1, killed=True)["checks"]["one_verdict_per_row"]
    b["rows"]["b"]["verdict_id"], b["complete"] = "vb", False
    assert not scale.kill_check(b, want, stored=2, replaced=1, retried=1, killed=True)["checks"]["complete"]


def test_pool_scale_suite_is_the_examples_with_their_candidates(tmp_path):
    names = scale.write_suite("cpu", tmp_path / "s")
    assert names and all((tmp_path / "s" / n / "model_new.py").is_file() for n in names)
    assert not list((tmp_path / "s").rglob("__pycache__"))
