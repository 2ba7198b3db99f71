"""Computed metadata of a problem: FLOPs, minimal bytes moved, the physics floor and the ceilings.

Nothing here is typed by hand. The problem's model and inputs are built on torch's `meta` device
(shapes and dtypes, no storage, no arithmetic), and one forward runs under torch's FLOP counter
(`torch.utils.flop_counter.FlopCounterMode`, which counts matrix products, convolutions and attention;
elementwise work counts zero). Minimal bytes are those the judge uses: every input, output, parameter
and buffer once. A problem whose forward has no meta kernel (data-dependent shapes, for example) is
run for real on the CPU instead, and the record says so.

`compute(path)` runs in the process that calls it; `metadata_for(problems)` runs the problems' code in
a child process, as everything that runs problem code outside the judge's own children does, and
caches the answers by content hash; `metadata_or_errors` also returns, per problem, why it failed
(a missing module, an exception, a hang), without giving up on the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

from kernelwright.judge import roofline

L2_BYTES_H200 = 60 * 1024**2  # GPU.md: 60 MB of L2 on the reference GPU
MIN_DATA_BYTES = 3 * L2_BYTES_H200  # the built-in suite's rule: data at least 3x the L2
MIN_EAGER_MS = 0.1  # the built-in suite's rule: one eager forward takes at least this on the H200
META_VERSION = 1  # bump when the record's fields or their meaning change (invalidates the cache)
START_TIMEOUT_S = 120.0  # a metadata child's start (torch's import and a warm-up), before any problem's own time limit


def _run(module: Any, device: str) -> dict[str, Any]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kernelwright.judge.correctness import as_output_list
    from kernelwright.judge.inputs import Case, init_model, raw_inputs, tensor_bytes

    dev = torch.device(device)
    model = init_model(module, module.Model, 0, dev)
    values = raw_inputs(module, Case("native", 0), dev)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        out = model(*values)
    outs = [o for o in as_output_list(out) if isinstance(o, torch.Tensor)]
    params = tensor_bytes(list(model.parameters())) + tensor_bytes(list(model.buffers()))
    by_op: dict[str, int] = {}
    for op, n in counter.get_flop_counts().get("Global", {}).items():
        name = str(op).split(".", 1)[-1]  # aten.mm -> mm
        by_op[name] = by_op.get(name, 0) + int(n)
    return {
        "flops": int(counter.get_total_flops()),
        "flops_by_op": dict(sorted(by_op.items())),
        "input_bytes": tensor_bytes(values),
        "output_bytes": tensor_bytes(outs),
        "param_bytes": int(params),
        "inputs": [{"shape": list(v.shape), "dtype": str(v.dtype).replace("torch.", "")} for v in values if isinstance(v, torch.Tensor)],
        "outputs": [{"shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")} for o in outs],
        "n_params": int(sum(p.numel() for p in model.parameters())),
    }


def compute(path: str | Path) -> dict[str, Any]:
    """The metadata of one problem file, computed in this process (the problem's code runs here)."""
    from kernelwright.judge.inputs import import_file

    path = Path(path).resolve()
    name = f"kw_meta_{abs(hash(str(path)))}"
    module = import_file(path, name)
    try:
        try:
            record = _run(module, "meta")
            record["computed_on"] = "meta"
        except Exception as exc:  # noqa: BLE001 - no meta kernel: the real forward on the CPU
            record = _run(module, "cpu")
            record["computed_on"] = "cpu"
            record["meta_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    finally:
        sys.modules.pop(name, None)
    n_bytes = record["input_bytes"] + record["output_bytes"] + record["param_bytes"]
    record["bytes"] = int(n_bytes)
    record["floor_ms"] = roofline.floor_ms(n_bytes, record["flops"])
    record["ceiling_ms"] = {p: roofline.ceiling_ms(n_bytes, record["flops"], p) for p in ("fp32", "tf32", "bf16")}
    record["meta_version"] = META_VERSION
    return record


def _cache_file() -> Path:
    from kernelwright.judge.build import cache_dir

    return cache_dir() / "problem_meta.json"


def _torch_version() -> str:
    try:
        from importlib.metadata import version

        return version("torch")
    except Exception:  # noqa: BLE001
        return "unknown"


def metadata_for(problems: list[Any], *, progress: Callable[[int, int], None] | None = None, timeout_s: float = 120.0,
                 tell: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """{problem hash: metadata} for loaded problems (see metadata_or_errors); RuntimeError, naming
    the first problem that failed and why, when any failed."""
    found, failed = metadata_or_errors(problems, progress=progress, timeout_s=timeout_s, tell=tell)
    for p in problems:
        if p.hash in failed:
            raise RuntimeError(f"{p.path}: computing its metadata failed: {failed[p.hash]}")
    return found


def metadata_or_errors(problems: list[Any], *, progress: Callable[[int, int], None] | None = None, timeout_s: float = 120.0,
                       tell: Callable[[str], None] | None = None) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """({problem hash: metadata}, {problem hash: why it failed}) for loaded problems. Problem code
    runs in a child process; a problem that fails, hangs past timeout_s or kills the child costs
    only its own answer (a fresh child takes the rest). Answers are cached by (content hash, torch
    version, META_VERSION), failures never (a missing module may be installed by the next run).
    `tell` gets the line that says what the cache file got (kernelwright.written), when it changed."""
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    tv = _torch_version()
    key = {p.hash: f"{p.hash}:{tv}:{META_VERSION}" for p in problems}
    todo = list({key[p.hash]: p for p in problems if key[p.hash] not in cache}.values())  # one run per content
    failed: dict[str, str] = {}
    n_new = 0
    try:
        for n, (i, answer, error) in enumerate(_answers([str(p.path) for p in todo], timeout_s), 1):
            if error is None:
                cache[key[todo[i].hash]] = answer
                n_new += 1
            else:
                failed[todo[i].hash] = error
            if progress:
                progress(n, len(todo))
    finally:
        if n_new:
            line = _write_cache(cache_path, cache, n_new)
            if tell:
                tell(line)
    return {p.hash: cache[key[p.hash]] for p in problems if p.hash not in failed}, failed


def _write_cache(path: Path, cache: dict[str, Any], n_new: int) -> str:
    """Replace the cache file atomically; a cache that cannot be written costs time, not answers.
    The line that says which it was."""
    from kernelwright import written

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, path)
    except OSError as exc:
        return written.skipped(path, f"the metadata cache could not be written ({type(exc).__name__}: {exc}); "
                                     f"{n_new} answer(s) will be computed again next time")
    return written.cached("problem metadata", path, n_new)


def reason_of(exc: BaseException) -> str:
    """Why a problem's metadata could not be computed, in a line: a missing module by its name."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f"needs module {exc.name}, which is not installed here"
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def _answers(paths: list[str], timeout_s: float) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """(index, metadata or None, error or None) for every path, in order, from as many children as
    it takes: one that dies or hangs past timeout_s on a problem is replaced after it."""
    start = 0
    while start < len(paths):
        start = yield from _one_child(paths, start, timeout_s)


def _one_child(paths: list[str], start: int, timeout_s: float) -> Generator[tuple[int, Any, str | None], None, int]:
    """Answers for paths[start:] from one child; returns where the next child starts. The answers
    come on a pipe of their own, so a problem that prints cannot corrupt them; its stdout and stderr
    go to a file (no pipe to fill up). The child says it is ready once torch is imported and the
    metadata path warmed up (within START_TIMEOUT_S; a child that fails before that fails every
    problem left with its reason, none of their code having run); from then on each problem gets
    timeout_s, then the child is killed."""
    import select
    import tempfile

    src = str(Path(__file__).resolve().parents[2])
    pythonpath = os.pathsep.join(x for x in (src, os.environ.get("PYTHONPATH", "")) if x)
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "kernelwright.judge.problem_meta", str(write_fd)], stdin=subprocess.PIPE,
                                stdout=log, stderr=log, pass_fds=(write_fd,), env={**os.environ, "PYTHONPATH": pythonpath})
        os.close(write_fd)
        try:
            assert proc.stdin is not None
            try:
                proc.stdin.write(json.dumps(paths[start:]).encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass  # gone before it read them: the read below says how
            buf, at, started = b"", start, False
            while at < len(paths):
                if b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    answer = json.loads(line)
                    if started:
                        yield at, answer.get("meta"), answer.get("error")
                        at += 1
                    elif answer.get("ready") is True:
                        started = True
                    else:  # only the judge's own code runs before the ready line
                        return (yield from _fail_rest(paths, at, f"the metadata child's first line was not its ready line: {line[:200]!r}"))
                    continue
                wait_s = timeout_s if started else max(timeout_s, START_TIMEOUT_S)
                ready, _, _ = select.select([read_fd], [], [], wait_s)
                chunk = os.read(read_fd, 1 << 16) if ready else b""
                if not chunk:
                    proc.kill()
                    proc.wait()
                    log.seek(0)
                    tail = log.read()[-2000:].decode(errors="replace").strip()
                    tail = f": {tail}" if tail else ""
                    if not started:  # no problem's code ran: the same error for every problem left, and no new child
                        what = (f"the metadata child exited {proc.returncode} before it was ready" if ready
                                else f"the metadata child did not start (torch's import and a warm-up) within {wait_s:g} s")
                        return (yield from _fail_rest(paths, at, what + tail))
                    what = f"the metadata child exited {proc.returncode}" if ready else f"killed after {timeout_s:g} s"
                    yield at, None, what + tail
                    return at + 1
                buf += chunk
            return at
        finally:
            os.close(read_fd)
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _fail_rest(paths: list[str], at: int, why: str) -> Generator[tuple[int, Any, str | None], None, int]:
    """paths[at:] each failed for the one reason; returns the end."""
    for i in range(at, len(paths)):
        yield i, None, why
    return len(paths)


def _warm_up() -> None:
    """The metadata path once, on a model of the child's own: the imports a first problem would pay
    for (torch, then sympy and dynamo through the FLOP counter: seconds) become the child's start."""
    import types

    import torch

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    warm = types.ModuleType("kw_meta_warm_up")
    warm.Model, warm.get_inputs, warm.get_init_inputs = Model, lambda: [torch.randn(2, 2)], lambda: []  # type: ignore[attr-defined]
    _run(warm, "meta")


def _child_main(answer_fd: int) -> None:
    """Read a JSON list of paths on stdin (all of it first: the parent's write must not wait on the
    warm-up), warm up, say ready, then write one JSON line per problem, in order, to answer_fd."""
    paths = json.loads(sys.stdin.read())
    try:
        _warm_up()
    except Exception:  # noqa: BLE001 - then the first problem pays for the imports, as it would have
        pass
    with os.fdopen(answer_fd, "w") as answers:
        answers.write(json.dumps({"ready": True}) + "\n")
        answers.flush()
        for path in paths:
            try:
                answer = {"meta": compute(path)}
            except BaseException as exc:  # noqa: BLE001 - the parent names the problem
                answer = {"error": reason_of(exc)}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))
