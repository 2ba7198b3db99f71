"""The build cache's size and its prune by last use (judge.cache_prune, `kernelwright cache`)."""

from __future__ import annotations

import fcntl
import json
import os
import time

import pytest

from kernelwright.judge import cache_prune

MIB = 2**20
NOW = time.time()  # the fixture's times are before it, as the command's own clock sees them
HOUR = 3600.0


def _build(root, key, mib, used):
    folder = root / "builds" / key
    folder.mkdir(parents=True)
    (folder / "lib.so").write_bytes(b"\1" * (mib * MIB))
    (folder / "meta.json").write_text("{}")
    os.utime(folder / "meta.json", (used, used))
    return folder


def _extension(root, name, mib, used):
    folder = root / "torch_extensions" / name
    (folder / "triton").mkdir(parents=True)
    (folder / "triton" / "k.cubin").write_bytes(b"\1" * (mib * MIB))
    os.utime(folder, (used, used))
    return folder


@pytest.fixture()
def cache(tmp_path):
    """A cache of four entries, oldest first: a build of 1 MiB (10 days unused), an extension of 2
    MiB (5 days), a build of 1 MiB (2 days), an extension of 1 MiB used ten minutes ago; and what is
    never an entry: key locks, a half-published build, a Triton lock, the service's folder."""
    root = tmp_path / "cache"
    _build(root, "a" * 64, 1, NOW - 240 * HOUR)
    _extension(root, "e" * 16, 2, NOW - 120 * HOUR)
    _build(root, "b" * 64, 1, NOW - 48 * HOUR)
    _extension(root, "f" * 16, 1, NOW - 600)
    (root / "builds" / ".locks").mkdir()
    for key in ("a" * 64, "b" * 64):
        (root / "builds" / ".locks" / f"{key}.lock").write_text("")
    (root / "builds" / ("tmp-" + "c" * 12 + "-x")).mkdir()
    (root / "torch_extensions" / ("e" * 16 + ".triton.lock")).write_text("")
    (root / "serve").mkdir()
    (root / "serve" / "note").write_bytes(b"\1" * MIB)
    return root


def _names(entries):
    return [e.path.name[:1] for e in entries]


def test_the_entries_are_builds_and_extension_folders_least_recently_used_first(cache):
    assert _names(cache_prune.entries(cache)) == ["a", "e", "b", "f"]
    found = cache_prune.usage(cache)
    assert found["kinds"] == {"builds": {"entries": 2, "bytes": 2 * MIB + 4}, "torch_extensions": {"entries": 2, "bytes": 3 * MIB}}
    assert MIB <= found["other_bytes"] < 2 * MIB and found["total_bytes"] == 5 * MIB + 4 + found["other_bytes"]


def test_a_size_bound_removes_the_least_recently_used_until_it_holds(cache):
    done = cache_prune.prune(cache, keep_bytes=2 * MIB + 2, now=NOW)  # a build: its library and its meta.json's 2 bytes
    assert _names(done.removed) == ["a", "e"] and done.busy == [] and done.kept_bytes == 2 * MIB + 2
    assert _names(cache_prune.entries(cache)) == ["b", "f"]
    assert (cache / "builds" / ".locks").is_dir() and (cache / "serve" / "note").is_file()  # never entries
    assert not [p for p in (cache / "builds").iterdir() if p.name.startswith(".prune-")]  # nothing left aside


def test_an_age_bound_removes_every_entry_unused_that_long_and_no_other(cache):
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=NOW)
    assert _names(done.removed) == ["a", "e"]
    assert _names(cache_prune.entries(cache)) == ["b", "f"]


def test_an_entry_used_within_the_minimum_age_stays_whatever_the_bound(cache):
    done = cache_prune.prune(cache, keep_bytes=0, now=NOW)
    assert _names(done.removed) == ["a", "e", "b"] and _names(done.busy) == ["f"]
    assert _names(cache_prune.entries(cache)) == ["f"]
    assert _names(cache_prune.prune(cache, keep_bytes=0, now=NOW, min_age_s=0).removed) == ["f"]


def test_an_entry_whose_lock_is_held_stays_until_it_is_let_go(cache):
    """A raw build's key lock (a compile of that key), a Triton candidate's cache lock (its verdict)."""
    holders = [os.open(cache / "builds" / ".locks" / f"{'a' * 64}.lock", os.O_RDONLY),
               os.open(cache / "torch_extensions" / f"{'e' * 16}.triton.lock", os.O_RDONLY)]
    try:
        for fd in holders:
            fcntl.flock(fd, fcntl.LOCK_EX)
        done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=NOW)
        assert done.removed == [] and _names(done.busy) == ["a", "e"]
    finally:
        for fd in holders:
            os.close(fd)
    assert _names(cache_prune.prune(cache, older_than_s=72 * HOUR, now=NOW).removed) == ["a", "e"]


def test_a_dry_run_removes_nothing(cache):
    done = cache_prune.prune(cache, keep_bytes=0, now=NOW, dry_run=True)
    assert _names(done.removed) == ["a", "e", "b"] and done.freed == 4 * MIB + 4
    assert _names(cache_prune.entries(cache)) == ["a", "e", "b", "f"]


@pytest.mark.parametrize("kw", [{}, {"keep_bytes": -1}, {"older_than_s": -1.0}, {"keep_bytes": 0, "min_age_s": -1.0}])
def test_a_prune_without_a_bound_or_with_a_negative_one_is_refused(cache, kw):
    with pytest.raises(ValueError):
        cache_prune.prune(cache, now=NOW, **kw)


def test_the_judge_marks_each_use_of_an_entry(tmp_path, monkeypatch):
    """A raw build's hit touches its meta.json and a verdict's extension folder its folder: the marks
    a prune goes by, never the file system's access times."""
    from kernelwright.judge import build, extension

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    spec = build.spec_from_text('extern "C" int one() { return 1; }', lang="cpp", name="one")
    first = build.build(spec, sandbox_mode="off")
    assert first.ok and not first.cached, first.log
    meta = first.lib_path.parent / "meta.json"
    os.utime(meta, (NOW - 240 * HOUR, NOW - 240 * HOUR))
    assert build.build(spec, sandbox_mode="off").cached
    assert time.time() - meta.stat().st_mtime < 60
    folder = extension.folder("ab" * 32)
    os.utime(folder, (NOW - 240 * HOUR, NOW - 240 * HOUR))
    assert extension.folder("ab" * 32) == folder and time.time() - folder.stat().st_mtime < 60


def test_the_cache_command_shows_and_prunes(cache, monkeypatch, capsys):
    from kernelwright.cli import main

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(cache))
    with pytest.raises(SystemExit) as done:
        main(["cache", "show", "--json"])
    assert done.value.code == 0 and json.loads(capsys.readouterr().out)["kinds"]["builds"]["entries"] == 2
    with pytest.raises(SystemExit) as done:
        main(["cache", "prune", "--older-than-days", "3", "--dry-run", "--json"])
    shown = json.loads(capsys.readouterr().out)
    assert done.value.code == 0 and shown["dry_run"] and [e["kind"] for e in shown["removed"]] == ["builds", "torch_extensions"]
    for bad in (["cache", "prune"], ["cache", "prune", "--keep-gb", "-1"]):
        with pytest.raises(SystemExit) as done:
            main(bad)
        assert done.value.code == 2, bad
    assert len(cache_prune.entries(cache)) == 4
