"""What the judge's waits on its shared files add to a verdict, on the machine it runs on (CPU
only: no GPU work). Two figures:

- a reservation of one CUDA context on the memory ledger, entered and released without waiting
  (judge.memory.admitted with timeout_s=0): what an idle warm reference child's hand-back and
  taking add to a verdict on a GPU (judge.refpool);
- the hand-over latency of the device lock past its notice (0.5 s of waiting): a holder releases,
  how long until the waiter holds it, blocking (no `check`) and polled (with a `check`, as a
  verdict waits since the candidate-held-lock guard: judge.flow_children.Children._lock_check).

    PYTHONPATH=src python3 benchmarks/lock_overhead.py --out DIR --commit C
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path


def reservation_ms(n: int) -> list[float]:
    from kernelwright.judge import memory

    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with memory.admitted("cuda-0", memory.CTX, 141 * 2**30, timeout_s=0):
            pass
        out.append(1e3 * (time.perf_counter() - t0))
    return out


def handover_ms(n: int, check) -> list[float]:
    from kernelwright.judge import gpulock

    out = []
    for _ in range(n):
        got: list[float] = []
        with gpulock.device_lock("cpu", 0, "exclusive"):
            def waiter() -> None:
                with gpulock.device_lock("cpu", 0, "exclusive", check=check):
                    got.append(time.monotonic())
            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(gpulock.NOTICE_S + 0.2)  # the waiter is past its notice
            released = time.monotonic()
        t.join()
        out.append(1e3 * (got[0] - released))
    return out


def summary(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "median_ms": round(statistics.median(xs), 3), "max_ms": round(max(xs), 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--n", type=int, default=15, help="hand-overs timed each way (each waits about 0.7 s)")
    a = p.parse_args()
    os.environ["KERNELWRIGHT_LOCK_DIR"] = tempfile.mkdtemp(prefix="kw-lock-overhead-")
    doc = {
        "provenance": {"commit": a.commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine(),
                       "command": f"benchmarks/lock_overhead.py --out {a.out} --commit {a.commit} --n {a.n}"},
        "ledger_reservation": summary(reservation_ms(200)),
        "device_lock_handover_blocking": summary(handover_ms(a.n, None)),
        "device_lock_handover_polled": summary(handover_ms(a.n, lambda files: None)),
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "lock_overhead.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
