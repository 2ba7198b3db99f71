"""Tasks for the RL environment (kernelwright.rl.tasks): splits by problem content, the suites and
a synthesis's tasks.jsonl."""

from __future__ import annotations

import json

import pytest

from conftest import PROBLEMS
from kernelwright.problems.loader import ProblemError
from kernelwright.rl.tasks import load_tasks, split_of

RELU = (PROBLEMS / "relu.py").read_text()


def test_the_split_is_the_problems_own_and_near_the_fraction_asked():
    hashes = [f"{i:064x}" for i in range(4000)]
    test = sum(split_of(h, 0.1) == "test" for h in hashes)
    assert 300 < test < 500, test
    assert all(split_of(h, 0.1) == split_of(h, 0.1) for h in hashes[:50])
    assert all(split_of(h, 0.0) == "train" for h in hashes[:200])
    with pytest.raises(ValueError, match="held-out"):
        split_of(hashes[0], 1.0)


def test_builtin_tasks_have_ids_levels_and_both_splits():
    tasks = load_tasks("builtin", heldout=0.2)
    assert len(tasks) > 40 and all(t.id.startswith("builtin:") for t in tasks)
    assert {t.split for t in tasks} == {"train", "test"}
    assert {t.meta["level"] for t in tasks} == {1, 2, 3}
    train = load_tasks("builtin", heldout=0.2, split="train")
    assert {t.id for t in train} == {t.id for t in tasks if t.split == "train"}


def _synth(tmp_path, rows):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_synthesis_tasks_jsonl_becomes_problem_files_with_the_cpu_program_on_the_cpu(tmp_path):
    small = RELU.replace("ROWS, COLS = 128, 1024", "ROWS, COLS = 8, 16")
    path = _synth(tmp_path, [{"id": "syn-s0-000001", "source": RELU, "check_source": small, "ops": ["relu"], "level": 1},
                             {"id": "syn-s0-000002", "source": RELU.replace("relu(x)", "relu(x) * 2")}])
    cpu = load_tasks(tmp_path, device="cpu", cache=tmp_path / "problems")
    assert [t.id for t in cpu] == ["syn-s0-000001", "syn-s0-000002"]
    assert cpu[0].problem.source == small and cpu[0].meta["ops"] == ["relu"]
    assert cpu[1].problem.source.endswith(RELU.replace("relu(x)", "relu(x) * 2")[-40:])
    cuda = load_tasks(path, device="cuda", cache=tmp_path / "problems")
    assert cuda[0].problem.source == RELU
    assert cpu[0].problem.path.read_text() == small  # the CPU tasks' files are not rewritten by the CUDA load
    # one split per task whichever program the device judges, the full program's (as a suite's file of it would get)
    for heldout in (0.3, 0.5, 0.7):
        a = load_tasks(path, device="cpu", cache=tmp_path / "problems", heldout=heldout)
        b = load_tasks(path, device="cuda", cache=tmp_path / "problems", heldout=heldout)
        assert [t.split for t in a] == [t.split for t in b] == [split_of(t.problem.hash, heldout) for t in b]


@pytest.mark.parametrize("line, match", [
    ('{"source": "x"}', ":1: not a synthesis task"),
    ("not json", ":1: not a synthesis task"),
    ('{"id": "../evil", "source": "x"}', "not a plain name"),
])
def test_a_malformed_tasks_line_is_named(tmp_path, line, match):
    (tmp_path / "tasks.jsonl").write_text(line + "\n")
    with pytest.raises(ProblemError, match=match):
        load_tasks(tmp_path / "tasks.jsonl", cache=tmp_path / "p")


def test_two_tasks_with_one_id_are_refused(tmp_path):
    path = _synth(tmp_path, [{"id": "a", "source": RELU}, {"id": "a", "source": RELU}])
    with pytest.raises(ProblemError, match="two tasks are called 'a'"):
        load_tasks(path, cache=tmp_path / "p")


def test_an_unknown_split_is_refused():
    with pytest.raises(ValueError, match="split"):
        load_tasks("builtin", split="valid")


def test_a_kernelbench_checkout_gives_tasks_named_by_level_and_number():
    from conftest import FIXTURES

    tasks = load_tasks(f"kernelbench:{FIXTURES / 'kernelbench'}", heldout=0.0)
    assert tasks and all(t.id.startswith("kernelbench:") and t.meta["suite"] == "kernelbench" for t in tasks)
    level, number = tasks[0].id.split(":")[1:]
    assert int(level) == tasks[0].meta["level"] and number.isdigit()
