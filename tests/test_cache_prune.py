"""The build cache's size and its prune by last use (judge.cache_prune, `kernelwright cache`)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time

import pytest

from kernelwright.judge import cache_prune

MIB = 2**20
NOW = time.time()  # the fixture's times are before it, as the command's own clock sees them
HOUR = 3600.0


def _clock():
    return NOW


def _build(root, key, mib, used):
    folder = root / "builds" / key
    folder.mkdir(parents=True)
    (folder / "lib.so").write_bytes(os.urandom(mib * MIB))  # incompressible: a compressing file system stores it whole
    (folder / "meta.json").write_text("{}")
    os.utime(folder / "meta.json", (used, used))
    return folder


def _extension(root, name, mib, used):
    folder = root / "torch_extensions" / name
    (folder / "triton").mkdir(parents=True)
    (folder / "triton" / "k.cubin").write_bytes(os.urandom(mib * MIB))
    (root / "torch_extensions" / f"{name}.used").write_text("")  # the judge's mark, beside the folder
    os.utime(root / "torch_extensions" / f"{name}.used", (used, used))
    return folder


@pytest.fixture()
def cache(tmp_path):
    """A cache of four entries, oldest first: a build of 1 MiB (10 days unused), an extension of 2
    MiB (5 days), a build of 1 MiB (2 days), an extension of 1 MiB used ten minutes ago; and what is
    never an entry: key locks, a half-published build, a Triton lock, the service's folder, and the
    judge's own kernel."""
    root = tmp_path / "cache"
    _build(root, "a" * 64, 1, NOW - 240 * HOUR)
    _extension(root, "e" * 16, 2, NOW - 120 * HOUR)
    _build(root, "b" * 64, 1, NOW - 48 * HOUR)
    _extension(root, "f" * 16, 1, NOW - 600)
    _build(root, "j" * 64, 1, NOW - 2400 * HOUR)
    (root / "builds" / cache_prune.JUDGE_KERNELS).write_text("j" * 64 + "\n")
    (root / "builds" / ".locks").mkdir()
    for key in ("a" * 64, "b" * 64):
        (root / "builds" / ".locks" / f"{key}.lock").write_text("")
    (root / "builds" / ("tmp-" + "c" * 12 + "-x")).mkdir()
    (root / "torch_extensions" / ("e" * 16 + ".triton.lock")).write_text("")
    (root / "serve").mkdir()
    (root / "serve" / "note").write_bytes(os.urandom(MIB))
    return root


def _names(entries):
    return [e.path.name[:1] for e in entries]


def _bytes(root, *names):
    return sum(e.bytes for e in cache_prune.entries(root) if e.path.name[:1] in names)


def test_the_entries_are_builds_and_extension_folders_least_recently_used_first(cache):
    assert _names(cache_prune.entries(cache)) == ["a", "e", "b", "f"]  # not the judge's own kernel
    found = cache_prune.usage(cache)
    assert found["kinds"]["builds"]["entries"] == 2 and found["kinds"]["torch_extensions"]["entries"] == 2
    assert 2 * MIB <= found["kinds"]["builds"]["bytes"] < 2 * MIB + 65536
    assert 3 * MIB <= found["kinds"]["torch_extensions"]["bytes"] < 3 * MIB + 65536
    assert found["other_bytes"] >= 2 * MIB  # the service's file and the judge's kernel


def test_a_size_bound_removes_the_least_recently_used_until_it_holds(cache):
    keep = _bytes(cache, "b", "f")
    done = cache_prune.prune(cache, keep_bytes=keep, now=_clock)
    assert _names(done.removed) == ["a", "e"] and done.busy == [] and done.failed == [] and done.kept_bytes == keep
    assert _names(cache_prune.entries(cache)) == ["b", "f"]
    assert (cache / "builds" / ".locks").is_dir() and (cache / "serve" / "note").is_file()
    assert (cache / "builds" / ("j" * 64) / "lib.so").is_file()  # the judge's own kernel stays
    assert not (cache / "torch_extensions" / ("e" * 16 + ".used")).exists()  # its mark goes with it
    left = [p for kind in cache_prune.KINDS for p in (cache / kind).iterdir() if p.name.startswith(cache_prune.ASIDE)]
    assert left == []


def test_an_age_bound_removes_every_entry_unused_that_long_and_no_other(cache):
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert _names(done.removed) == ["a", "e"]
    assert _names(cache_prune.entries(cache)) == ["b", "f"]


def test_an_entry_used_within_the_minimum_age_stays_whatever_the_bound(cache):
    done = cache_prune.prune(cache, keep_bytes=0, now=_clock)
    assert _names(done.removed) == ["a", "e", "b"] and _names(done.busy) == ["f"]
    assert _names(cache_prune.prune(cache, keep_bytes=0, now=_clock, min_age_s=0).removed) == ["f"]


def test_a_mark_made_after_the_listing_still_keeps_the_entry(cache):
    """The mark is read again just before an entry goes: a verdict that used it meanwhile keeps it."""
    def clock():
        (cache / "builds" / ("a" * 64) / "meta.json").touch()  # a verdict's hit, while the prune runs
        return NOW

    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=clock)
    assert _names(done.removed) == ["e"] and _names(done.busy) == ["a"]


def _exclusive(path):
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


@pytest.mark.parametrize("who", ["a compile and a Triton verdict", "verdicts using them"])
def test_an_entry_whose_lock_is_held_stays_until_it_is_let_go(cache, who):
    """A raw build's key lock (a compile of that key) and a Triton candidate's cache lock (its
    verdict); or the use locks verdicts hold shared to their end (judge.evaluate), two verdicts of
    the same build side by side: a prune passes them by, and takes the entries once let go."""
    build, ext = cache / "builds" / ("a" * 64), cache / "torch_extensions" / ("e" * 16)
    if who == "verdicts using them":
        holders = [cache_prune.in_use(cache_prune.build_lock(build / "lib.so")), cache_prune.in_use(cache_prune.extension_lock(ext)),
                   cache_prune.in_use(cache_prune.build_lock(build / "lib.so"))]
    else:
        holders = [_exclusive(cache / "builds" / ".locks" / f"{'a' * 64}.lock"), _exclusive(cache / "torch_extensions" / f"{'e' * 16}.triton.lock")]
    assert None not in holders
    try:
        done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
        assert done.removed == [] and _names(done.busy) == ["a", "e"]
    finally:
        for fd in holders:
            os.close(fd)
    assert _names(cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock).removed) == ["a", "e"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_a_verdict_lets_go_of_what_it_held_in_use(tmp_path, monkeypatch):
    from conftest import CANDIDATES, PROBLEMS
    from kernelwright.judge.evaluate import evaluate
    from kernelwright.judge.policy import Policy

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    verdict = evaluate(PROBLEMS / "relu.py", CANDIDATES / "relu_correct", Policy(time_candidate=False, compile_baseline=False,
                       baselines="skip"), device="cpu")
    assert verdict.status.value == "correct", verdict.log
    done = cache_prune.prune(tmp_path / "cache", keep_bytes=0, min_age_s=0)
    assert done.busy == [] and done.failed == [] and [e.kind for e in done.removed] == ["builds"]


def test_a_dry_run_removes_nothing(cache):
    done = cache_prune.prune(cache, keep_bytes=0, now=_clock, dry_run=True)
    assert _names(done.removed) == ["a", "e", "b"] and done.freed == _bytes(cache, "a", "e", "b")
    assert _names(cache_prune.entries(cache)) == ["a", "e", "b", "f"]


def test_what_a_candidate_plants_in_its_folder_neither_inflates_it_nor_stops_the_prune_nor_reaches_outside(cache, tmp_path):
    """A candidate writes its extension folder: a tree deeper than Python's recursion limit, a
    sparse 8 GiB file, hard links to one file, and links to a file and a folder outside the cache. The folder
    counts its blocks once each, the prune walks and removes it whole, and the outside file stays."""
    folder = cache / "torch_extensions" / ("e" * 16)
    fd = os.open(folder, os.O_RDONLY)
    for _ in range(1100):  # deeper than Python's recursion limit (pathlib's mkdir and shutil.rmtree recurse)
        os.mkdir("d", dir_fd=fd)
        fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
        os.close(old)
    with open(os.open("x", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
        f.write("deep")
    os.close(fd)
    with open(folder / "sparse", "wb") as f:
        f.truncate(8 << 30)
    if (folder / "sparse").stat().st_blocks * 512 >= 1 << 30:
        (folder / "sparse").unlink()  # this file system keeps no sparse files: nothing to show here
    for i in range(50):
        os.link(folder / "triton" / "k.cubin", folder / f"hard{i}")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    (folder / "link").symlink_to(outside)
    (folder / "dirlink").symlink_to(tmp_path)
    size = next(e.bytes for e in cache_prune.entries(cache) if e.path == folder)
    assert 2 * MIB <= size < 16 * MIB, size  # 1100 folders' blocks, one 2 MiB file once, no sparse 8 GiB
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert _names(done.removed) == ["a", "e"] and done.failed == []
    assert not folder.exists() and outside.read_text() == "keep me" and tmp_path.is_dir()
    assert not [p for p in (cache / "torch_extensions").iterdir() if p.name.startswith(cache_prune.ASIDE)]


def test_an_entry_that_cannot_be_deleted_is_reported_and_swept_by_the_next_prune(cache, monkeypatch):
    real = cache_prune._remove
    monkeypatch.setattr(cache_prune, "_remove", lambda path: "not all deleted (as a test says)")
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert done.removed == [] and _names([e for e, _ in done.failed]) == ["a", "e"] and "as a test says" in done.failed[0][1]
    assert done.freed == 0 and done.kept_bytes == _bytes(cache, "b", "f")  # set aside: no longer entries
    aside = [p for kind in cache_prune.KINDS for p in (cache / kind).iterdir() if p.name.startswith(cache_prune.ASIDE)]
    assert len(aside) == 2
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)  # the sweep fails again: said again
    assert sorted(str(e.path) for e, _ in done.failed) == sorted(map(str, aside))
    monkeypatch.setattr(cache_prune, "_remove", real)
    done = cache_prune.prune(cache, older_than_s=1e9, now=_clock)  # removes nothing by its bound, sweeps what was set aside
    assert done.failed == [] and not [p for kind in cache_prune.KINDS for p in (cache / kind).iterdir() if p.name.startswith(cache_prune.ASIDE)]


@pytest.mark.skipif(os.geteuid() == 0, reason="root deletes whatever the bits say: only a judge that is not root needs the opening")
def test_a_tree_the_prune_cannot_write_is_opened_and_deleted(cache):
    """A candidate leaves folders without write or search bits for their owner: the prune opens
    them (chmod -R u+rwx, by descriptor) before it deletes them."""
    folder = cache / "torch_extensions" / ("e" * 16)
    (folder / "shut" / "inner").mkdir(parents=True)
    (folder / "shut" / "inner" / "f").write_text("x")
    (folder / "shut" / "inner").chmod(0o000)
    (folder / "shut").chmod(0o500)
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert _names(done.removed) == ["a", "e"] and done.failed == [] and not folder.exists()


def test_a_verdicts_hold_never_delays_a_compile_of_the_same_key(cache):
    """The use lock is a file of its own: a compile's exclusive key lock is free while verdicts hold
    the entry, and a prune meets both."""
    held = cache_prune.in_use(cache_prune.build_lock(cache / "builds" / ("b" * 64) / "lib.so"))
    key = os.open(cache / "builds" / ".locks" / f"{'b' * 64}.lock", os.O_RDONLY)
    try:
        fcntl.flock(key, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as runtime.build's _key_lock: no wait
        fcntl.flock(key, fcntl.LOCK_UN)
        done = cache_prune.prune(cache, older_than_s=24 * HOUR, now=_clock)
        assert _names(done.removed) == ["a", "e"] and _names(done.busy) == ["b"]
    finally:
        os.close(key)
        os.close(held)


def test_a_verdict_waits_for_a_use_lock_no_longer_than_its_bound(cache, monkeypatch):
    """A candidate can read the cache, lock files included, and take one exclusively: a verdict
    waits HOLD_WAIT_S for its hold, then goes on without it."""
    import time as clock

    monkeypatch.setattr(cache_prune, "HOLD_WAIT_S", 0.3)
    lock = cache_prune.build_lock(cache / "builds" / ("b" * 64) / "lib.so")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    squatter = _exclusive(lock)
    try:
        t0 = clock.monotonic()
        assert cache_prune.in_use(lock) is None
        assert 0.25 <= clock.monotonic() - t0 < 5
    finally:
        os.close(squatter)
    fd = cache_prune.in_use(lock)
    assert fd is not None
    os.close(fd)


def test_an_extension_folder_never_marked_counts_as_unused_whatever_its_own_times(cache):
    """A candidate owns its extension folder and may set its times to the far future: only the
    judge's mark beside it counts."""
    folder = cache / "torch_extensions" / ("f" * 16)
    (cache / "torch_extensions" / ("f" * 16 + ".used")).unlink()
    os.utime(folder, (NOW + 1e8, NOW + 1e8))
    assert _names(cache_prune.entries(cache))[0] == "f"


@pytest.mark.parametrize("kw", [{}, {"keep_bytes": -1}, {"older_than_s": -1.0}, {"keep_bytes": 0, "min_age_s": -1.0},
                                {"keep_bytes": 0, "min_age_s": float("nan")}, {"older_than_s": float("nan")},
                                {"keep_bytes": float("inf")}])
def test_a_prune_without_a_bound_or_with_a_negative_or_non_finite_one_is_refused(cache, kw):
    with pytest.raises(ValueError):
        cache_prune.prune(cache, now=_clock, **kw)
    assert len(cache_prune.entries(cache)) == 4


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_the_judge_marks_each_use_of_an_entry(tmp_path, monkeypatch):
    """A raw build's hit touches its meta.json, a verdict's extension folder the mark beside it, and
    the fork server lists its own kernels: the marks a prune goes by, never access times."""
    from kernelwright.judge import build, extension, forkserver

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    spec = build.spec_from_text('extern "C" int one() { return 1; }', lang="cpp", name="one")
    first = build.build(spec, sandbox_mode="off")
    assert first.ok and not first.cached, first.log
    meta = first.lib_path.parent / "meta.json"
    os.utime(meta, (NOW - 240 * HOUR, NOW - 240 * HOUR))
    assert build.build(spec, sandbox_mode="off").cached
    assert time.time() - meta.stat().st_mtime < 60
    folder = extension.folder("ab" * 32)
    mark = folder.parent / f"{folder.name}.used"
    os.utime(mark, (NOW - 240 * HOUR, NOW - 240 * HOUR))
    assert extension.folder("ab" * 32) == folder and time.time() - mark.stat().st_mtime < 60
    forkserver._judge_kernels(build)
    kept = (tmp_path / "cache" / "builds" / cache_prune.JUDGE_KERNELS).read_text().split()
    assert kept and all((tmp_path / "cache" / "builds" / key / "lib.so").is_file() for key in kept)
    assert not {e.path.name for e in cache_prune.entries(tmp_path / "cache")} & set(kept)


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
    with pytest.raises(SystemExit) as done:
        main(["cache", "prune", "--older-than-days", "3", "--dry-run"])
    said = capsys.readouterr().out
    assert done.value.code == 0 and "would remove 2 entries" in said and str(cache / "builds" / ("a" * 64)) in said
    for bad in (["cache", "prune"], ["cache", "prune", "--keep-gb", "-1"], ["cache", "prune", "--keep-gb", "inf"],
                ["cache", "prune", "--keep-gb", "1", "--min-age-hours", "nan"]):
        with pytest.raises(SystemExit) as done:
            main(bad)
        assert done.value.code == 2, bad
    assert len(cache_prune.entries(cache)) == 4


def test_a_pruned_entrys_lock_files_go_with_it_and_older_strays_are_swept_unless_held(cache):
    """The lock files and marks of what a prune removes are unlinked while it holds them; ones an
    entry left earlier are swept once untouched for the minimum age, except one another process holds."""
    locks, ext = cache / "builds" / ".locks", cache / "torch_extensions"
    old = NOW - 2 * HOUR
    strays = [locks / f"{'s' * 64}.lock", locks / f"{'s' * 64}.use", ext / f"{'t' * 16}.triton.lock", ext / f"{'t' * 16}.use.lock",
              ext / f"{'t' * 16}.used", locks / f"{'h' * 64}.lock", locks / f"{'n' * 64}.use"]
    for f in strays:
        f.write_text("")
        os.utime(f, (old, old))
    os.utime(strays[-1], (NOW, NOW))  # touched within the minimum age: kept
    held = _exclusive(strays[-2])  # another process holds it: kept
    os.close(cache_prune.in_use(cache_prune.build_lock(cache / "builds" / ("b" * 64) / "lib.so")))  # b's use lock made, let go
    try:
        done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    finally:
        os.close(held)
    assert _names(done.removed) == ["a", "e"]
    assert not (locks / f"{'a' * 64}.lock").exists() and not (ext / f"{'e' * 16}.triton.lock").exists()  # the removed entries'
    assert (locks / f"{'b' * 64}.lock").exists() and (locks / f"{'b' * 64}.use").exists()  # a kept entry's stay
    assert [f.exists() for f in strays] == [False] * 5 + [True, True]


def test_the_sweep_keeps_old_lock_files_and_marks_of_live_entries(cache):
    old = NOW - 2 * HOUR
    live = [cache / "builds" / ".locks" / f"{'b' * 64}.use", cache / "torch_extensions" / f"{'f' * 16}.triton.lock",
            cache / "torch_extensions" / f"{'f' * 16}.use.lock"]
    for f in live:
        f.write_text("")
        os.utime(f, (old, old))
    os.utime(cache / "builds" / ".locks" / f"{'b' * 64}.lock", (old, old))
    cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert all(f.exists() for f in live) and (cache / "builds" / ".locks" / f"{'b' * 64}.lock").exists()
    assert (cache / "torch_extensions" / f"{'f' * 16}.used").exists()


def test_a_verdict_that_comes_for_an_entry_while_it_goes_waits_for_the_prunes_lock(cache, monkeypatch):
    """An entry with no use lock file yet: the prune makes and holds it, so a verdict that asks for
    the entry while it is renamed aside gets no hold on a file about to be unlinked."""
    real = os.rename
    got = []
    lock = cache_prune.build_lock(cache / "builds" / ("a" * 64) / "lib.so")
    assert not lock.exists()

    def renaming(src, dst):
        if str(src).endswith("a" * 64):
            got.append(cache_prune.in_use(lock))  # a verdict's hold, now
        return real(src, dst)

    monkeypatch.setattr(cache_prune, "HOLD_WAIT_S", 0.2)
    monkeypatch.setattr(cache_prune.os, "rename", renaming)
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert "a" in _names(done.removed) and got == [None] and not lock.exists()


def test_a_use_lock_unlinked_between_its_open_and_its_lock_is_taken_again_on_the_file_in_place(tmp_path, monkeypatch):
    lock = tmp_path / ".locks" / "k.use"
    real = cache_prune.flock_within
    calls = []

    def racing(fd, how, wait_s):
        if not calls:  # a prune unlinks it after this verdict opened it
            lock.unlink()
        calls.append(fd)
        return real(fd, how, wait_s)

    monkeypatch.setattr(cache_prune, "flock_within", racing)
    fd = cache_prune.in_use(lock)
    try:
        assert fd is not None and len(calls) == 2 and cache_prune.same_file(fd, lock)
    finally:
        os.close(fd)


def test_the_triton_cache_lock_is_not_taken_on_a_file_unlinked_meanwhile(tmp_path, monkeypatch):
    import fcntl as real_fcntl

    from kernelwright.judge import extension

    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path / "cache"))
    base = extension.folder("ab" * 8)
    path = base.parent / f"{base.name}.triton.lock"
    flock = real_fcntl.flock

    def racing(fd, how):
        path.unlink(missing_ok=True)  # a prune, between the open and the lock
        return flock(fd, how)

    monkeypatch.setattr(real_fcntl, "flock", racing)
    assert extension.hold_triton_cache("ab" * 8) is None
    monkeypatch.setattr(real_fcntl, "flock", flock)
    fd = extension.hold_triton_cache("ab" * 8)
    assert fd is not None
    os.close(fd)


def test_lock_files_are_made_only_for_an_entry_that_goes_and_never_in_a_dry_run(cache):
    locks, ext = cache / "builds" / ".locks", cache / "torch_extensions"
    before = sorted(p.name for p in [*locks.iterdir(), *ext.iterdir()])
    cache_prune.prune(cache, keep_bytes=0, now=_clock, dry_run=True)
    assert sorted(p.name for p in [*locks.iterdir(), *ext.iterdir()]) == before
    done = cache_prune.prune(cache, keep_bytes=0, now=_clock)  # f, used 10 minutes ago, is looked at and stays
    assert _names(done.removed) == ["a", "e", "b"] and _names(done.busy) == ["f"]
    assert not (ext / f"{'f' * 16}.use.lock").exists() and not (ext / f"{'f' * 16}.triton.lock").exists()


def test_a_removal_that_fails_takes_back_only_the_lock_files_it_made(cache, monkeypatch):
    locks = cache / "builds" / ".locks"
    real = os.rename

    def refusing(src, dst):
        if str(src).endswith("a" * 64):
            raise PermissionError(13, "refused", str(src))
        return real(src, dst)

    monkeypatch.setattr(cache_prune.os, "rename", refusing)
    done = cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert [e.path.name[:1] for e, _ in done.failed] == ["a"] and _names(done.removed) == ["e"]
    assert (locks / f"{'a' * 64}.lock").exists()  # there before: stays with its entry
    assert not (locks / f"{'a' * 64}.use").exists()  # made by this prune for the removal: taken back


def test_the_sweep_keeps_a_gone_entrys_files_while_one_of_them_is_recent(cache):
    locks = cache / "builds" / ".locks"
    old, recent = locks / f"{'s' * 64}.lock", locks / f"{'s' * 64}.use"
    for f, t in ((old, NOW - 2 * HOUR), (recent, NOW)):
        f.write_text("")
        os.utime(f, (t, t))
    cache_prune.prune(cache, older_than_s=72 * HOUR, now=_clock)
    assert old.exists() and recent.exists()
