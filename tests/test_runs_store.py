"""Runs in the store (schema 3): migration, create/update/get/list, prefixes, step numbering under
concurrency, totals, review, strict JSON; and the history views built on them."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
from rich.console import Console

from kernelwright.agent import history
from kernelwright.core.runs import RunStatus, StepKind, Usage
from kernelwright.store import Store, migrations
from kernelwright.store.runs import new_run_id, strict_json

pytestmark = pytest.mark.timeout(60)

OBJECTIVE = {"target_speedup": 1.5, "strategy": "refine", "rounds": 5, "budget_tokens": None}


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "s.sqlite") as s:
        yield s


def make_run(store: Store, run_id: str | None = None, **changes) -> str:
    run_id = run_id or new_run_id()
    fields = dict(problem_hash="ph", problem_name="softmax", problem_spec="builtin:softmax", model="openai:gpt-x",
                  strategy="refine", objective=OBJECTIVE)
    fields.update(changes)
    store.create_run(run_id, **fields)
    return run_id


def _reject_constants(name: str) -> None:
    raise AssertionError(f"non-strict JSON constant {name} in the store")


def test_new_run_id_shape() -> None:
    ids = {new_run_id() for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("run-") and len(i) == 12 and int(i[4:], 16) >= 0 for i in ids)


def _v2_db(path: Path) -> None:
    """A store at version 2 made by hand, holding one problem and one baseline."""
    conn = sqlite3.connect(str(path))
    conn.executescript(migrations.V1_SQL + migrations.V2_SQL)
    conn.execute("INSERT INTO problems (hash, name, source) VALUES ('h', 'p', 'src')")
    conn.execute("INSERT INTO baselines VALUES ('h', 'm', 'fp32', 'default', 'p', 1.0, 2.0, '{\"eager_ms\": 1.0}', 't')")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()


def test_v2_store_migrates_to_v3_keeping_data(tmp_path: Path) -> None:
    path = tmp_path / "v2.sqlite"
    _v2_db(path)
    with Store.open(path) as s:
        assert s.schema_version == migrations.latest_version()
        assert s.get_problem("h")["name"] == "p"
        assert s.get_baseline("h", "m", "fp32", "default")["eager_ms"] == 1.0
        run_id = make_run(s)
        assert s.get_run(run_id)["status"] == "running"
        indexes = {r[0] for r in s._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "runs_status" in indexes


def test_create_get_update(store: Store, tmp_path: Path) -> None:
    run_id = make_run(store)
    run = store.get_run(run_id)
    assert run["id"] == run_id and run["status"] == RunStatus.RUNNING.value
    assert run["objective"] == OBJECTIVE and run["state"] is None and run["best"] is None
    assert run["approved"] is None and run["review_note"] is None and run["summary"] is None
    assert run["problem_spec"] == "builtin:softmax" and run["model"] == "openai:gpt-x"
    assert run["totals"] == {"steps": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": None}
    assert "objective_json" not in run

    store.update_run(run_id, status=RunStatus.PAUSED, state={"turn": 3, "messages": ["a"]}, summary="stuck")
    after = store.get_run(run_id)
    assert after["status"] == "paused" and after["state"] == {"turn": 3, "messages": ["a"]}
    assert after["summary"] == "stuck" and after["best"] is None
    assert after["created_at"] == run["created_at"] and after["updated_at"] > run["updated_at"]

    store.update_run(run_id, best={"candidate_hash": "c1", "speedup_vs_best": 2.0}, out_dir=tmp_path / "out")
    last = store.get_run(run_id)
    assert last["status"] == "paused" and last["summary"] == "stuck" and last["state"]["turn"] == 3
    assert last["best"]["candidate_hash"] == "c1" and last["out_dir"] == str(tmp_path / "out")
    store.update_run(run_id, status="succeeded")
    assert store.get_run(run_id)["status"] == "succeeded"


def test_bad_values_are_refused(store: Store) -> None:
    run_id = make_run(store)
    with pytest.raises(ValueError, match="already exists"):
        make_run(store, run_id)
    with pytest.raises(ValueError, match="run-1a2b3c4d.*'r-1'"):
        make_run(store, "r-1")
    with pytest.raises(ValueError, match="run status.*'done'"):
        store.update_run(run_id, status="done")
    with pytest.raises(ValueError, match="step kind.*'chat'"):
        store.add_step(run_id, "chat", {})
    with pytest.raises(KeyError, match=r"run-00000000.*s\.sqlite"):
        store.update_run("run-00000000", summary="x")
    with pytest.raises(KeyError, match="run-00000000"):
        store.add_step("run-00000000", StepKind.NOTE, {})
    with pytest.raises(ValueError, match="got 0"):
        store.list_runs(limit=0)


def test_list_runs_newest_first(store: Store) -> None:
    a = make_run(store, "run-aaaa0001")
    b = make_run(store, "run-bbbb0002")
    c = make_run(store, "run-cccc0003")
    store.update_run(b, status="paused", state={"big": "x" * 100})
    store.add_step(c, StepKind.RESPONSE, {"text": "hi"}, usage=Usage(10, 5, 0.25))
    runs = store.list_runs()
    assert [r["id"] for r in runs] == [c, b, a]
    assert all("state" not in r and "state_json" not in r for r in runs)
    assert runs[0]["totals"] == {"steps": 1, "prompt_tokens": 10, "completion_tokens": 5, "cost_usd": 0.25}
    assert runs[0]["objective"] == OBJECTIVE
    assert [r["id"] for r in store.list_runs(status=RunStatus.PAUSED)] == [b]
    assert [r["id"] for r in store.list_runs(limit=2)] == [c, b]
    assert store.list_runs(status="failed") == []


def test_prefix_lookup_and_ambiguity(store: Store) -> None:
    make_run(store, "run-aaaa1111")
    make_run(store, "run-aaaa2222")
    make_run(store, "run-bbbb0000")
    assert store.get_run("run-bbbb")["id"] == "run-bbbb0000"
    assert store.get_run("bbbb")["id"] == "run-bbbb0000"
    assert store.resolve_run_id("run-aaaa2") == "run-aaaa2222"
    with pytest.raises(ValueError, match=r"'run-aaaa' is ambiguous.*2 runs.*run-aaaa1111, run-aaaa2222"):
        store.get_run("run-aaaa")
    with pytest.raises(KeyError, match=r"'run-zz'.*s\.sqlite"):
        store.get_run("run-zz")
    with pytest.raises(KeyError):
        store.get_run("")
    with pytest.raises(KeyError):
        store.get_run("run-%")  # LIKE wildcards are taken literally
    store.add_step("run-bbbb0000", StepKind.NOTE, {"text": "n"})
    assert [s["seq"] for s in store.run_steps("bbbb")] == [0]
    assert store.run_totals("run-bbb")["steps"] == 1


def test_steps_in_order_with_kinds(store: Store) -> None:
    run_id = make_run(store)
    assert store.add_step(run_id, StepKind.PROMPT, {"messages": [{"role": "user", "content": "go"}]}, branch="t0") == 0
    assert store.add_step(run_id, "response", {"text": "ok"}, branch="t0", usage=Usage(100, 20)) == 1
    assert store.add_step(run_id, StepKind.CANDIDATE, {"candidate_hash": "c", "verdict": {"status": "correct"}},
                          branch="r1/b0") == 2
    steps = store.run_steps(run_id)
    assert [s["seq"] for s in steps] == [0, 1, 2]
    assert steps[1] == {**steps[1], "kind": "response", "branch": "t0", "payload": {"text": "ok"},
                        "prompt_tokens": 100, "completion_tokens": 20, "cost_usd": None}
    assert set(steps[0]) == {"seq", "kind", "branch", "payload", "prompt_tokens", "completion_tokens", "cost_usd", "created_at"}
    assert [s["seq"] for s in store.run_steps(run_id, kinds=[StepKind.CANDIDATE, "prompt"])] == [0, 2]
    assert store.run_steps(run_id, kinds=[]) == []
    with pytest.raises(TypeError, match="sequence"):
        store.run_steps(run_id, kinds="prompt")


def test_seq_unique_across_threads_with_own_connections(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite"
    with Store.open(path) as s:
        run_id = make_run(s)
    got: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def writer(tag: str) -> None:
        try:
            with Store.open(path) as s:
                for i in range(40):
                    seq = s.add_step(run_id, StepKind.NOTE, {"tag": tag, "i": i}, branch=tag)
                    with lock:
                        got.append(seq)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    assert errors == []
    assert sorted(got) == list(range(80))
    with Store.open(path) as s:
        steps = s.run_steps(run_id)
        assert [st["seq"] for st in steps] == list(range(80))
        assert [st["payload"]["i"] for st in steps if st["branch"] == "a"] == list(range(40))


def test_totals_with_and_without_cost(store: Store) -> None:
    run_id = make_run(store)
    store.add_step(run_id, StepKind.RESPONSE, {}, usage=Usage(100, 10))
    store.add_step(run_id, StepKind.RESPONSE, {}, usage=Usage(50, 5))
    assert store.run_totals(run_id) == {"steps": 2, "prompt_tokens": 150, "completion_tokens": 15, "cost_usd": None}
    store.add_step(run_id, StepKind.RESPONSE, {}, usage=Usage(1, 1, 0.5))
    store.add_step(run_id, StepKind.RESPONSE, {}, usage=Usage(1, 1, 0.25))
    store.add_step(run_id, StepKind.NOTE, {"text": "no usage"})
    totals = store.run_totals(run_id)
    assert totals == {"steps": 5, "prompt_tokens": 152, "completion_tokens": 17, "cost_usd": 0.75}
    assert store.get_run(run_id)["totals"] == totals


def test_review(store: Store) -> None:
    run_id = make_run(store, "run-1234abcd")
    store.review_run("run-1234", approved=True, note="numbers hold up")
    run = store.get_run(run_id)
    assert run["approved"] is True and run["review_note"] == "numbers hold up"
    store.review_run(run_id, approved=False, note="only fast on one shape")
    run = store.get_run(run_id)
    assert run["approved"] is False and run["review_note"] == "only fast on one shape"
    reviews = store.run_steps(run_id, kinds=[StepKind.REVIEW])
    assert [r["payload"] for r in reviews] == [{"approved": True, "note": "numbers hold up"},
                                               {"approved": False, "note": "only fast on one shape"}]


def test_strict_json_everywhere(store: Store) -> None:
    nan, inf = float("nan"), float("inf")
    run_id = make_run(store, objective={**OBJECTIVE, "target_speedup": inf})
    store.add_step(run_id, StepKind.CANDIDATE, {"verdict": {"runtime_ms": nan, "list": [inf, -inf, 1.0]}},
                   usage=Usage(1, 2, nan))
    store.update_run(run_id, state={"x": nan}, best={"speedup_vs_best": inf, "path": Path("/tmp/x")})
    for (text,) in store._conn.execute(
            "SELECT objective_json FROM runs UNION ALL SELECT state_json FROM runs UNION ALL SELECT best_json FROM runs "
            "UNION ALL SELECT payload_json FROM run_steps"):
        json.loads(text, parse_constant=_reject_constants)
    step = store.run_steps(run_id)[0]
    assert step["payload"] == {"verdict": {"runtime_ms": None, "list": [None, None, 1.0]}}
    assert step["cost_usd"] is None
    run = store.get_run(run_id)
    assert run["objective"]["target_speedup"] is None and run["state"] == {"x": None}
    assert run["best"] == {"speedup_vs_best": None, "path": "/tmp/x"}
    assert strict_json((StepKind.HINT, RunStatus.PAUSED)) == '["hint", "paused"]'


# -- history views ------------------------------------------------------------------------------


def _verdict(status: str, runtime: float | None, speedup: float | None, guard: str | None = None) -> dict:
    return {"status": status, "runtime_ms": runtime, "eager_ms": 2.0, "compile_ms": 1.6,
            "speedup_vs_eager": None if runtime is None else 2.0 / runtime,
            "speedup_vs_compile": None if runtime is None else 1.6 / runtime, "speedup_vs_best": speedup,
            "max_abs_error": 1e-7, "max_rel_error": 1e-6,
            "guards": [{"name": guard or "physics_floor", "fired": guard is not None, "detail": "too fast" if guard else ""}],
            "steps": [{"name": "l2_flush", "ran": False, "reason": "cpu backend"},
                      {"name": "events", "ran": False, "reason": "cpu backend"},
                      {"name": "seeds", "ran": True, "reason": ""}]}


def build_history_run(store: Store) -> tuple[dict, list[dict]]:
    """A finished run with three judged candidates, a pause, a hint, a final re-judge and a review."""
    run_id = make_run(store, "run-feed0001")
    store.add_step(run_id, StepKind.RESPONSE, {"text": "..."}, branch="t0", usage=Usage(1000, 200, 0.01))
    store.add_step(run_id, StepKind.CANDIDATE, {"candidate_hash": "aaaa1111bbbb2222", "verdict_id": "v-1",
                                                "verdict": _verdict("incorrect", None, None), "source": "reply"}, branch="t0")
    store.add_step(run_id, StepKind.CANDIDATE, {"candidate_hash": "cccc3333dddd4444", "verdict_id": "v-2",
                                                "verdict": _verdict("rejected", 0.001, None, "physics_floor"), "source": "tool"},
                   branch="t0")
    store.add_step(run_id, StepKind.CANDIDATE, {"candidate_hash": "eeee5555ffff6666", "verdict_id": "v-3",
                                                "verdict": _verdict("correct", 1.0, 1.6), "source": "reply"}, branch="t1")
    store.add_step(run_id, StepKind.PAUSE, {"summary": "4 candidates without gain"})
    store.add_step(run_id, StepKind.HINT, {"text": "try [vectorised] loads"})
    store.add_step(run_id, StepKind.FINAL, {"candidate_hash": "eeee5555ffff6666", "verdict": _verdict("correct", 1.1, 1.45)})
    store.update_run(run_id, status="succeeded", best={"candidate_hash": "eeee5555ffff6666", "verdict_id": "v-3",
                                                       "runtime_ms": 1.0, "speedup_vs_best": 1.6})
    store.review_run(run_id, approved=True, note="checked the shapes")
    return store.get_run(run_id), store.run_steps(run_id)


@pytest.fixture
def history_run(store: Store) -> tuple[dict, list[dict]]:
    return build_history_run(store)


def _render(fn, *args) -> str:
    console = Console(record=True, width=200, color_system=None)
    fn(console, *args)
    return console.export_text()


def test_print_runs(store: Store, history_run) -> None:
    make_run(store, "run-0000beef")
    text = _render(history.print_runs, store.list_runs())
    for needle in ("run-feed0001", "run-0000beef", "succeeded", "running", "softmax", "openai:gpt-x", "1.600x", "1200",
                   "$0.0100", "yes"):
        assert needle in text, needle


def test_print_run(history_run) -> None:
    run, steps = history_run
    text = _render(history.print_run, run, steps)
    for needle in ("run-feed0001", "succeeded", "builtin:softmax", "target_speedup=1.5", "best in the search: eeee5555ffff",
                   "judged candidates", "incorrect", "rejected", "tool", "t1", "1.600x", "vs best 1.450x",
                   "final re-judge (eeee5555ffff): correct", "paused (step 4): 4 candidates without gain",
                   "hint (step 5): try [vectorised] loads", "review: approved — checked the shapes",
                   "1000 prompt + 200 completion tokens, cost $0.0100"):
        assert needle in text, needle


def test_run_json_is_strict(history_run) -> None:
    run, steps = history_run
    data = history.run_json(run, steps)
    text = json.dumps(data, allow_nan=False)
    assert data["run"]["id"] == "run-feed0001"
    assert [c["status"] for c in data["candidates"]] == ["incorrect", "rejected", "correct"]
    assert data["final"]["candidate_hash"] == "eeee5555ffff6666"
    assert len(data["steps"]) == len(steps) and "NaN" not in text


def test_evidence(history_run) -> None:
    run, steps = history_run
    text = history.evidence(run, steps)
    for needle in ("Best candidate: eeee5555ffff6666 (verdict v-3, step 3, branch t1)",
                   "search verdict: correct; candidate 1 ms", "vs best 1.600x",
                   "guards that fired: none", "steps not run: l2_flush, events: cpu backend",
                   "Final re-judge on fresh seeds: eeee5555ffff6666 (the best candidate)", "vs best 1.450x",
                   "Search: 3 candidates judged (correct 1, incorrect 1, rejected 1)",
                   "guards fired during the search: physics_floor x1", "Review: approved — checked the shapes"):
        assert needle in text, needle


def _conversation_run(store: Store) -> str:
    """A run as the loop writes it: prompt, reply with a tool call, the call's result, the judged
    candidate, feedback, the next prompt, the final re-judge and the export; its best is a saved Entry."""
    run_id = make_run(store, "run-c0ffee01")
    good = _verdict("correct", 2.356, 0.254)
    store.add_step(run_id, StepKind.PROMPT, {"key": "t0", "messages": [{"role": "system", "content": "You write kernels."},
                                                                       {"role": "user", "content": "Reference program `softmax`"}]})
    call = {"id": "c1", "name": "write_file", "arguments": {"path": "model_new.py", "content": "import torch\nclass ModelNew: ..."}}
    store.add_step(run_id, StepKind.RESPONSE, {"key": "t0", "reply": {"text": "Softmax is memory bound.", "tool_calls": [call],
                                                                      "usage": {"prompt_tokens": 2305, "completion_tokens": 25}}},
                   usage=Usage(2305, 25, None))
    store.add_step(run_id, StepKind.TOOL_CALL, {"key": "t0", "call": call, "result": {"ok": True, "text": "wrote model_new.py (31 bytes)"}})
    store.add_step(run_id, StepKind.CANDIDATE, {"key": "t0", "candidate_hash": "d4c2756be0e6aaaa", "verdict_id": "v-9", "verdict": good,
                                                "source": "tool", "new_best": True})
    store.add_step(run_id, StepKind.FEEDBACK, {"key": "t0", "text": "status: correct, now make it faster"})
    store.add_step(run_id, StepKind.PROMPT, {"key": "t1", "messages": [{"role": "tool", "content": "wrote", "tool_call_id": "c1", "name": "write_file"},
                                                                       {"role": "user", "content": "status: correct, now make it faster"}]})
    store.add_step(run_id, StepKind.FINAL, {"candidate_hash": "d4c2756be0e6aaaa", "verdict": _verdict("correct", 2.379, 0.278)})
    store.add_step(run_id, StepKind.EXPORT, {"out_dir": "/tmp/out", "candidate_hash": "d4c2756be0e6aaaa", "verdict_id": "v-10"})
    store.update_run(run_id, status="finished", out_dir="/tmp/out",
                     best={"key": "t0", "candidate_hash": "d4c2756be0e6aaaa", "verdict_id": "v-9", "source": "tool", "idea": "",
                           "verdict": {"status": "correct", "runtime_ms": 2.356, "speedup_vs_best": 0.254}})
    return run_id


def test_runs_show_prints_the_conversation_and_the_best_entry(store: Store) -> None:
    """The text view had no prompts or replies, and the best line read "-, -" from a saved Entry."""
    run_id = _conversation_run(store)
    text = _render(history.print_run, store.get_run(run_id), store.run_steps(run_id))
    for needle in ("t0: prompt", "[system]", "You write kernels.", "Reference program `softmax`", "t0: reply", "2305 + 25 tokens",
                   "Softmax is memory bound.", "tool call write_file", "path: model_new.py", "class ModelNew: ...",
                   "wrote model_new.py (31 bytes)", "judged d4c2756be0e6: correct, 2.356 ms", "feedback to the model",
                   "status: correct, now make it faster", "[user: the feedback above]", "[tool result of write_file",
                   "best in the search: d4c2756be0e6 (step 3, branch -), 2.356 ms, 0.254x",
                   "exported: d4c2756be0e6, re-judged on fresh seeds 2.379 ms, 0.278x vs the faster baseline, in /tmp/out"):
        assert needle in text, needle
    assert text.count("status: correct, now make it faster") == 1  # feedback is not printed again with the prompt that carried it


def test_long_texts_are_clipped_unless_asked_in_full() -> None:
    steps = [{"seq": 0, "kind": "feedback", "payload": {"key": "t0", "text": "x" * 5000}}]
    assert "4000 more characters" in history.transcript(steps, limit=1000) and "x" * 5000 in history.transcript(steps, limit=None)


def test_runs_list_shows_the_exported_rejudged_figure(store: Store, tmp_path: Path, capsys) -> None:
    """`runs list` showed the search's 0.254x for a run whose export was re-judged at 0.278x."""
    from kernelwright.cli import main

    _conversation_run(store)
    make_run(store, "run-0000beef")
    store.update_run("run-0000beef", best={"verdict": {"status": "correct", "speedup_vs_best": 1.25}})
    with pytest.raises(SystemExit, match="0"):
        main(["runs", "list", "--store", str(store.path)])
    text = capsys.readouterr().out
    assert "0.278x re-judged" in text and "0.254x" not in text and "1.250x search" in text
    with pytest.raises(SystemExit, match="0"):
        main(["runs", "list", "--store", str(store.path), "--json"])
    listed = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["run-c0ffee01"]["export"]["verdict"]["speedup_vs_best"] == 0.278 and listed["run-0000beef"]["export"] is None
    assert listed["run-c0ffee01"]["totals"]["prompt_tokens"] == 2305


def test_a_replayed_reply_counts_its_recorded_tokens_and_no_cost(tmp_path: Path) -> None:
    """A replay's runs said `tokens 0` while its progress said 2330 tokens."""
    from kernelwright.core.runs import Reply
    from kernelwright.agent.runlog import RunLog

    with Store.open(tmp_path / "s.sqlite") as db:
        make_run(db, "run-4e9a1a70", model="replay:rec.json")
    log = RunLog(tmp_path / "s.sqlite", "run-4e9a1a70")
    log.reply("t0", "", Reply(text="hi", usage=Usage(2305, 25, 0.02)), replayed=True)
    log.reply("t1", "", Reply(text="hi", usage=Usage(10, 5, 0.01)))
    totals = log.db().run_totals("run-4e9a1a70")
    assert (log.tokens, totals["prompt_tokens"], totals["completion_tokens"]) == (2345, 2315, 30)
    assert totals["cost_usd"] == pytest.approx(0.01)  # the replayed reply's recorded cost was not spent now
    run = log.db().get_run("run-4e9a1a70")
    log.close()
    assert "(recorded by the replayed run; a replay spends nothing)" in history.totals_line(totals, run["model"])


def test_views_tolerate_a_bare_run() -> None:
    run = {"id": "run-00000000"}
    steps = [{"seq": 0, "kind": "candidate", "payload": {}}, {"seq": 1, "kind": "final", "payload": None}]
    assert "run-00000000" in _render(history.print_run, run, steps)
    assert "run-00000000" in _render(history.print_runs, [run])
    assert "Best candidate: none" in history.evidence(run, steps)
    json.dumps(history.run_json(run, steps), allow_nan=False)


def test_a_replay_stored_before_tokens_were_counted_shows_its_recorded_tokens(store: Store, capsys) -> None:
    """Runs stored before replays counted their tokens said `tokens 0` in `runs list`: their reply
    steps hold 0 in the token columns and the recording's usage in the payload. The views count
    the payload's tokens (and no cost) and leave the stored rows as they are."""
    from kernelwright.cli import main

    run_id = make_run(store, "run-01d4e91a", model="replay:rec.json")
    store.add_step(run_id, StepKind.PROMPT, {"key": "t0", "messages": []})
    for key, usage in (("t0", {"prompt_tokens": 2305, "completion_tokens": 25, "cost_usd": 0.02}), ("t1", {"prompt_tokens": 40})):
        store.add_step(run_id, StepKind.RESPONSE, {"key": key, "reply": {"text": "hi", "usage": usage}})  # as the old replay stored it
    store.add_step(run_id, StepKind.RESPONSE, {"key": "t2", "reply": {"text": "hi", "usage": "garbled"}})
    store.add_step(run_id, StepKind.RESPONSE, {"key": "t3", "reply": {"usage": {"prompt_tokens": 7, "completion_tokens": 3}}},
                   usage=Usage(7, 3, None))  # counted when stored: not counted twice
    expected = {"steps": 5, "prompt_tokens": 2352, "completion_tokens": 28, "cost_usd": None}
    assert store.get_run(run_id)["totals"] == store.run_totals(run_id) == store.list_runs()[0]["totals"] == expected
    assert [s["prompt_tokens"] for s in store.run_steps(run_id, kinds=[StepKind.RESPONSE])] == [0, 0, 0, 7]  # the store untouched
    with pytest.raises(SystemExit, match="0"):
        main(["runs", "list", "--store", str(store.path)])
    assert "2380" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="0"):
        main(["runs", "show", run_id, "--store", str(store.path)])
    assert "5 steps, 2352 prompt + 28 completion tokens" in capsys.readouterr().out
