"""Helpers of the GPU benchmark scripts, on the CPU: the variants of tail_bench, the timing make-up
that warm_bench records for every verdict it compares, and the per-call records it reads from its
service's log (one test starts that service)."""

from __future__ import annotations

import importlib.util
import sys
import time
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
    """A per-call record as judge.phases logs it: 24 calls of 0.27 ms whose device-wide end comes
    13 us (the empty call's tail) plus late_us after the stream's end."""
    stream = [0.270] * 24
    empty = {"reference": [0.004] * 6, "candidate": [0.004] * 6} if null else {}
    return {"contenders": {"candidate": {"times_ms": stream, "synced_ms": [t + 0.013 + late_us / 1e3 for t in stream]}},
            "null_ms": empty, "null_synced_ms": {k: [0.017] * 6 for k in empty}, "held": {}, "null_tail_before_ms": None,
            "held_tail_before_ms": None, "null_before_ms": None, "candidate_hash": cand_hash, "problem_hash": "p"}


def test_warm_finds_each_verdicts_per_call_record_in_a_service_log(tmp_path):
    import json
    import types

    from kernelwright.judge.phases import SAMPLES_PREFIX

    path = tmp_path / "serve.log"
    line = lambda rec: f"DEBUG kernelwright.judge.phases: {SAMPLES_PREFIX}{json.dumps(rec)}\n"  # noqa: E731
    path.write_text("WARNING something else\n" + line(_record("a", 2)) + line(_record("b", 30)))
    url = "unix:///x/kw.sock"
    a = types.SimpleNamespace(service_logs={url: path})
    mid = warm._log_size(a, url)
    with open(path, "a") as f:
        f.write(line(_record("a", 30)) + line(_record("c", 0)) + line(_record("c", 0)) + f"{SAMPLES_PREFIX}{{cut")
    alone = warm.samples_by_candidate(warm._log_records(a, url, 0, mid))
    later = warm.samples_by_candidate(warm._log_records(a, url, mid))
    assert sorted(alone) == ["a", "b"] and sorted(later) == ["a", "c"]
    assert alone["a"]["contenders"]["candidate"]["synced_ms"][0] == pytest.approx(0.285)
    assert later["a"]["contenders"]["candidate"]["synced_ms"][0] == pytest.approx(0.313)
    assert later["c"] is None  # priced twice after mid: whose record is which cannot be told
    assert warm._log_records(types.SimpleNamespace(), url, 0) == []


def test_warm_replays_a_record_with_and_without_the_charge():
    quiet, late = warm.replay_summary(_record("a", 2)), warm.replay_summary(_record("a", 30))
    assert quiet["n"] == late["n"] == 24 and quiet["stream_ms"] == pytest.approx(late["stream_ms"])
    assert quiet["beyond_charged"] == 0 and quiet["beyond_ms"] == pytest.approx(quiet["stream_ms"])
    assert late["beyond_charged"] == 24 and late["beyond_ms"] > late["stream_ms"] + 0.015  # 30 us late, 10 us margin
    bare = warm.replay_summary(_record("a", 0, null=False))  # no empty calls: every call priced at its device-wide time
    assert bare["beyond_charged"] == 24 and bare["beyond_ms"] == pytest.approx(0.283)
    assert warm.replay_summary(None) is None


def test_charge_replay_reads_warm_benchs_records(tmp_path):
    cr = _load("charge_replay")
    doc = {"samples_by_verdict": [{"label": "v0 (alone)", "record": _record("a", 2)}, {"label": "v0 (concurrent)", "record": None}]}
    assert [label for label, _ in cr.records(doc)] == ["v0 (alone)"]


@pytest.mark.timeout(120)
def test_warm_benchs_service_logs_each_timed_verdicts_record(tmp_path):
    """The wiring end to end on the CPU: the service warm_bench starts logs the judge's per-call
    record of a timed verdict, with that candidate's hash, and nothing else at debug level."""
    import types

    from conftest import candidate, problem, timing_policy
    from kernelwright.client import Judge

    a = types.SimpleNamespace(out=tmp_path, store=tmp_path / "store.sqlite", serve_workers=1)
    proc, url = warm._service(a, "serve-test")
    try:
        v = Judge(url, device="cpu").evaluate(problem("rowsum"), candidate("rowsum_correct"), timing_policy())
        assert v.status.value == "correct", v.log
        for _ in range(20):  # the log line is written before the verdict is sent; the file may lag a moment
            got = warm.samples_by_candidate(warm._log_records(a, url, 0))
            if got:
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert list(got) == [v.candidate["hash"]] and len(got[v.candidate["hash"]]["contenders"]["candidate"]["times_ms"]) >= 5
    assert "DEBUG" not in "".join(x for x in (tmp_path / "serve-test.log").read_text().splitlines(True) if "timing samples" not in x)
