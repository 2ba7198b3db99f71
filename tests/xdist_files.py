"""How the tests share pytest-xdist's workers (tests/conftest.py imports these hooks).

Under `-n 2 --dist loadfile` (pyproject's addopts) each file runs whole on one worker, so its module
fixtures are set up once, and the files that build the same C++ torch extensions share a worker, so
each extension is compiled once (half a minute each on the 2-core box). The scheduler groups by
file name itself: xdist's `loadgroup` does not group under pytest 9.2, whose test ids ignore the
group suffix xdist 3.8 writes (every test became a group of its own: a file's module fixtures set up
on both workers, extensions compiled on both, and the sandbox zoo's attacks run beside each other).
tests/test_xdist_files.py checks the grouping in a pytest run of its own.
"""

from __future__ import annotations

import pytest

SAME_WORKER = {"test_zoo.py": "cpp_extensions", "test_torch_extension.py": "cpp_extensions", "test_op_audit.py": "cpp_extensions"}

# The groups that take longest on the 2-core box (pytest --durations=0 at 755da33), handed out
# first so that no long file starts last; the rest follow in collection order.
LONGEST_FIRST = ("cpp_extensions", "test_doc_commands.py", "test_sandbox.py", "test_agent_flow.py", "test_suites.py",
                 "test_workspace.py", "test_synth.py", "test_forkserver.py", "test_synth_pool.py")


def work_unit(nodeid: str) -> str:
    """The group a test runs in: its file's name, or the group SAME_WORKER gives that file."""
    name = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    return SAME_WORKER.get(name, name)


def pytest_collection_modifyitems(config, items):
    """In an xdist worker, the longest groups first (a stable sort: the rest keep their order; the
    workers' collections, which must agree, are sorted alike). A serial run keeps pytest's order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(work_unit(item.nodeid), len(rank)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under `--dist loadfile`, xdist's file scheduler with work_unit as a file's group, the groups
    handed out in collection order (pytest_collection_modifyitems'), not by their number of tests
    (so `--loadscope-reorder` has no effect here)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False

    class Files(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return Files(config, log)
