"""What confinement does this machine allow a judge child? (GPU machine and CPU box alike)

    PYTHONPATH=src python3 benchmarks/sandbox_probe.py --out DIR

Reads what the kernel and the container allow (identity and capabilities, Landlock's ABI, seccomp,
namespaces, a pids cgroup, the GPU's device files and whether the driver keeps profiling to
administrators), then confines a forked child with judge.confine exactly as the sandbox would (an
uid of its own, no_new_privs, Landlock, the seccomp filter, resource limits) and has it use the GPU:
a torch matmul and a CUDA IPC export that a fresh, unconfined process opens and reads (the judge's
hand-over of outputs to the reference child, judge.handover). Each step's outcome goes to
DIR/sandbox_probe.json; a short table is printed last.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from kernelwright.judge import confine  # noqa: E402

_IMPORTER = r"""
import ctypes, sys
cu = ctypes.CDLL("libcuda.so.1")
handle = bytes.fromhex(sys.argv[1]); n = int(sys.argv[2])
assert cu.cuInit(0) == 0
dev = ctypes.c_int(); assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
ptr = ctypes.c_uint64()
rc = cu.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), ctypes.create_string_buffer(handle, 64), 1)
if rc != 0:
    print("open_rc", rc); sys.exit(3)
buf = (ctypes.c_uint32 * n)()
assert cu.cuMemcpyDtoH_v2(buf, ptr, 4 * n) == 0
print("values", buf[0], buf[n - 1])
"""


def facts() -> dict[str, Any]:
    out: dict[str, Any] = {"uid": os.getuid(), "kernel": platform.release(), "machine": platform.machine(), "python": sys.version.split()[0]}
    status = Path("/proc/self/status").read_text()
    out["status"] = {k: v.strip() for k, v in (line.split(":", 1) for line in status.splitlines()) if k in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp")}
    out["landlock_abi"] = confine.landlock_abi()
    out["nvidia_devices"] = {p.name: oct(p.stat().st_mode & 0o777) for p in sorted(Path("/dev").glob("nvidia*")) if not p.is_dir()}
    try:
        params = Path("/proc/driver/nvidia/params").read_text()
        out["profiling_admin_only"] = [x for x in params.splitlines() if "Profiling" in x]
    except OSError as exc:
        out["profiling_admin_only"] = f"unread: {exc}"
    out["cgroup"] = Path("/proc/self/cgroup").read_text().strip().splitlines()
    out["cgroup_fs"] = subprocess.run(["sh", "-c", "mount | grep cgroup"], capture_output=True, text=True).stdout.strip().splitlines()[:12]
    for ns in ("net", "mount", "pid", "user"):
        flag = {"net": "--net", "mount": "--mount", "pid": "--pid --fork", "user": "--user --map-root-user"}[ns]
        r = subprocess.run(f"unshare {flag} true", shell=True, capture_output=True, text=True)
        out[f"unshare_{ns}"] = r.returncode == 0 or r.stderr.strip()[:120]
    for cg in ("/sys/fs/cgroup/pids", "/sys/fs/cgroup"):
        probe = Path(cg) / "kw-probe"
        try:
            probe.mkdir()
            out[f"cgroup_mkdir {cg}"] = sorted(x.name for x in probe.iterdir())[:8]
            probe.rmdir()
        except OSError as exc:
            out[f"cgroup_mkdir {cg}"] = str(exc)
    here = Path.cwd()
    out["paths"] = {str(p): oct(p.stat().st_mode & 0o777) for p in [here, *here.parents, Path(sys.prefix), Path(sys.executable).resolve().parent]}
    out["which"] = {t: subprocess.run(["sh", "-c", f"command -v {t}"], capture_output=True, text=True).stdout.strip() for t in ("ncu", "compute-sanitizer", "nvcc", "g++", "bwrap", "unshare")}
    out["pid_max"] = Path("/proc/sys/kernel/pid_max").read_text().strip()
    return out


def rules(wd: str, abi: int) -> list[tuple[str, int]]:
    read = ["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys", "/dev", "/run/nvidia-persistenced",
            sys.prefix, sys.base_prefix, *[p for p in sys.path if p]]
    got = [(p, confine.READ) for p in read]
    got += [(str(p), confine.FILE_RIGHTS) for p in Path("/dev").glob("nvidia*") if not p.is_dir()]
    got += [("/dev/null", confine.FILE_RIGHTS), ("/dev/zero", confine.READ), (wd, confine.fs_rights(abi))]
    return got


def confined_child(wd: str, step: str, layers: tuple[str, ...], report_w: int) -> None:
    """In the forked child: confine by `layers`, then do `step`; one JSON line to report_w."""
    res: dict[str, Any] = {"step": step, "layers": list(layers)}
    try:
        uid = 0x6B000000 + os.getpid()
        if "limits" in layers:
            confine.set_limits({"NOFILE": 4096, "FSIZE": 1 << 32, "CORE": 0, "NPROC": 256 if "uid" in layers else resource_nproc()})
        if "data" in layers:
            confine.set_limits({"DATA": 64 << 30})
        if "uid" in layers:
            os.chown(wd, uid, uid)
            confine.become(uid, keep_read_search="landlock" in layers)
        confine.no_new_privs()
        if "landlock" in layers:
            abi = confine.landlock_abi()
            confine.landlock(rules(wd, abi), abi=abi)
        if "seccomp" in layers:
            confine.seccomp()
        res["confined"] = True
        t0 = time.perf_counter()
        import torch

        x = torch.randn(512, 512, device="cuda")
        res["matmul"] = float((x @ x).abs().sum()) > 0
        res["torch_s"] = round(time.perf_counter() - t0, 3)
        if step == "ipc":
            cu = ctypes.CDLL("libcuda.so.1")
            n = 1024
            ptr = ctypes.c_uint64()
            assert cu.cuMemAlloc_v2(ctypes.byref(ptr), 4 * n) == 0
            assert cu.cuMemsetD32_v2(ptr, 1234567, n) == 0
            assert cu.cuCtxSynchronize() == 0
            handle = ctypes.create_string_buffer(64)
            rc = cu.cuIpcGetMemHandle(handle, ptr)
            res["ipc_export_rc"] = rc
            os.write(report_w, (json.dumps({**res, "handle": handle.raw.hex(), "n": n}) + "\n").encode())
            time.sleep(20)  # the importer reads while this process lives
            os._exit(0)
        for name, act in (("socket", lambda: socket.socket()), ("write_outside", lambda: open("/tmp/kw-probe-outside", "w")),
                          ("signal_parent", lambda: os.kill(os.getppid(), 0)), ("parent_environ", lambda: open(f"/proc/{os.getppid()}/environ").read())):
            try:
                act()
                res[name] = "ALLOWED"
            except OSError as exc:
                res[name] = f"refused errno {exc.errno}"
    except BaseException as exc:  # noqa: BLE001 - the probe reports, it does not stop
        res["error"] = f"{type(exc).__name__}: {exc}"[:300]
    os.write(report_w, (json.dumps(res) + "\n").encode())
    os._exit(0)


def resource_nproc() -> int:
    return 4096


def run_child(step: str, layers: tuple[str, ...]) -> dict[str, Any]:
    wd = tempfile.mkdtemp(prefix="kw-probe-")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        confined_child(wd, step, layers, w)
    os.close(w)
    f = os.fdopen(r)
    line = f.readline()
    res = json.loads(line) if line else {"step": step, "error": "no report"}
    if step == "ipc" and "handle" in res:
        imp = subprocess.run([sys.executable, "-c", _IMPORTER, res.pop("handle"), str(res.pop("n"))], capture_output=True, text=True, timeout=120)
        res["ipc_import"] = (imp.stdout + imp.stderr).strip()[-300:]
        os.kill(pid, 9)
    os.waitpid(pid, 0)
    f.close()
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"facts": facts(), "runs": []}
    full = ("limits", "uid", "landlock", "seccomp")
    for step, layers in (("use", ()), ("use", ("limits",)), ("use", ("limits", "data")), ("use", ("limits", "uid")),
                         ("use", ("limits", "landlock")), ("use", ("limits", "seccomp")), ("use", full), ("ipc", ()), ("ipc", full)):
        t0 = time.perf_counter()
        res = run_child(step, layers)
        res["wall_s"] = round(time.perf_counter() - t0, 2)
        result["runs"].append(res)
        print(json.dumps(res), flush=True)
    (args.out / "sandbox_probe.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result["facts"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
