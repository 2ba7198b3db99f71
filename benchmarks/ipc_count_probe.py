"""Does nvidia-smi count a CUDA IPC mapping in the importing process too? (GPU experiment)

The memory benches sum nvidia-smi's per-process figures. The judge's reference child reads each
candidate output in place by CUDA IPC from the candidate child's staging area (judge.handover), and
on the H200 at 3dd13b2 its figure sat 64 MiB (matmul's output) above anything its allocator held
(benchmarks/results/memory_h200.md). This allocates SIZE MiB in this process, hands it to a second
process by CUDA IPC (torch.multiprocessing), and reads nvidia-smi's per-process figures and the
device-wide memory.used before and after the second process maps it, and after it lets go:

    PYTHONPATH=src python3 benchmarks/ipc_count_probe.py --out DIR [--mib 256]

Writes DIR/ipc_count_probe.json (provenance in it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import hostinfo  # beside this file, on sys.path when run as a script


def smi() -> dict:
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout
    used = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    each = {}
    for line in apps.strip().splitlines():
        pid, _, mib = (x.strip() for x in line.partition(","))
        if pid.isdigit() and mib.isdigit():
            each[pid] = int(mib)
    return {"per_process_mib": each, "sum_mib": sum(each.values()), "device_used_mib": int(used.strip().splitlines()[0])}


def importer(q, done, release) -> None:
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # its context first, so the mapping is what changes after it
    done.put(("context", os.getpid()))
    release.get()
    t = q.get()  # opens the IPC handle
    torch.cuda.synchronize()
    done.put(("mapped", float(t[:1].item()), int(torch.cuda.memory_reserved())))
    release.get()
    del t
    torch.cuda.synchronize()
    done.put(("released", 0.0, int(torch.cuda.memory_reserved())))
    release.get()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--mib", type=int, default=256)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, done, release = ctx.Queue(), ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=importer, args=(q, done, release))
    child.start()
    kind, child_pid = done.get(timeout=120)
    t = torch.full((a.mib << 18,), 7.0, device="cuda")  # a.mib MiB of float32
    torch.cuda.synchronize()
    time.sleep(1.0)
    rows = {"before": smi()}
    q.put(t)
    release.put(1)
    rows["child_mapped_reply"] = done.get(timeout=120)
    time.sleep(1.0)
    rows["mapped"] = smi()
    release.put(1)
    rows["child_released_reply"] = done.get(timeout=120)
    time.sleep(1.0)
    rows["released"] = smi()
    release.put(1)
    child.join(timeout=60)
    me, them = str(os.getpid()), str(child_pid)
    delta = {k: {"owner": rows[k]["per_process_mib"].get(me), "importer": rows[k]["per_process_mib"].get(them),
                 "sum": rows[k]["sum_mib"], "device_used": rows[k]["device_used_mib"]} for k in ("before", "mapped", "released")}
    smi_gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    doc = {"provenance": {"gpu_driver": smi_gpu, "torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
                          "commit": a.commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv),
                          "host": hostinfo.host()},
           "mib": a.mib, "rows": rows, "summary": delta}
    (a.out / "ipc_count_probe.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps({"mib": a.mib, "summary": delta}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
