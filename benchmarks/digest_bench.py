"""The input check's digest, the judge's own kernel (judge.digest) against the torch digest it
falls back to (judge.input_digest.torch_digest), on one machine in one run: milliseconds per digest of an
fp32 input of each size, median of --repeats after one unmeasured call (a build or cache warm-up).
On CUDA each figure includes the read-back that ends it (the check needs the number on the host),
and the kernel's digest of every size is checked equal to the CPU kernel's on the same bytes.

    PYTHONPATH=src python3 benchmarks/digest_bench.py --out DIR --commit C [--device cuda] [--mib 4,128,512]

Writes DIR/digest_bench.json (provenance in it) and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostinfo  # noqa: E402 - beside this file


def _median_ms(fn: Callable[[], Any], repeats: int, cuda: bool) -> float:
    import torch

    fn()  # the first: builds, caches, allocator
    times = []
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()  # each ends in a read-back to the host (the digest's int)
        times.append(1e3 * (time.perf_counter() - t0))
    return round(statistics.median(times), 3)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--commit", required=True)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--mib", default="4,128,512", help="input sizes in MiB (fp32)")
    p.add_argument("--repeats", type=int, default=9)
    a = p.parse_args()
    import torch

    from kernelwright.judge import digest, input_digest

    cuda = a.device == "cuda"
    how = digest.load(a.device)
    if how != "native":
        print(f"the digest kernel did not load: {how}", file=sys.stderr)
        return 1
    if cuda:
        assert digest.load("cpu") == "native"  # to check the GPU's digests against the CPU kernel's
    rows = []
    for mib in (int(x) for x in a.mib.split(",") if x.strip()):
        x = torch.randn(mib * (1 << 18), device=a.device)
        row: dict[str, Any] = {"mib": mib,
                               "native_ms": _median_ms(lambda t=x: input_digest.keyed(t, 12345, 0), a.repeats, cuda),
                               "torch_ms": _median_ms(lambda t=x: input_digest.torch_digest(t, 12345, 0), a.repeats, cuda)}
        row["ratio"] = round(row["torch_ms"] / row["native_ms"], 1) if row["native_ms"] else None
        if cuda:
            row["same_as_cpu_kernel"] = input_digest.keyed(x, 777, 3) == input_digest.keyed(x.cpu(), 777, 3)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del x
    gpu = None
    if cuda:
        gpu = torch.cuda.get_device_name(0)
    doc = {
        "provenance": {"commit": a.commit, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "device": a.device, "gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
                       "python": platform.python_version(), "cpus": os.cpu_count(), "host": hostinfo.host(),
                       "threads": torch.get_num_threads(),
                       "command": f"benchmarks/digest_bench.py --out {a.out} --commit {a.commit} --device {a.device} --mib {a.mib} "
                                  f"--repeats {a.repeats}"},
        "rows": rows,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "digest_bench.json").write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
