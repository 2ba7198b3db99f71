"""Which sandbox rule keeps CUDA from starting? (GPU machine)

    PYTHONPATH=src python3 benchmarks/sandbox_cuda_probe.py --out DIR

On the H100 at f9976c3 (benchmarks/results/sandbox_gpu.md) torch's cudaGetDeviceCount failed with
error 304 ("OS call failed") under Landlock alone and under the seccomp filter alone, and worked
under the uid alone. This script starts CUDA (cuInit and a torch matmul) in forked children, each
confined by one variant: the seccomp filter with one denied call allowed at a time, socket() for
unix sockets only, Landlock with one more path or right at a time; and, where strace is installed,
traces the failing child's file, network and IPC calls. Writes DIR/sandbox_cuda_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from kernelwright.judge import confine  # noqa: E402

_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from kernelwright.judge import confine, sandbox
variant = json.loads(sys.argv[2])
wd = sys.argv[3]
try:
    confine.no_new_privs()
    if variant.get("landlock") is not None:
        abi = confine.landlock_abi()
        spec = sandbox.spec_for("auto")
        rules = sandbox.rules(spec, wd) + [(p, r if r >= 0 else confine.fs_rights(abi)) for p, r in variant["landlock"]]
        confine.landlock(rules, abi=abi)
    if variant.get("seccomp") is not None:
        confine.seccomp(tuple(variant["seccomp"]), tuple(variant.get("families", sandbox.socket_families())))
    import torch
    x = torch.randn(256, 256, device="cuda")
    print(json.dumps({"ok": float((x @ x).sum()) == float((x @ x).sum())}))
except BaseException as exc:
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:200]}))
"""


def variants(quick: bool = False) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("nothing", {}), ("seccomp as is", {"seccomp": []}), ("landlock as is", {"landlock": []}),
                                             ("both as is", {"seccomp": [], "landlock": []})]
    out += [(f"seccomp, sockets of families {fams} only", {"seccomp": [], "families": fams}) for fams in ([], [1], [16], [1, 16])]
    if quick:
        return out
    out += [(f"seccomp allowing {name}", {"seccomp": [name]}) for name in (*confine.DENIED, "clone", "clone3")]
    out += [("landlock + /dev/shm rw", {"landlock": [("/dev/shm", -1)]}), ("landlock + /tmp rw", {"landlock": [("/tmp", -1)]}),
            ("landlock + /dev read", {"landlock": [("/dev", confine.READ)]}), ("landlock + /dev rw", {"landlock": [("/dev", -1)]}),
            ("landlock + /run rw", {"landlock": [("/run", -1)]}), ("landlock + /proc rw", {"landlock": [("/proc", -1)]}),
            ("landlock + /sys rw", {"landlock": [("/sys", -1)]}), ("landlock + /etc read", {"landlock": [("/etc", confine.READ)]}),
            ("landlock + / read", {"landlock": [("/", confine.READ)]}), ("landlock + / rw", {"landlock": [("/", -1)]})]
    return out


def run(variant: dict[str, Any], strace: str | None = None) -> dict[str, Any]:
    wd = tempfile.mkdtemp(prefix="kw-cuda-probe-")
    cmd = [sys.executable, "-c", _CHILD, str(HERE.parent / "src"), json.dumps(variant), wd]
    if strace:
        cmd = [strace, "-f", "-e", "trace=%file,%network,%ipc,%memory,ioctl", "-e", "status=failed", "-o", os.path.join(wd, "trace"), *cmd]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=wd)
    lines = [x for x in done.stdout.splitlines() if x.startswith("{")]
    got = json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr[-300:]}
    got["seconds"] = round(time.perf_counter() - t0, 2)
    if strace and os.path.exists(os.path.join(wd, "trace")):
        got["trace_failed_calls"] = Path(wd, "trace").read_text(errors="replace").splitlines()[-60:]
    shutil.rmtree(wd, ignore_errors=True)
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="only the sandbox as it is and the socket families")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"rows": []}
    for name, variant in variants(args.quick):
        row = {"variant": name, **run(variant)}
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
    strace = shutil.which("strace")
    result["strace"] = strace
    if strace:
        for name, variant in (("seccomp as is", {"seccomp": []}), ("landlock as is", {"landlock": []})):
            result[f"trace {name}"] = run(variant, strace)
            print(json.dumps({"trace": name, **result[f"trace {name}"]})[:6000], flush=True)
    (args.out / "sandbox_cuda_probe.json").write_text(json.dumps(result, indent=1))
    print("\n" + "\n".join(f"{r['variant']}: {'ok' if r['ok'] else r.get('error', '')[:100]}" for r in result["rows"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
