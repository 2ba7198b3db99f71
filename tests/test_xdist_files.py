"""The tests' xdist scheduling (tests/xdist_files.py) in a pytest run of its own: every test of a
file on one worker, and the C++-extension files on the same one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PER_FILE = 8  # tests a file: spread one test to a group, eight would land on one worker by chance 1 in 64


def test_each_file_runs_whole_on_one_worker_and_the_extension_files_share_one(tmp_path):
    log = tmp_path / "ran.txt"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                                          "from xdist_files import pytest_collection_modifyitems, pytest_xdist_make_scheduler\n")
    files = ["test_alpha.py", "test_beta.py", "test_gamma.py", "test_op_audit.py", "test_zoo.py"]
    for name in files:
        body = ["import os\n"]
        for i in range(PER_FILE):
            body.append(f"def test_{i}():\n    with open({str(log)!r}, 'a') as f:\n"
                        f"        f.write('{name} ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
        (tmp_path / name).write_text("\n".join(body))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", *files], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == PER_FILE * len(files)
    workers: dict[str, set[str]] = {}
    for name, worker in lines:
        workers.setdefault(name, set()).add(worker)
    assert all(len(w) == 1 for w in workers.values()), workers
    assert workers["test_op_audit.py"] == workers["test_zoo.py"], workers
