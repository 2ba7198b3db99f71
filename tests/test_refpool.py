"""Warm reference children (judge.refpool): reused across evaluations of one problem and policy,
carrying nothing from one candidate to the next, closed when they fail, idle too long or overflow."""

from __future__ import annotations

import json
import os
import signal

import pytest

from conftest import JUDGE_TIMEOUT_S, candidate, correctness_policy, problem
from kernelwright.judge import refpool
from kernelwright.judge.evaluate import evaluate

GIB = 2**30
pytestmark = pytest.mark.timeout(JUDGE_TIMEOUT_S)


@pytest.fixture(autouse=True)
def empty_pool():
    refpool.POOL.close()
    yield
    refpool.POOL.close()


def _judge(cand: str, policy=None, prob: str = "rowsum"):
    said: list[str] = []
    verdict = evaluate(problem(prob), candidate(cand), policy or correctness_policy(), device="cpu", progress=said.append)
    warm = any("warm reference child" in m for m in said)
    return verdict, warm


def _idle_pids() -> list[int]:
    return [w.child._proc.pid for w in refpool.POOL._idle]


def test_the_second_evaluation_gets_the_first_ones_reference_child():
    first, warm1 = _judge("rowsum_correct")
    pids = _idle_pids()
    second, warm2 = _judge("rowsum_correct")
    assert (first.status.value, second.status.value) == ("correct", "correct")
    assert not warm1 and warm2 and len(pids) == 1 and _idle_pids() == pids


def test_nothing_carries_over_between_candidates():
    """Wrong, right, a candidate that patches the judge's comparison, wrong, right: each judged as
    if alone, all by one reference child."""
    statuses = [_judge(c)[0].status.value for c in ("rowsum_wrong", "rowsum_correct", "rowsum_taints_judge", "rowsum_wrong", "rowsum_correct")]
    assert statuses == ["incorrect", "correct", "rejected", "incorrect", "correct"]
    assert len(_idle_pids()) == 1


def test_another_policy_gets_another_reference_child():
    _judge("rowsum_correct")
    _, warm = _judge("rowsum_correct", correctness_policy(atol=1e-3, rtol=1e-3))
    assert not warm and len(_idle_pids()) == 2


def test_a_dead_idle_reference_child_is_not_used():
    _judge("rowsum_correct")
    (pid,) = _idle_pids()
    os.killpg(pid, signal.SIGKILL)
    refpool.POOL._idle[0].child._proc.wait(timeout=10)
    verdict, warm = _judge("rowsum_correct")
    assert verdict.status.value == "correct" and not warm and _idle_pids() != [pid]


def test_an_idle_reference_child_that_dies_unnoticed_is_replaced_not_an_infra_error(monkeypatch):
    """Killed as it was taken, before anyone saw it die (the fault soak on the H200 found two
    verdicts answered infra_error this way): its reset fails, a new child takes its place."""
    from kernelwright.judge.workers import Child

    _judge("rowsum_correct")
    (pid,) = _idle_pids()
    os.killpg(pid, signal.SIGKILL)
    monkeypatch.setattr(Child, "alive", lambda self: True)  # the pool has not noticed yet,
    monkeypatch.setattr(Child, "pending", lambda self: False)  # nor has the channel
    said: list[str] = []
    verdict = evaluate(problem("rowsum"), candidate("rowsum_correct"), correctness_policy(), device="cpu", progress=said.append)
    assert verdict.status.value == "correct", verdict.log
    assert any("failed its reset" in m and "setting up a new one" in m for m in said)


def test_a_crashing_candidate_leaves_the_reference_child_usable():
    crashed, _ = _judge("rowsum_segfault")
    assert crashed.status.value == "runtime_error"
    verdict, warm = _judge("rowsum_correct")
    assert verdict.status.value == "correct" and warm


def _closed(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kernelwright.judge.refpool" and r.getMessage().startswith("closed")]


def test_reuse_off_and_idle_timeout(monkeypatch, caplog):
    caplog.set_level("INFO", logger="kernelwright.judge.refpool")
    monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "0")
    _judge("rowsum_correct")
    assert _idle_pids() == []
    monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "1")
    monkeypatch.setenv("KERNELWRIGHT_WARM_IDLE_S", "0")
    _judge("rowsum_correct")
    _, warm = _judge("rowsum_correct")
    assert not warm  # expired before it was asked for
    assert any(m.startswith("closed the idle reference child of rowsum.py") and m.endswith("idle past 0 s") for m in _closed(caplog)), caplog.text


def test_the_pool_keeps_at_most_its_capacity(monkeypatch, caplog):
    caplog.set_level("INFO", logger="kernelwright.judge.refpool")
    monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "1")
    _judge("rowsum_correct")
    assert _closed(caplog) == []
    _judge("rowsum_correct", correctness_policy(atol=1e-3, rtol=1e-3))
    assert len(_idle_pids()) == 1
    assert _closed(caplog) == ["closed the idle reference child of rowsum.py (1 evaluations served): past the pool's capacity of 1"]
    _, warm = _judge("rowsum_correct", correctness_policy(atol=1e-3, rtol=1e-3))
    assert warm  # the newest stayed


def test_bad_settings_are_refused(monkeypatch):
    monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "many")
    with pytest.raises(ValueError, match="KERNELWRIGHT_WARM_REFERENCES must be a whole number"):
        refpool.capacity()


def test_a_reference_child_whose_problem_changed_on_disk_is_not_pooled(tmp_path):
    """The judge loaded the problem, then the file changed: the reference child (which imported the
    new text) stops the evaluation, and is closed rather than kept for a problem it never loaded."""
    from kernelwright.problems.loader import load_problem

    path = tmp_path / "rowsum.py"
    path.write_text(problem("rowsum").read_text())
    loaded = load_problem(path)
    path.write_text(problem("rowsum").read_text() + "\n# edited\n")
    verdict = evaluate(loaded, candidate("rowsum_correct"), correctness_policy(), device="cpu")
    assert verdict.status.value == "infra_error" and "changed on disk" in verdict.log
    assert _idle_pids() == []


def test_the_verdict_says_how_its_workers_came():
    first, _ = _judge("rowsum_correct")
    second, _ = _judge("rowsum_wrong")
    assert first.workers["reference"] == "new" and first.workers["reference_evaluations"] == 1
    waits = second.workers.pop("device_wait_s")  # seconds waited for the device lock, by mode
    assert second.workers == {"children": first.workers["children"], "reference": "warm", "reference_evaluations": 2,
                              "candidate": "new", "retimed": 0}  # spare candidate children are CUDA's by default (test_spares.py)
    assert set(waits) <= {"shared", "exclusive"} and all(w >= 0 for w in waits.values())


def test_a_service_keeps_one_idle_child_for_each_worker(monkeypatch):
    monkeypatch.delenv("KERNELWRIGHT_WARM_REFERENCES", raising=False)
    monkeypatch.setattr(refpool, "_at_once", 0)
    assert refpool.capacity() == refpool.DEFAULT_CAPACITY == 2
    from kernelwright.client.service import JudgeService

    service = JudgeService(workers=4)
    try:
        assert refpool.capacity() == 4
        JudgeService(workers=3).close()  # a smaller one in the same process lowers nothing
        assert refpool.capacity() == 4
        monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "1")
        assert refpool.capacity() == 1  # the environment's figure wins
        monkeypatch.setenv("KERNELWRIGHT_WARM_REFERENCES", "0")
        assert refpool.capacity() == 0  # and 0 still turns reuse off
    finally:
        service.close()


def test_the_pool_keeps_four_problems_warm_at_a_service_of_four(monkeypatch):
    """Four problems (one problem under four policies: each its own key) judged in turn, then again:
    every second verdict finds its reference child warm, where a pool of two keeps only the last two."""
    monkeypatch.delenv("KERNELWRIGHT_WARM_REFERENCES", raising=False)
    monkeypatch.setattr(refpool, "_at_once", 0)
    refpool.keep_for(4)
    policies = [correctness_policy(atol=a, rtol=a) for a in (1e-2, 1e-3, 1e-4, 1e-5)]
    for p in policies:
        _judge("rowsum_correct", p)
    assert len(_idle_pids()) == 4
    assert all(_judge("rowsum_correct", p)[1] for p in policies)


def _ledger(tmp_path, monkeypatch, total: int):
    from kernelwright.judge import memory

    monkeypatch.setenv("KERNELWRIGHT_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv(memory.FAKE_ENV, str(total))
    monkeypatch.setattr(memory, "POLL_S", 0.01)
    return lambda: sorted(v["bytes"] for v in json.loads((tmp_path / "cpu.mem").read_text()).values())


def test_an_idle_child_holds_its_context_on_the_memory_ledger_and_gives_it_up_when_taken(tmp_path, monkeypatch):
    from kernelwright.judge import memory

    entries = _ledger(tmp_path, monkeypatch, 100 * GIB)
    verdict, _ = _judge("rowsum_correct")
    assert verdict.status.value == "correct", verdict.log
    assert len(_idle_pids()) == 1 and entries() == [memory.CTX]  # the idle child's context, nothing of the verdict's
    verdict, warm = _judge("rowsum_correct")
    assert warm and entries() == [memory.CTX]  # taken (its entry went), then given back (a new one)
    kept = list(refpool.POOL._idle)  # held here: the entry must go with close(), not with garbage collection
    refpool.POOL.close()
    assert entries() == [] and kept


def test_an_idle_child_with_no_room_on_the_ledger_is_not_kept(tmp_path, monkeypatch):
    from kernelwright.judge import memory

    total = 100 * GIB
    entries = _ledger(tmp_path, monkeypatch, total)
    verdict, _ = _judge("rowsum_correct")
    e = verdict.to_dict()["memory"]["estimate_bytes"]
    refpool.POOL.close()
    # another verdict holds what leaves room for this one's estimate and not for an idle context beside it
    with memory.admitted("cpu", int(memory.ADMIT_SHARE * total) - e - memory.CTX // 2, total):
        verdict, _ = _judge("rowsum_correct")
        assert verdict.status.value == "correct", verdict.log
        assert not _idle_pids() and len(entries()) == 1  # closed, not pooled: only the other verdict's entry


def test_a_verdict_short_of_memory_closes_the_idle_children_before_it_waits(tmp_path, monkeypatch):
    from kernelwright.judge import memory

    total = 100 * GIB
    entries = _ledger(tmp_path, monkeypatch, total)
    verdict, _ = _judge("rowsum_correct")
    e = verdict.to_dict()["memory"]["estimate_bytes"]
    first = _idle_pids()
    assert len(first) == 1
    # room for the next verdict beside this reservation only once the idle child's context is gone
    other = int(memory.ADMIT_SHARE * total) - e - memory.CTX // 2
    with memory.admitted("cpu", other, total):
        said: list[str] = []
        verdict = evaluate(problem("rowsum"), candidate("rowsum_correct"), correctness_policy(atol=1e-3, rtol=1e-3),
                           device="cpu", progress=said.append)  # another key: it cannot take the idle child
        assert verdict.status.value == "correct", verdict.log
        assert any("closed 1 idle warm reference child(ren) to make room" in m for m in said), said
        assert verdict.to_dict()["memory"]["admitted_after_s"] < 5
        assert first[0] not in _idle_pids()
        assert not any("waiting for GPU memory" in m for m in said)
    assert entries() == ([memory.CTX] if _idle_pids() else [])


def test_a_child_handed_back_while_a_verdict_waits_for_memory_is_closed(tmp_path, monkeypatch, caplog):
    from kernelwright.judge import memory

    entries = _ledger(tmp_path, monkeypatch, 100 * GIB)
    _judge("rowsum_correct")
    assert len(_idle_pids()) == 1
    caplog.set_level("INFO", logger="kernelwright.judge.refpool")
    with refpool.POOL.waiting_for_memory() as closed:
        assert closed == 1 and not _idle_pids() and entries() == []
        verdict, _ = _judge("rowsum_correct", correctness_policy(atol=1e-3, rtol=1e-3))
        assert verdict.status.value == "correct", verdict.log
        assert not _idle_pids() and entries() == []  # its context went to the waiting verdict, not to the pool
    why = [m.split(": ", 1)[1] for m in _closed(caplog)]
    assert why == ["a verdict of this process waits for memory", "given back while a verdict of this process waits for memory"], caplog.text
    _judge("rowsum_correct")
    assert len(_idle_pids()) == 1 and entries() == [memory.CTX]  # nobody waits: kept again


def test_a_candidate_holding_the_ledgers_lock_cannot_stop_its_verdict(tmp_path, monkeypatch):
    """The candidate takes the ledger's lock at import and holds it while its process lives: the
    verdict ends, and its reference child is pooled once the candidate's process is gone."""
    entries = _ledger(tmp_path, monkeypatch, 100 * GIB)
    verdict, _ = _judge("rowsum_holds_the_ledger", correctness_policy(sandbox="off"))  # inside the sandbox it cannot open the ledger at all
    assert verdict.status.value == "correct", verdict.log
    assert len(_idle_pids()) == 1 and len(entries()) == 1


def test_a_child_whose_reservation_overlaps_the_start_of_a_wait_is_closed(tmp_path, monkeypatch):
    import contextlib

    from kernelwright.judge import memory

    entries = _ledger(tmp_path, monkeypatch, 100 * GIB)
    real = memory.admitted

    @contextlib.contextmanager
    def admitted_as_a_wait_begins(*args, **kw):
        with real(*args, **kw) as waited:
            if args[1] == memory.CTX:  # the idle child's reservation (a verdict's own is its whole estimate)
                refpool.POOL._waiting += 1  # another worker's verdict began to wait for memory meanwhile
            yield waited

    monkeypatch.setattr(memory, "admitted", admitted_as_a_wait_begins)
    try:
        verdict, _ = _judge("rowsum_correct")
        assert verdict.status.value == "correct", verdict.log
        assert refpool.POOL._waiting == 1  # the hand-back reserved, found nobody waiting, then somebody was
        assert not _idle_pids() and entries() == []
    finally:
        refpool.POOL._waiting = 0


def test_past_the_capacity_a_problems_second_idle_child_goes_before_another_problems_only_one():
    class W:
        def __init__(self, key: str) -> None:
            self.key = key

        def __repr__(self) -> str:
            return self.key

    a1, b, c, a2, d = W("a"), W("b"), W("c"), W("a"), W("d")  # oldest first; two of "a" from verdicts that ran at once
    assert refpool.past_capacity([a1, b, c, a2], 4) == []
    assert refpool.past_capacity([b, a1, a2], 2) == [a1]  # by age alone b, the only child of its problem, went
    assert refpool.past_capacity([b, a1, c, a2, d], 4) == [a1]
    assert refpool.past_capacity([b, a1, c, a2, d], 3) == [a1, b]  # then the oldest
    a3 = W("a")
    assert refpool.past_capacity([a1, a2, a3, b], 2) == [a1, a2]  # the newest of "a" stays
    assert refpool.past_capacity([b, c, d], 1) == [b, c]
    assert refpool.past_capacity([], 0) == []
