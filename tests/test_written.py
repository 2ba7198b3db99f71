"""Every command says on stderr which files it wrote (and store rows, caches), and which it skipped
and why; `--json` stdout stays one clean JSON document. Fast: the judge and the metadata child are
replaced where a command would start them."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from types import SimpleNamespace

import pytest

from conftest import candidate, problem
from kernelwright import written
from kernelwright.cli import main
from kernelwright.judge import problem_meta as meta

FAKE_META = {"flops": 10, "bytes": 20, "floor_ms": 0.001, "ceiling_ms": {"fp32": 0.002, "tf32": 0.002, "bf16": 0.001}, "inputs": [],
             "outputs": [], "computed_on": "meta", "flops_by_op": {}, "input_bytes": 8, "output_bytes": 8, "param_bytes": 4}


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(argv)
    got = capsys.readouterr()
    return done.value.code, got.out, got.err


@pytest.fixture
def fake_meta(tmp_path, monkeypatch):
    """The metadata child replaced by a fixed answer; the cache in tmp_path; how many it computed."""
    calls: list[str] = []

    def answers(paths, timeout_s):
        for i, p in enumerate(paths):
            calls.append(p)
            yield i, dict(FAKE_META), None

    monkeypatch.setattr(meta, "_answers", answers)
    monkeypatch.setattr(meta, "_cache_file", lambda: tmp_path / "cache" / "problem_meta.json")
    return calls


# -- problems list / show: the metadata cache --------------------------------------------------------


def test_problems_list_names_the_metadata_cache_it_grew_and_keeps_json_stdout_clean(tmp_path, fake_meta, capsys):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("rowsum", "relu"):
        shutil.copyfile(problem(name), suite / f"{name}.py")
    rc, out, err = _run(["problems", "list", "--suite", str(suite), "--json"], capsys)
    assert rc == 0 and len(json.loads(out)) == 2
    assert f"cached problem metadata: {tmp_path / 'cache' / 'problem_meta.json'} (2 new entries)" in err
    rc, out, err = _run(["problems", "list", "--suite", str(suite), "--json"], capsys)  # all cached: nothing written, nothing said
    assert rc == 0 and len(json.loads(out)) == 2 and len(fake_meta) == 2 and "cached" not in err


def test_problems_show_names_the_cache_entry_it_added(tmp_path, fake_meta, capsys):
    rc, out, err = _run(["problems", "show", str(problem("rowsum")), "--json"], capsys)
    assert rc == 0 and json.loads(out)["name"] == "rowsum"
    assert "cached problem metadata: " in err and "(1 new entry)" in err


def test_a_cache_that_cannot_be_written_is_said_skipped_with_why(tmp_path, fake_meta, monkeypatch):
    (tmp_path / "ro").write_text("a file, so no folder can be made under it")
    monkeypatch.setattr(meta, "_cache_file", lambda: tmp_path / "ro" / "problem_meta.json")
    said: list[str] = []
    from kernelwright.problems.loader import load_problem

    found, failed = meta.metadata_or_errors([load_problem(str(problem("rowsum")))], tell=said.append)
    assert len(found) == 1 and not failed
    assert len(said) == 1 and said[0].startswith(f"skipped {tmp_path / 'ro' / 'problem_meta.json'}: the metadata cache could not be written")


# -- workspace init / import / export -----------------------------------------------------------------


def test_workspace_init_names_workspace_json_every_file_and_the_store(tmp_path, capsys):
    store = tmp_path / "store.sqlite"
    rc, out, err = _run(["workspace", "init", str(problem("rowsum")), str(tmp_path / "ws"), "--store", str(store), "--json"], capsys)
    assert rc == 0
    ws_id = json.loads(out)["workspace"]
    line = next(ln for ln in err.splitlines() if ln.startswith("wrote in "))
    assert line.startswith(f"wrote in {(tmp_path / 'ws').resolve()}: ")
    for name in (".kernelwright/workspace.json", "model_new.py", "SKILL.md", "README.md", "kernels/", "reference/rowsum.py (read-only)"):
        assert name in line
    assert f"recorded workspace {ws_id} in the store {store}" in err


def test_workspace_export_lists_its_files_and_what_it_left_out(tmp_path, capsys):
    store = tmp_path / "store.sqlite"
    assert _run(["workspace", "init", str(problem("rowsum")), str(tmp_path / "ws"), "--store", str(store)], capsys)[0] == 0
    shutil.copyfile(candidate("rowsum_correct") / "model_new.py", tmp_path / "ws" / "model_new.py")
    (tmp_path / "ws" / "model.py").write_text("X = 1\n")  # a candidate file the workdir's reference would shadow
    (tmp_path / "ws" / "SKILL.md").unlink()
    rc, out, err = _run(["workspace", "export", str(tmp_path / "ws"), str(tmp_path / "out")], capsys)
    assert rc == 0, err
    assert f"wrote in {(tmp_path / 'out').resolve()}: kernels/, model.py, model_new.py" in err
    assert "skipped SKILL.md: the workspace has none" in err
    assert "skipped the candidate's model.py: the workdir's model.py is the reference" in err


# -- eval, demo, baseline, check: the store -----------------------------------------------------------


def test_eval_names_the_store_and_the_verdict_it_recorded_or_why_not(tmp_path, monkeypatch, capsys):
    from kernelwright import cli

    class Verdict:
        def to_json(self):
            return '{"status": "correct"}'

        def to_dict(self):
            return {"status": "correct"}

    monkeypatch.setattr(cli, "_judge", lambda *a, **k: (None, {}, Verdict()))
    monkeypatch.setattr(cli, "_store_verdict", lambda *a: "v-0123456789ab")
    cand = candidate("rowsum_correct")
    store = tmp_path / "s.sqlite"
    rc, out, err = _run(["eval", str(problem("rowsum")), str(cand), "--json", "--store", str(store)], capsys)
    assert rc == 0 and json.loads(out) == {"status": "correct"}
    assert f"recorded verdict v-0123456789ab in the store {store}" in err
    rc, out, err = _run(["eval", str(problem("rowsum")), str(cand), "--json", "--no-store"], capsys)
    assert "verdict not recorded in the store: --no-store" in err and "recorded verdict" not in err


def test_demo_names_the_store_and_the_verdicts_it_recorded_or_why_not(tmp_path, monkeypatch, capsys):
    from kernelwright import cli

    class Verdict:
        def to_dict(self):
            return {"status": "correct"}

    for name in ("alpha", "beta"):  # an examples folder of two CPU problems (demo --examples)
        (tmp_path / "ex" / "cpu" / name).mkdir(parents=True)
        (tmp_path / "ex" / "cpu" / name / "problem.py").write_text("")
    ids = iter(["v-aaaaaaaaaaaa", "v-bbbbbbbbbbbb"])
    monkeypatch.setattr(cli, "_judge", lambda *a, **k: (None, {}, Verdict()))
    monkeypatch.setattr(cli, "_store_verdict", lambda *a: next(ids))
    store = tmp_path / "s.sqlite"
    rc, out, err = _run(["demo", "--examples", str(tmp_path / "ex"), "--device", "cpu", "--json", "--store", str(store)], capsys)
    assert rc == 0 and json.loads(out) == [{"status": "correct"}] * 2  # stdout is the JSON alone
    assert f"recorded 2 of 2 verdict(s) in the store {store}" in err
    rc, out, err = _run(["demo", "--examples", str(tmp_path / "ex"), "--device", "cpu", "--json", "--no-store"], capsys)
    assert "2 verdicts not recorded in the store: --no-store" in err and "recorded 2" not in err


def test_kept_lines_of_several_verdicts(tmp_path):
    from kernelwright.cli import _kept_lines

    args = argparse.Namespace(no_store=False, store=tmp_path / "s")
    assert _kept_lines(args, ["v-1", None, "v-3"]) == [f"recorded 2 of 3 verdict(s) in the store {tmp_path / 's'}"]
    assert _kept_lines(args, [None]) == []  # the failed store has said so in its warning
    assert _kept_lines(argparse.Namespace(no_store=True, store=None), [None, None]) == ["2 verdicts not recorded in the store: --no-store"]


def test_baseline_says_what_it_measured_into_the_store_and_what_it_took_from_it(tmp_path):
    from kernelwright.problems.commands import _baselines_line

    rec = lambda h, eager: argparse.Namespace(problem_hash=h, eager_ms=eager)  # noqa: E731
    line = _baselines_line([rec("a", 1.0), rec("b", 2.0), rec("c", None)], {"b"}, 3, tmp_path / "s")
    assert line == (f"recorded 3 problem(s) and 1 new baseline(s) in the store {tmp_path / 's'}; 1 already there, not measured again; "
                    "1 not stored: their timing failed")


def test_check_names_the_store_row_it_recorded(tmp_path, monkeypatch, capsys):
    from kernelwright.workspace import commands
    from kernelwright.workspace.exits import Exit
    from kernelwright.workspace.session import CheckResult

    class Session:
        config = argparse.Namespace(id="ws-1")
        store = tmp_path / "s.sqlite"

        def __init__(self, seq):
            self.seq = seq

        def check(self, mode, **kw):
            return CheckResult(self.seq, Exit.OK, "correct", "report", {"status": "correct"})

    for seq, said in ((4, f"recorded check 4 of workspace ws-1 in the store {tmp_path / 's.sqlite'}"),
                      (None, "check not recorded in the store: the store could not be written")):
        monkeypatch.setattr(commands, "_session", lambda args, seq=seq: Session(seq))
        rc, out, err = _run(["check", "--quick", "--json", "-C", str(tmp_path)], capsys)
        assert rc == 0 and json.loads(out) == {"status": "correct"} and said in err


# -- optimize / resume / report ----------------------------------------------------------------------


def test_optimize_json_names_the_store_and_the_export_on_stderr(tmp_path, capsys):
    from kernelwright.agent import commands

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "model_new.py").write_text("x")
    result = argparse.Namespace(run_id="run-1a2b3c4d", status=argparse.Namespace(value="finished"), summary="s", out_dir=tmp_path / "out",
                                final=None)
    assert commands._report(argparse.Namespace(json=True, store=tmp_path / "s.sqlite"), result) == 0
    got = capsys.readouterr()
    assert json.loads(got.out)["run_id"] == "run-1a2b3c4d"
    assert f"recorded run run-1a2b3c4d (its steps, candidates and verdicts) in the store {tmp_path / 's.sqlite'}" in got.err
    assert f"exported to {tmp_path / 'out'}: model_new.py" in got.err


def test_report_without_jinja2_says_it_skipped_the_file_and_why(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "jinja2", None)
    monkeypatch.setattr("kernelwright.report.compare.load_side", lambda *a, **k: {"problems": []})
    rc, out, err = _run(["report", "bench.json", "-o", str(tmp_path / "r.html")], capsys)
    assert rc == 1 and not (tmp_path / "r.html").exists()
    assert f"skipped {tmp_path / 'r.html'}: the HTML report needs jinja2" in err


def test_the_helper_words_lines_alike(tmp_path):
    (tmp_path / "a" / "empty").mkdir(parents=True)
    (tmp_path / "a" / "f.txt").write_text("x")
    assert written.files_in(tmp_path / "a") == ["empty/", "f.txt"]
    assert written.cached("x", "P", 1) == "cached x: P (1 new entry)" and written.cached("x", "P", 2).endswith("(2 new entries)")
    assert written.wrote("P", "what") == "wrote P (what)" and written.skipped("N", "why") == "skipped N: why"


def test_a_command_that_creates_the_store_says_so_once(tmp_path, capsys):
    store = tmp_path / "data" / "store.sqlite"
    rc, out, err = _run(["runs", "list", "--json", "--store", str(store)], capsys)
    assert rc == 0 and json.loads(out) == []
    assert f"wrote {store} (a new store: it did not exist before this command)" in err
    rc, out, err = _run(["runs", "list", "--json", "--store", str(store)], capsys)
    assert rc == 0 and "new store" not in err


def test_the_judge_names_the_build_cache_when_a_raw_build_adds_to_it(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from kernelwright.judge import evaluate
    from kernelwright.judge.build import BuildResult

    def result(key, cached):
        return BuildResult(ok=True, lib_path=tmp_path / "builds" / key / "lib.so", cached=cached, seconds=0.1, log="", resources=None, key=key)

    said: list[str] = []
    flow = SimpleNamespace(say=said.append, _hold=lambda lock: None, policy=SimpleNamespace(build_timeout_s=1.0, sandbox="off"),
                           vb=SimpleNamespace(build_s=None, resources=None, log=None))
    for results, want in (([result("a", False), result("b", True)], [f"cached raw builds: {tmp_path / 'builds'} (1 new entry)"]),
                          ([result("a", True)], [])):  # a cache hit writes nothing, and says nothing
        said.clear()
        monkeypatch.setattr(evaluate, "prebuild", lambda files, **kw: results)
        assert evaluate.Flow._build_raw(flow, SimpleNamespace(sources=["k.cpp"])) is True
        assert said[1:] == want


def test_serve_says_it_wrote_a_new_token_file_and_not_when_it_read_one(tmp_path, monkeypatch, capsys):
    from types import SimpleNamespace

    from kernelwright.client import commands, service
    from kernelwright.judge import forkpool

    def stop():
        raise KeyboardInterrupt

    server = SimpleNamespace(serve_forever=lambda **kw: stop(), server_close=lambda: None)
    monkeypatch.setattr(service, "JudgeService", lambda workers, pool=None: SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(service, "make_server", lambda *a, **k: (server, "http://127.0.0.1:18998"))
    monkeypatch.setattr(forkpool, "warm_up", lambda: None)
    monkeypatch.setattr(commands, "_warm_host_facts", lambda: None)
    token = tmp_path / "token"
    args = argparse.Namespace(port=18998, host="127.0.0.1", token_file=token, workers=1, socket=None)
    assert commands.serve_cmd(args) == 0
    assert f"wrote {token} (a new token, mode 0600)" in capsys.readouterr().err
    assert commands.serve_cmd(args) == 0  # the token file is read now, not written
    assert "a new token" not in capsys.readouterr().err


def test_mcp_says_where_its_tools_write_and_record_before_it_serves(tmp_path, monkeypatch):
    # the server's stdout is the protocol (stdio) or unused (HTTP): its lines for a person go to echo (stderr in the CLI)
    import anyio

    from kernelwright.workspace import mcp_server, session

    served = []
    monkeypatch.setattr(mcp_server, "_sdk", lambda: None)
    monkeypatch.setattr(session, "open_session", lambda root, **kw: SimpleNamespace(root=tmp_path / "ws", store=tmp_path / "s.sqlite"))
    monkeypatch.setattr(mcp_server, "build_server", lambda s, progress: "server")
    monkeypatch.setattr(anyio, "run", lambda fn, *a: served.append(fn.__name__))
    lines: list[str] = []
    mcp_server.serve(tmp_path, transport="http", port=8765, echo=lines.append)
    assert lines[0] == f"kernelwright mcp: tool calls write files in {tmp_path / 'ws'} and record each check in the store {tmp_path / 's.sqlite'}"
    assert served == ["_serve_http"] and lines[-1].startswith("kernelwright mcp: serving")
