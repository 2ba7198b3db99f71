"""The tests' xdist scheduling (tests/xdist_files.py), checked in a pytest run of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from xdist_files import work_unit

TESTS = Path(__file__).resolve().parent


def test_a_file_is_its_own_group_and_the_extension_files_share_one():
    assert work_unit("tests/test_cli.py::test_x[a::b]") == "test_cli.py"
    assert work_unit("tests/test_zoo.py::test_y") == work_unit("tests/test_op_audit.py::test_z") == "cpp_extensions"


def test_the_extension_files_run_on_one_worker(tmp_path):
    """Two files of one group, two workers: xdist's own loadfile puts each file on a worker of its
    own, and `--dist load` spreads the tests, so this fails unless the project's scheduler ran."""
    pytest.importorskip("xdist")
    log = tmp_path / "ran.txt"
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the repo's addopts
    (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
                                          "from xdist_files import pytest_collection_modifyitems, pytest_xdist_make_scheduler\n")
    files = ["test_op_audit.py", "test_zoo.py"]
    for name in files:
        (tmp_path / name).write_text("import os\n" + "".join(
            f"\ndef test_{i}():\n    with open({str(log)!r}, 'a') as f:\n        f.write('{name} ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
            for i in range(8)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", *files],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == 16 and {name for name, _ in lines} == set(files), lines
    assert len({worker for _, worker in lines}) == 1, lines
