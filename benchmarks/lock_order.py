"""Whether the device lock's order limits concurrent verdicts, without a GPU: each simulated
verdict holds the lock shared for S seconds (references and correctness) and then exclusive for X
seconds (timing), as judge.evaluate does; the holders sleep, so the figures are the lock's order
alone, whatever the host's CPU. With CLIENTS clients in a closed loop the best any order can do is
X + S / CLIENTS seconds a verdict (the timings run alone, the correctness runs all side by side).

- `threads`: CLIENTS clients as threads of one process, as a service's verdicts are;
- `processes`: CLIENTS clients as processes, which meet only at the lock files;
- `alone`: one client, the sequential X + S.

Every interval is recorded; the script fails if an exclusive hold overlapped any other hold.
S and X default to a served softmax verdict's on the H200 at e77d840 (warm_h200.md: correctness
0.84 s, timing 0.72 s), scaled by --scale.

    PYTHONPATH=src python3 benchmarks/lock_order.py --out DIR --commit C
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CLIENT = r"""
import json, sys, time
from kernelwright.judge.gpulock import device_lock
s, x, n, out = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spans = []
for _ in range(n):
    with device_lock("cpu", 0, "shared"):
        t = time.monotonic(); time.sleep(s); spans.append(("shared", t, time.monotonic()))
    with device_lock("cpu", 0, "exclusive"):
        t = time.monotonic(); time.sleep(x); spans.append(("exclusive", t, time.monotonic()))
open(out, "w").write(json.dumps(spans))
"""


def one_client(s: float, x: float, n: int, spans: list, lock: threading.Lock) -> None:
    from kernelwright.judge.gpulock import device_lock

    for _ in range(n):
        with device_lock("cpu", 0, "shared"):
            t = time.monotonic()
            time.sleep(s)
            with lock:
                spans.append(("shared", t, time.monotonic()))
        with device_lock("cpu", 0, "exclusive"):
            t = time.monotonic()
            time.sleep(x)
            with lock:
                spans.append(("exclusive", t, time.monotonic()))


def run(how: str, clients: int, s: float, x: float, n: int, work: Path) -> dict:
    spans: list = []
    t0 = time.monotonic()
    if how == "processes":
        env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
        outs = [work / f"{how}-{i}.json" for i in range(clients)]
        procs = [subprocess.Popen([sys.executable, "-c", CLIENT, str(s), str(x), str(n), str(o)], env=env) for o in outs]
        for p in procs:
            if p.wait(timeout=3600) != 0:
                raise SystemExit(f"a client process failed (rc {p.returncode})")
        for o in outs:
            spans += [tuple(v) for v in json.loads(o.read_text())]
        # the processes' own start-up (importing kernelwright) is not the lock's: time from the first hold
        t0 = min(v[1] for v in spans)
    else:
        lock = threading.Lock()
        threads = [threading.Thread(target=one_client, args=(s, x, n, spans, lock)) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    wall = max(v[2] for v in spans) - t0
    excl = [v for v in spans if v[0] == "exclusive"]
    overlaps = sum(1 for e in excl for v in spans if v is not e and v[1] < e[2] and e[1] < v[2])
    verdicts = clients * n
    shared = sorted(v for v in spans if v[0] == "shared")
    # how many correctness holds ran side by side, on average over the time any ran
    busy = sum(v[2] - v[1] for v in shared)
    union, end = 0.0, -1.0
    for _, a, b in shared:
        union += max(0.0, b - max(a, end))
        end = max(end, b)
    return {"how": how, "clients": clients, "floor_s_per_verdict": round(x + s / clients, 3), "verdicts": verdicts, "wall_s": round(wall, 3),
            "per_minute": round(60 * verdicts / wall, 1), "seconds_per_verdict": round(wall / verdicts, 3),
            "exclusive_overlaps": overlaps, "mean_side_by_side": round(busy / union, 2) if union else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--commit", default="unknown")
    p.add_argument("--shared-s", type=float, default=0.84)
    p.add_argument("--exclusive-s", type=float, default=0.72)
    p.add_argument("--scale", type=float, default=0.25, help="both holds times this (the order, not the scale, is measured)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--verdicts-per-client", type=int, default=10)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    s, x = a.shared_s * a.scale, a.exclusive_s * a.scale
    rows = []
    with tempfile.TemporaryDirectory(prefix="kw-lock-order-") as tmp:
        os.environ["KERNELWRIGHT_LOCK_DIR"] = str(Path(tmp) / "locks")  # a private lock folder: nobody else's holds
        os.environ.pop("KERNELWRIGHT_GPU_LOCK", None)
        for how, clients in (("alone", 1), ("processes", a.clients), ("threads", a.clients)):
            row = run("threads" if how == "alone" else how, clients, s, x, a.verdicts_per_client, Path(tmp))
            row["how"] = how
            rows.append(row)
            print(json.dumps(row), flush=True)
    doc = {"provenance": {"commit": a.commit, "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
                          "host": platform.node(), "python": platform.python_version(), "cpus": os.cpu_count(),
                          "command": " ".join(["benchmarks/lock_order.py"] + sys.argv[1:]), "gpu": "none: the holders sleep"},
           "shared_s": s, "exclusive_s": x, "rows": rows}
    (a.out / "lock_order.json").write_text(json.dumps(doc, indent=1))
    bad = [r for r in rows if r["exclusive_overlaps"]]
    if bad:
        print(f"an exclusive hold overlapped another: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
