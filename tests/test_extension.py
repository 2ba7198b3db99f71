"""The torch extension's build (judge.extension), the one the judge's flow and the agent's compile
tool share: its folder, its child's confinement, and what each way a build child fails comes to.
No extension is compiled here (test_torch_extension.py builds real ones)."""

from __future__ import annotations

import contextlib

import pytest

from kernelwright.judge import extension, sandbox
from kernelwright.judge.build import cache_dir
from kernelwright.judge.workers import ChildError


class _FakeChild:
    def __init__(self, error: ChildError | None = None) -> None:
        self.error, self.closed, self.held = error, False, False

    def call(self, cmd, args, timeout_s):
        assert cmd == "setup" and self.held  # under the caller's hold (the device lock)
        if self.error is not None:
            raise self.error

    def close(self):
        self.closed = True


def _build(child: _FakeChild, digest: str = "ab" * 32) -> extension.Built:
    @contextlib.contextmanager
    def hold():
        child.held = True
        yield

    return extension.build(child, {}, timeout_s=1, candidate_hash=digest, hold=hold)


def test_the_extension_folder_is_keyed_by_the_candidates_hash_under_the_build_cache():
    assert extension.env("0123456789abcdef" * 4) == {"TORCH_EXTENSIONS_DIR": str(cache_dir() / "torch_extensions" / "0123456789abcdef")}
    assert extension.folder(None) == cache_dir() / "torch_extensions" / "none" and extension.folder(None).is_dir()


def test_a_candidate_childs_config_is_confined_by_the_policys_mode_with_its_extension_folder_writable(open_tmp_path):
    ext = extension.env("cd" * 32)
    config, spec = extension.candidate_config("strict", "cpu", 0, open_tmp_path, ("problem.py", "cand"), ext)
    assert config.role == "candidate" and config.sandbox_read == ("problem.py", "cand")
    assert config.env["KERNELWRIGHT_CACHE"] == str(cache_dir()) and config.env["TORCH_EXTENSIONS_DIR"] == ext["TORCH_EXTENSIONS_DIR"]
    assert sandbox.Spec.from_env(config.env[sandbox.SPEC_ENV]) == spec
    assert spec.mode == "strict" and ext["TORCH_EXTENSIONS_DIR"] in spec.write


def test_a_build_that_goes_through_is_compiled_and_closes_its_child():
    child = _FakeChild()
    built = _build(child)
    assert built.compiled and built.failure is None and built.log == "" and child.closed


@pytest.mark.parametrize("kind, compiled, folder_kept", [("compile", False, True), ("timeout", False, False),
                                                         ("died", True, False), ("runtime", True, True)])
def test_each_way_a_build_child_fails(kind, compiled, folder_kept):
    """A compiler error or a timeout is not compiled (its log kept); a timeout or a death takes the
    folder (torch's lock file); a failure after the build (import, constructor) is the verdict's."""
    digest = kind * 16
    extension.folder(digest)  # as the caller made it, pointing the child there
    child = _FakeChild(ChildError(kind, f"{kind} happened", log_tail="the tail"))
    built = _build(child, digest)
    assert built.compiled is compiled and built.failure is child.error and child.closed
    assert built.log == ("" if compiled else f"{kind} happened\nthe tail")
    assert (cache_dir() / "torch_extensions" / digest[:16]).is_dir() is folder_kept
