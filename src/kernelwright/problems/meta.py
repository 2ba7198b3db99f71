"""Computed metadata of a problem: FLOPs, minimal bytes moved, the physics floor and the ceilings.

Nothing here is typed by hand. The problem's model and inputs are built on torch's `meta` device
(shapes and dtypes, no storage, no arithmetic), and one forward runs under torch's FLOP counter
(`torch.utils.flop_counter.FlopCounterMode`, which counts matrix products, convolutions and attention;
elementwise work counts zero). Minimal bytes are those the judge uses: every input, output, parameter
and buffer once. A problem whose forward has no meta kernel (data-dependent shapes, for example) is
run for real on the CPU instead, and the record says so.

`compute(path)` runs in the process that calls it; `metadata_for(problems)` runs the problems' code in
a child process, as everything that runs problem code outside the judge's own children does, and
caches the answers by content hash.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from kernelwright.judge import roofline

L2_BYTES_H200 = 60 * 1024**2  # GPU.md: 60 MB of L2 on the reference GPU
MIN_DATA_BYTES = 3 * L2_BYTES_H200  # the built-in suite's rule: data at least 3x the L2
MIN_EAGER_MS = 0.1  # the built-in suite's rule: one eager forward takes at least this on the H200
META_VERSION = 1  # bump when the record's fields or their meaning change (invalidates the cache)


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


def metadata_for(problems: list[Any], *, progress: Callable[[int, int], None] | None = None, timeout_s: float = 600.0) -> dict[str, dict[str, Any]]:
    """{problem hash: metadata} for loaded problems; problem code runs in one child process, and
    answers are cached by (content hash, torch version, META_VERSION). Raises RuntimeError, naming
    the problem, when its metadata cannot be computed."""
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    tv = _torch_version()
    key = {p.hash: f"{p.hash}:{tv}:{META_VERSION}" for p in problems}
    todo = [p for p in problems if key[p.hash] not in cache]
    if todo:
        for answer, p in _run_child([str(p.path) for p in todo], todo, timeout_s):
            cache[key[p.hash]] = answer
            if progress:
                progress(len([q for q in todo if key[q.hash] in cache]), len(todo))
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache))
            os.replace(tmp, cache_path)
        except OSError:
            pass  # a cache that cannot be written costs time, not answers
    return {p.hash: cache[key[p.hash]] for p in problems}


def _run_child(paths: list[str], problems: list[Any], timeout_s: float) -> Any:
    """Yield (metadata, problem) from one child process, in order. The child's answers come on a
    pipe of their own, so a problem that prints cannot corrupt them; its stdout and stderr go to a
    file (no pipe to fill up); the whole child is killed after timeout_s. RuntimeError names the
    problem that failed."""
    import tempfile
    import threading

    src = str(Path(__file__).resolve().parents[2])
    pythonpath = os.pathsep.join(x for x in (src, os.environ.get("PYTHONPATH", "")) if x)
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "kernelwright.problems.meta", str(write_fd)], stdin=subprocess.PIPE,
                                stdout=log, stderr=log, pass_fds=(write_fd,), text=True, env={**os.environ, "PYTHONPATH": pythonpath})
        os.close(write_fd)
        timer = threading.Timer(timeout_s, proc.kill)
        timer.start()
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(paths))
            proc.stdin.close()
            done = 0
            with os.fdopen(read_fd) as answers:
                for line in answers:
                    answer = json.loads(line)
                    p = problems[answer["index"]]
                    if "error" in answer:
                        raise RuntimeError(f"{p.path}: computing its metadata failed: {answer['error']}")
                    done += 1
                    yield answer["meta"], p
            if done != len(paths):
                proc.wait(timeout=30)
                log.seek(0)
                tail = log.read()[-2000:].decode(errors="replace")
                what = f"killed after {timeout_s:g} s" if not timer.is_alive() else f"exit {proc.returncode}"
                raise RuntimeError(f"the metadata child stopped at {problems[done].path} ({what}): {tail}")
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _child_main(answer_fd: int) -> None:
    """Read a JSON list of paths on stdin; write one JSON line per problem, in order, to answer_fd."""
    paths = json.loads(sys.stdin.read())
    with os.fdopen(answer_fd, "w") as answers:
        for i, path in enumerate(paths):
            try:
                answer = {"index": i, "meta": compute(path)}
            except BaseException as exc:  # noqa: BLE001 - the parent names the problem
                answer = {"index": i, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
            if "error" in answer:
                return


if __name__ == "__main__":
    _child_main(int(sys.argv[1]))
