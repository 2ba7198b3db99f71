"""`kernelwright bench`, `report` and `compare` on the CPU backend: a three-problem suite (one honest
candidate, one wrong, one missing), solutions from a folder and from a run in the store, resume after
a crash, and the usage errors. CPU times check the flow only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import affine_fixture as fx
from conftest import JUDGE_TIMEOUT_S, cli
from kernelwright.errors import UsageError
from kernelwright.report import bench as bench_mod
from kernelwright.report.bench import BenchConfig, load_bench, run_bench
from kernelwright.report.compare import compare
from kernelwright.store import Store

pytestmark = pytest.mark.timeout(4 * JUDGE_TIMEOUT_S)

FAST = ("--device", "cpu", "--no-compile-baseline", "--timing-budget-s", "0.3", "--seeds", "2")


def make_suite(root: Path) -> tuple[Path, Path]:
    """suite/{affine,affine_again,unsolved}.py and solutions/ holding affine.py (honest),
    affine_again/model_new.py (wrong bias) and a stray file named after no problem."""
    suite, sols = root / "suite", root / "solutions"
    suite.mkdir()
    (sols / "affine_again").mkdir(parents=True)
    for name in ("affine", "affine_again", "unsolved"):
        (suite / f"{name}.py").write_text(fx.PROBLEM)
    (sols / "affine.py").write_text(fx.candidate())
    (sols / "affine_again" / "model_new.py").write_text(fx.candidate("3.0f"))
    (sols / "stray.py").write_text(fx.candidate())
    return suite, sols


@pytest.fixture(scope="module")
def benched(tmp_path_factory):
    """One `bench --json -o FILE` over the three problems: (doc, stderr, root)."""
    root = tmp_path_factory.mktemp("bench")
    suite, sols = make_suite(root)
    res = cli("bench", "--suite", str(suite), "--solutions", str(sols), *FAST, "--json", "-o", str(root / "b.json"),
              "--store", str(root / "s.sqlite"), "--resamples", "500", timeout=3 * JUDGE_TIMEOUT_S)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout), res.stderr, root


def test_bench_judges_each_problem_and_counts_failures_and_missing(benched):
    doc, stderr, root = benched
    status = {r["name"]: r["status"] for r in doc["problems"]}
    assert status == {"affine": "correct", "affine_again": "incorrect", "unsolved": "missing"}
    m = doc["metrics"]["overall"]
    assert (m["n_problems"], m["n_correct"], m["n_missing"]) == (3, 1, 1)
    assert m["pass_rate"] == pytest.approx(1 / 3) and m["fast_p"]["eager"]["0"] == pytest.approx(1 / 3)
    assert m["geomean_speedup"]["best"]["all"]["n"] == 3
    assert "stray.py" in stderr  # a candidate named after no problem is a warning
    assert doc["complete"] and doc["pending"] == [] and doc["device"] == "cpu" and doc["policy"]["n_seeds"] == 2


def test_every_verdict_is_in_the_document_and_in_the_store(benched):
    doc, _, root = benched
    judged = [r for r in doc["problems"] if r["verdict"]]
    assert len(judged) == 2 and all(r["verdict_id"] for r in judged)
    assert judged[0]["solution"]["files"]["model_new.py"] == fx.candidate()  # the single file, judged alone
    assert judged[0]["reference_source"] == fx.PROBLEM
    with Store.open(root / "s.sqlite") as db:
        ids = {row[0] for row in db._conn.execute("SELECT id FROM verdicts")}
    assert {r["verdict_id"] for r in judged} <= ids
    assert load_bench(root / "b.json")["metrics"] == doc["metrics"]  # -o holds the same document


def test_resume_rejudges_only_what_changed(benched, tmp_path, monkeypatch):
    doc, _, root = benched
    suite, sols = root / "suite", root / "solutions"
    out = tmp_path / "b.json"
    out.write_text((root / "b.json").read_text())
    from kernelwright.cli import build_parser, policy_from_args

    policy = policy_from_args(build_parser().parse_args(["eval", "p", "c", *FAST]))
    judged = []
    real = bench_mod.judge_solution
    monkeypatch.setattr(bench_mod, "judge_solution", lambda e, *a: (judged.append(e.problem.name), real(e, *a))[1])
    (sols / "affine_again" / "model_new.py").write_text(fx.candidate())  # fixed since the crash
    config = BenchConfig(suite=str(suite), sources=(str(sols),), device="cpu", keep=False, out=out, resume=True)
    again = run_bench(config, policy)
    assert judged == ["affine_again"]
    assert {r["name"]: r["status"] for r in again["problems"]}["affine_again"] == "correct"
    other = BenchConfig(suite=str(suite), sources=(str(sols),), device="cpu", keep=False, out=out, resume=True)
    with pytest.raises(UsageError, match="another policy"):
        run_bench(other, policy_from_args(build_parser().parse_args(["eval", "p", "c", *FAST[:-2], "--seeds", "3"])))


def test_a_crash_leaves_the_finished_problems_on_disk(tmp_path, monkeypatch):
    suite, sols = make_suite(tmp_path)
    out = tmp_path / "partial.json"

    def judge_then_crash(entry, *a):
        if entry.problem.name == "affine_again":
            raise RuntimeError("the machine went away")
        return None, None, "stand-in for a verdict"

    monkeypatch.setattr(bench_mod, "judge_solution", judge_then_crash)
    from kernelwright.judge.policy import Policy

    with pytest.raises(RuntimeError):
        run_bench(BenchConfig(suite=str(suite), sources=(str(sols),), device="cpu", keep=False, out=out), Policy())
    partial = load_bench(out)
    assert [r["name"] for r in partial["problems"]] == ["affine"]
    assert partial["complete"] is False and partial["pending"] == ["affine_again", "unsolved"]


def test_run_solutions_report_and_compare(benched, tmp_path):
    """A run delivers its exported candidate: here the search's best (a wrong kernel that got lucky)
    failed its final re-judge and the next one passed. bench judges the exported one again; `report
    RUN` and `compare` take the run too, and every final re-judge is counted in the note."""
    doc, _, root = benched
    store = tmp_path / "runs.sqlite"
    affine = next(r for r in doc["problems"] if r["name"] == "affine")
    v, honest = affine["verdict"], affine["verdict"]["candidate"]["hash"]
    lucky = "f" * 64
    with Store.open(store) as db:
        db.put_problem(affine["problem_hash"], "affine", str(root / "suite" / "affine.py"), fx.PROBLEM)
        db.put_candidate(honest, v["candidate"]["build_path"], affine["solution"]["files"])
        db.put_candidate(lucky, "raw", {"model_new.py": fx.candidate("3.0f")})
        db.create_run("run-0000beef", problem_hash=affine["problem_hash"], problem_name="affine", problem_spec="affine.py",
                      model="scripted", strategy="refine", objective={})
        for speed, cand in ((None, honest), (0.8, honest), (1.3, lucky)):
            verdict = {**v, "status": "correct" if speed else "incorrect", "speedup_vs_best": speed}
            db.add_step("run-0000beef", "candidate", {"verdict": verdict, "candidate_hash": cand})
        db.add_step("run-0000beef", "final", {"verdict": {**v, "status": "incorrect"}, "candidate_hash": lucky})
        db.add_step("run-0000beef", "final", {"verdict": v, "candidate_hash": honest})
        db.add_step("run-0000beef", "export", {"out_dir": "x", "candidate_hash": honest})
        db.update_run("run-0000beef", status="finished", best={"candidate_hash": lucky, "speedup_vs_best": 1.3})
    res = cli("bench", "--suite", str(root / "suite"), "--solutions", "run-0000beef", *FAST, "--json", "--no-store", "--store", str(store),
              "--only", "affine,unsolved", timeout=2 * JUDGE_TIMEOUT_S)
    assert res.returncode == 0, res.stderr[-3000:]
    bench = json.loads(res.stdout)
    rows = bench["problems"]
    assert [r["status"] for r in rows] == ["correct", "missing"]
    assert rows[0]["solution"]["files"] == affine["solution"]["files"]  # the exported candidate, not the lucky best
    assert rows[0]["verdict"]["created_at"] != v["created_at"]  # judged again, not copied
    assert "2 final re-judge(s)" in rows[0]["note"] and "1 of them not passed" in rows[0]["note"]
    assert [p["best_so_far"] for p in rows[0]["run"]["progress"]] == [None, 0.8, 1.3]
    assert any("subset: 2 of the suite's 3" in w for w in bench["warnings"])
    html = tmp_path / "run.html"
    res = cli("report", "run-0000", "-o", str(html), "--store", str(store))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "run-0000beef" in html.read_text() and "1 of them not passed" in html.read_text()
    res = cli("compare", str(root / "b.json"), "run-0000beef", "--json", "--store", str(store))
    assert res.returncode == 0, res.stderr[-3000:]
    cmp = json.loads(res.stdout)
    assert {r["name"]: r["change"] for r in cmp["problems"]}["affine_again"] == "only in A"


def test_a_run_whose_final_re_judges_all_failed_delivers_nothing():
    from kernelwright.report.solutions import run_choice

    steps = [{"kind": "final", "payload": {"candidate_hash": "a", "verdict": {"status": "incorrect"}}}]
    assert run_choice({"best": {"candidate_hash": "a"}}, steps) == (None, None, "no verified candidate: 1 final re-judge(s) on fresh seeds, "
                                                                                 "1 of them not passed, none passed")
    chosen, _, note = run_choice({"best": {"candidate_hash": "a"}}, [])
    assert chosen == "a" and "selected among noisy measurements" in note


def test_tree_progress_groups_rounds_also_after_a_resume():
    from kernelwright.report.solutions import run_progress

    def step(branch, speed):
        return {"kind": "candidate", "branch": branch, "payload": {"verdict": {"status": "correct", "speedup_vs_best": speed}}}

    steps = [step("r0/i0/b0/", 1.1), step("r0/i1/b0/", 0.9), step("x1/r1/i0/b0/", 1.4), step("x1/r1/i1/b1/", 1.2)]
    rounds = run_progress({"strategy": "tree"}, steps)
    assert [(r["label"], r["candidates"], r["best_so_far"]) for r in rounds] == [("r0", 2, 1.1), ("r1", 2, 1.4)]


def test_environment_errors_stop_the_bench_before_any_problem(tmp_path, monkeypatch):
    suite, sols = make_suite(tmp_path)
    monkeypatch.setenv("KERNELWRIGHT_GPU_LOCK", "bogus")
    from kernelwright.judge.policy import Policy

    with pytest.raises(UsageError, match="KERNELWRIGHT_GPU_LOCK"):
        run_bench(BenchConfig(suite=str(suite), sources=(str(sols),), device="cpu", keep=False), Policy())


def test_a_malformed_candidate_is_its_own_failure_not_missing(tmp_path):
    suite, sols = make_suite(tmp_path)
    (sols / "affine.py").unlink()
    (sols / "affine").mkdir()
    (sols / "affine" / "model_new.py").write_text("x" * (17 * 2**20))  # over the judge's 16 MiB limit
    from kernelwright.judge.policy import Policy

    doc = run_bench(BenchConfig(suite=str(suite), sources=(str(sols),), only=("affine",), device="cpu", keep=False), Policy())
    row = doc["problems"][0]
    assert row["status"] == "invalid_candidate" and "limit" in row["note"]
    assert doc["metrics"]["overall"]["n_judged"] == 0 and doc["metrics"]["overall"]["pass_rate"] == 0.0


def test_report_of_a_bench_file(benched, tmp_path):
    _, _, root = benched
    html = tmp_path / "r.html"
    res = cli("report", str(root / "b.json"), "-o", str(html))
    assert res.returncode == 0, res.stderr[-3000:]
    text = html.read_text()
    assert "affine_again" in text and "unsolved" in text and "https://" not in text


def test_usage_errors_exit_2(benched, tmp_path):
    _, _, root = benched
    suite, sols = root / "suite", root / "solutions"
    assert cli("bench", "--suite", str(suite), "--solutions", str(sols), "--only", "nope", *FAST).returncode == 2
    assert cli("bench", "--suite", str(suite), "--solutions", str(sols), str(sols), *FAST).returncode == 2  # two for each problem
    assert cli("bench", "--suite", str(suite), "--solutions", "run-feedface", *FAST, "--store", str(tmp_path / "e.sqlite")).returncode == 2
    assert cli("bench", "--suite", str(suite), "--solutions", str(sols), "--resume", *FAST).returncode == 2  # --resume needs -o
    (tmp_path / "x.json").write_text("{}")
    assert cli("report", str(tmp_path / "x.json"), "-o", str(tmp_path / "x.html")).returncode == 2


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_the_shipped_examples_are_suites_with_their_solutions_beside_them():
    from kernelwright.problems.suite import load_suite
    from kernelwright.report.solutions import find_solutions

    for device, names in (("cpu", ["elementwise_chain", "layernorm", "matmul", "softmax"]),
                          ("cuda", ["elementwise_chain", "layernorm", "matmul", "softmax", "softmax_load_inline"])):
        entries = load_suite(str(EXAMPLES / device))
        assert [e.problem.name for e in entries] == names
        found, warnings = find_solutions((), entries, None)  # no --solutions: the model_new.py beside each problem.py
        assert sorted(found) == names and warnings == []
        assert all(sol.ref == str(EXAMPLES / device / name) and "model_new.py" in sol.files for name, sol in found.items())
    assert "kernels/matmul.cpp" in find_solutions((), load_suite(str(EXAMPLES / "cpu")), None)[0]["matmul"].files


def test_bench_without_solutions_judges_the_one_beside_each_problem_and_says_what_it_wrote(tmp_path):
    (tmp_path / "ex" / "affine").mkdir(parents=True)
    (tmp_path / "ex" / "affine" / "problem.py").write_text(fx.PROBLEM)
    (tmp_path / "ex" / "affine" / "model_new.py").write_text(fx.candidate())
    res = cli("bench", "--suite", str(tmp_path / "ex"), *FAST, "--correctness-only", "--no-store", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    assert [(r["name"], r["status"]) for r in json.loads(res.stdout)["problems"]] == [("affine", "correct")]
    assert "bench file not written: no -o FILE given" in res.stderr and "verdicts not recorded in the store: --no-store" in res.stderr
    (tmp_path / "bare" / "affine").mkdir(parents=True)
    (tmp_path / "bare" / "affine" / "problem.py").write_text(fx.PROBLEM)
    bare = cli("bench", "--suite", str(tmp_path / "bare"), *FAST, "--no-store")
    assert bare.returncode == 2 and "no --solutions given" in bare.stderr


def _doc(rows: list[tuple[str, str, float | None]], gpu: str = "H200", precision: str = "fp32") -> dict:
    from kernelwright.report.metrics import Bootstrap, bench_metrics, outcome_of

    problems = [{"name": n, "level": 1, "problem_hash": n, "status": s,
                 "verdict": {"status": s, "runtime_ms": 1.0 if s == "correct" else None, "eager_ms": sp, "compile_ms": sp}} for n, s, sp in rows]
    return {"policy": {"precision": precision}, "system": {"gpu": gpu}, "device": "cuda", "problems": problems,
            "metrics": bench_metrics([outcome_of(r) for r in problems], Bootstrap(resamples=200))}


def test_compare_pairs_problems_by_speedup_ratio_and_flags_confounds():
    a = _doc([("p", "correct", 2.0), ("q", "incorrect", 1.0), ("r", "correct", 1.0), ("s", "correct", 1.0)])
    b = _doc([("p", "correct", 3.0), ("q", "correct", 1.5), ("r", "incorrect", 1.0), ("s", "correct", 1.02)], gpu="A100", precision="bf16")
    doc = compare(a, b, ("A", "B"))
    change = {r["name"]: r["change"] for r in doc["problems"]}
    assert change == {"p": "faster", "q": "fixed", "r": "broken", "s": "same"}
    assert next(r for r in doc["problems"] if r["name"] == "p")["ratio"] == pytest.approx(1.5)
    assert doc["aggregate"]["paired"]["n"] == 2
    assert doc["aggregate"]["paired"]["geomean_ratio"] == pytest.approx((1.5 * 1.02) ** 0.5)
    assert doc["aggregate"]["a"]["pass_rate"] == 0.75 and doc["aggregate"]["b"]["pass_rate"] == 0.75
    assert any("precision" in w for w in doc["warnings"]) and any("A100" in w for w in doc["warnings"])
