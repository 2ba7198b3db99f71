"""Shared test fixtures: one build cache and one store per session, fixture paths, judge helpers.

Every evaluate() spawns two Python children, so tests that judge share the build cache of the
session (g++ builds happen once) and pass a correctness-only policy unless they are about timing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# one torch intra-op thread in every process the tests start, before torch is imported here (why: docs/judge.md, "Not yet")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from kernelwright.judge.policy import Policy, TimingConfig  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROBLEMS = FIXTURES / "problems"
CANDIDATES = FIXTURES / "candidates"

# A watchdog for every test that runs generated code (children, compilers).
JUDGE_TIMEOUT_S = 120

# Timing small enough for the 2-core CPU box; only tests about timing use it.
TINY_TIMING = TimingConfig(min_runs=5, max_runs=20, batch=5, budget_s=2, warmup_ms=10, recheck=2)


@pytest.fixture(scope="session", autouse=True)
def judge_env(tmp_path_factory: pytest.TempPathFactory):
    """KERNELWRIGHT_CACHE and KERNELWRIGHT_STORE in temp paths shared by the whole session.

    Children and CLI subprocesses inherit them, so builds are cached across tests and nothing
    touches the user's cache or store. Tests that need a private cache still monkeypatch over it.
    """
    root = tmp_path_factory.mktemp("kw-session")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELWRIGHT_CACHE", str(root / "cache"))
        mp.setenv("KERNELWRIGHT_STORE", str(root / "store.sqlite"))
        mp.setenv("KERNELWRIGHT_LOCK_DIR", str(root / "locks"))  # device locks private to this test session
        server = _shared_fork_server(root / "forkserver" / "sock")
        if server is not None:
            mp.setenv("KERNELWRIGHT_FORKSERVER_SOCKET", str(root / "forkserver" / "sock"))
        try:
            yield root
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=30)


@pytest.fixture()
def open_tmp_path():
    """A fresh folder below /tmp that a uid of no account may traverse, as every folder above a
    confined command's working folder must be under the uid layer (judge.host_folders):
    pytest's tmp_path lies below 0700 folders. Removed afterwards."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="kw-open-", dir="/tmp" if os.path.isdir("/tmp") else None))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _shared_fork_server(sock: Path):
    """One fork server for the whole session, shared by the CLI runs the tests start (each would
    otherwise import torch in a server of its own); None when it does not come up (then every
    process starts its own, which the tests also cover)."""
    import subprocess
    import time

    sock.parent.mkdir(mode=0o700)
    log = open(sock.parent / "log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kernelwright.judge.forkserver", "--listen", str(sock)], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 300
    while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if sock.exists():
        return proc
    proc.kill()
    return None


def problem(name: str) -> Path:
    """A fixture problem file by stem, e.g. problem("rowsum")."""
    return PROBLEMS / f"{name}.py"


def candidate(name: str) -> Path:
    """A fixture candidate folder by name, e.g. candidate("rowsum_correct")."""
    return CANDIDATES / name


# Most fixture exploits are written with torch operators for brevity, and each test isolates one
# step or guard; the op audit, which would refuse them all first, has its own tests
# (test_op_audit.py) under the default policy, where torch compute is refused.
ALLOW_TORCH = dict(allow_torch_compute=True)


def relu_tasks(tmp_path: Path) -> list:
    """The RL environment's tasks for a folder holding the relu fixture alone (the trainer adapters' tests)."""
    from kernelwright.rl import load_tasks

    folder = tmp_path / "problems"
    folder.mkdir()
    (folder / "relu.py").write_text((PROBLEMS / "relu.py").read_text())
    return load_tasks(folder, heldout=0.0)


def correctness_policy(**kw) -> Policy:
    """The default test policy: correctness only, no baselines, torch compute allowed (see ALLOW_TORCH)."""
    base = dict(time_candidate=False, compile_baseline=False, baselines="skip", **ALLOW_TORCH)
    base.update(kw)
    return Policy(**base)


def timing_policy(**kw) -> Policy:
    """Timing on (CPU) with the tiny timing config and measured eager baseline, no torch.compile,
    torch compute allowed (see ALLOW_TORCH)."""
    base = dict(time_candidate=True, compile_baseline=False, baselines="measured", timing=TINY_TIMING, **ALLOW_TORCH)
    base.update(kw)
    return Policy(**base)


def judge(problem_name: str, candidate_name: str, policy: Policy | None = None, device: str = "cpu"):
    """evaluate() a fixture candidate on a fixture problem."""
    from kernelwright.judge.evaluate import evaluate

    return evaluate(problem(problem_name), candidate(candidate_name), policy or correctness_policy(), device=device)


def cli(*args: str, timeout: float = 110):
    """Run `python -m kernelwright.cli ARGS` in a subprocess; returns the CompletedProcess."""
    import subprocess

    env = dict(os.environ, COLUMNS="200", NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "kernelwright.cli", *args], capture_output=True, text=True, timeout=timeout, env=env,
    )


@pytest.fixture(scope="session")
def verdicts():
    """A per-session memo of verdicts that several tests read: key -> Verdict."""
    return {}


def needs_gpu():
    """Skip marker for tests that need a CUDA GPU."""
    import torch

    return pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


# The tests' xdist scheduling: whole files per worker, the longest first (tests/xdist_files.py).
from xdist_files import pytest_collection_modifyitems, pytest_xdist_make_scheduler  # noqa: E402, F401


def cli_commands(parser, prefix: str = "") -> dict:
    """Every (sub)command's argparse parser by its full name ("kernelwright", "kernelwright eval" is "eval", ...)."""
    import argparse

    found = {prefix or "kernelwright": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(cli_commands(sub, f"{prefix} {name}".strip()))
    return found


def shown_options(parser) -> dict:
    """A parser's option strings shown in its help, each with its action."""
    import argparse

    return {o: a for a in parser._actions if a.help != argparse.SUPPRESS for o in a.option_strings}
