"""How the synchronize's tail grows with the length of the call (GPU experiment, step device_sync).

Step device_sync charges a call when the end event after the synchronize (e2) comes later after
the stream's own end (e1) than the empty call's does, by more than a margin (since da7ad3d it is
charged the part beyond the margin; before, its whole device-wide time). On the H200 at c894224
two honest controls (a 3.2 ms fp32 matmul, a 0.28 ms load_inline softmax) were charged that way. This times calls of known length, the judge's own spin kernel
(judge.lead) held for D microseconds, through the judge's timing function, in fresh processes,
and records the tail e2 - e1 for each D. `--kinds` adds other work of the same length, interleaved
with the spin kernel's in each process, to tell whether the tail follows the kind of work (a full
GPU, one waiting thread, memory traffic) or only its length:

    PYTHONPATH=src python3 benchmarks/tail_bench.py --out DIR [--processes 3] [--kinds spin,sleep,copy]

Writes DIR/tail_bench.json: per process, kind and D, the median, 90th percentile and maximum tail.
(tail_h200_8f5dc55.json holds the spin kernel's rows alone, by D; tail_h200_f8ca54b.json holds
"wait" and "poll" rows, from a commit that tried the host polling before the synchronize.)

Why one process's tails sit 15-30 us above another's (warm_h200.md at 57dc79d: the verdicts whose
median moved by more than 2 % had most calls charged by step device_sync while the profiler's
kernel time stayed put): `--variants` runs the same processes under each of several ways to wait
and place them, `--processes` fresh processes each, interleaved (variant by variant, process by
process), `--load N` keeps N busy CPU processes running throughout, as concurrent verdicts' builds and
children do, and `--gap-s G` measures each process again G seconds later (`rows_later`, and the
summary's "VARIANT later" rows: whether a slow process stays slow, which decides whether a
process's own figures taken before candidate code runs could serve as its allowance):

    PYTHONPATH=src python3 benchmarks/tail_bench.py --out DIR --variants plain,fork,spin,pin,spin+pin \
        --processes 6 --lengths 0,100,300,1000 [--load 12] [--gap-s 5]

A variant is `plain` (torch's default wait) or names its parts joined by `+`: `spin`, `yield` or
`blocking` (the primary context's scheduling flag, CU_CTX_SCHED_*, set through the driver before
torch makes the context; the flags in effect are recorded), `pin` (the process on one CPU of its
allowed set, a different one for each process), `fork` (forked from the bench's own process, which
has imported torch and never touched CUDA, as the judge's fork server forks its children; the
others are spawned). The summary gives, per variant and length, the
spread of the processes' tail medians and how many processes sat more than 15 us above the
quietest one (what step device_sync would charge, margin and cap aside).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LENGTHS_US = (0, 20, 100, 300, 1000, 3000, 10000)
CALLS = 100
SCHED = {"spin": 1, "yield": 2, "blocking": 4}  # CU_CTX_SCHED_SPIN, _YIELD, _BLOCKING_SYNC
SLOW_US = 15.0  # a process whose tail median is this much above the quietest process's is "slow"


def parse_variant(text: str) -> tuple[str | None, bool, bool]:
    """(scheduling flag name or None, pinned, forked) of a variant such as "spin+pin"; ValueError
    when unknown."""
    parts = [x for x in text.strip().split("+") if x]
    if parts == ["plain"]:
        return None, False, False
    sched = [x for x in parts if x in SCHED]
    unknown = [x for x in parts if x not in SCHED and x not in ("pin", "fork")]
    if unknown or len(sched) > 1 or not parts or len(set(parts)) != len(parts):
        raise ValueError(f"variant {text!r}: plain, or parts of spin|yield|blocking, pin and fork joined by +")
    return (sched[0] if sched else None), "pin" in parts, "fork" in parts


def _driver_flags(sched: str | None) -> dict:
    """Set the primary context's scheduling flag before torch creates the context (driver API)."""
    if sched is None:
        return {}
    cuda = ctypes.CDLL("libcuda.so.1")
    dev = ctypes.c_int()
    rc = [cuda.cuInit(0), cuda.cuDeviceGet(ctypes.byref(dev), 0), cuda.cuDevicePrimaryCtxSetFlags(dev, SCHED[sched])]
    return {"set_flags_rc": rc}


def _ctx_flags() -> int | None:
    """The current context's flags (after torch made it), through the driver."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        flags = ctypes.c_uint()
        return int(flags.value) if cuda.cuCtxGetFlags(ctypes.byref(flags)) == 0 else None
    except OSError:
        return None


def slow_processes(medians: list[float], slow_us: float = SLOW_US) -> int:
    """How many processes' tail medians sit more than slow_us above the quietest one's."""
    return sum(m > min(medians) + slow_us for m in medians) if medians else 0


def summarize(runs: list[dict], lengths: list[int], kind: str = "spin") -> dict:
    """Per variant and length: the processes' tail medians, their spread and the slow ones."""
    out: dict = {}
    for run in runs:
        if "error" in run or kind not in run.get("rows", {}):
            continue
        for label, rows in ((run["variant"], run["rows"]), (f"{run['variant']} later", run.get("rows_later") or {})):
            for us in lengths:
                r = (rows.get(kind) or {}).get(str(us))
                if r:
                    out.setdefault(label, {}).setdefault(str(us), []).append(r["tail_median_us"])
    return {v: {us: {"tail_medians_us": m, "spread_us": round(max(m) - min(m), 2), "slow": slow_processes(m), "processes": len(m)}
                for us, m in by.items()} for v, by in out.items()}


def _calls(kinds: list[str], spinner, torch) -> dict:
    """kind -> (D us -> a call that keeps the GPU busy about D us). "spin": the judge's spin kernel
    on every thread slot (judge.lead); "sleep": torch.cuda._sleep, one thread waiting on the clock;
    "copy": device-to-device copies of a 256 MiB chunk (memory-bound work), as many as take D us."""
    def timed(fn) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn()
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e3  # us

    out = {}
    for kind in kinds:
        if kind == "spin":
            out[kind] = lambda us: (lambda: spinner.spin(us))
        elif kind == "sleep":
            per_us = 10_000_000 / timed(lambda: torch.cuda._sleep(10_000_000))
            out[kind] = lambda us, k=per_us: (lambda c=max(1, int(us * k)): torch.cuda._sleep(c))
        elif kind == "copy":
            n = 2**28 // 4
            src, dst = torch.ones(n, device="cuda"), torch.empty(n, device="cuda")
            chunk_us = timed(lambda: dst.copy_(src))

            def copies(us, src=src, dst=dst, chunk_us=chunk_us):
                whole, part = divmod(us / chunk_us, 1.0)
                m = int(part * n)

                def call():
                    for _ in range(int(whole)):
                        dst.copy_(src)
                    if m:
                        dst[:m].copy_(src[:m])
                return call
            out[kind] = copies
        else:
            raise SystemExit(f"unknown kind {kind!r}: spin, sleep or copy")
    return out


def child(kinds: list[str], lengths: list[int] = list(LENGTHS_US), calls: int = CALLS, variant: str = "plain", index: int = 0,
          gap_s: float = 0.0) -> dict:
    sched, pin, _ = parse_variant(variant)
    placed: dict = {"variant": variant}
    if pin:
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[(2 * index + 1) % len(cpus)]
        os.sched_setaffinity(0, {cpu})
        placed["cpu"] = cpu
    placed.update(_driver_flags(sched))
    import torch

    from kernelwright.judge import lead, timing

    spinner = lead.load()
    if spinner is None:
        return {"error": lead.why()}
    placed["ctx_flags"] = _ctx_flags()
    sw = timing.switches_from({"flush": True, "events": True, "sync": True, "lead_us": 200.0}, cuda=True)
    makers = _calls(kinds, spinner, torch)
    def one_pass() -> dict[str, dict]:
        rows: dict[str, dict] = {k: {} for k in kinds}
        for us in lengths:
            for kind, make in makers.items():  # interleaved, so a drift of the process hits every kind alike
                synced: list[float] = []
                fn = (lambda: None) if us == 0 else make(us)
                stream = timing.time_calls(fn, lambda _i: [], calls, cuda=True, switches=sw, synced=synced)
                tails = sorted((d - t) * 1e3 for t, d in zip(stream, synced))
                rows[kind][str(us)] = {"stream_median_ms": round(statistics.median(stream), 4), "tail_median_us": round(statistics.median(tails), 2),
                                       "tail_p90_us": round(tails[int(0.9 * len(tails))], 2), "tail_max_us": round(tails[-1], 2)}
        return rows

    one_pass()  # thrown away: it warms every path
    rows = one_pass()
    out = {**placed, "rows": rows}
    if gap_s > 0:  # the same process again later: is a slow process slow for its whole life?
        torch.cuda.synchronize()
        time.sleep(gap_s)
        out["rows_later"] = one_pass()
    torch.cuda.synchronize()
    return out


def _forked(kinds: list[str], lengths: list[int], calls: int, variant: str, index: int, gap_s: float = 0.0) -> dict:
    """child() in a process forked from this one (torch imported, CUDA never touched here), its
    result back through a pipe."""
    import torch  # noqa: F401 - imported before the fork, as the judge's fork server has it

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            text = json.dumps(child(kinds, lengths, calls, variant, index, gap_s))
        except BaseException as exc:  # noqa: BLE001 - whatever happened goes back as the row
            text = json.dumps({"error": repr(exc)})
        with os.fdopen(w, "w") as f:
            f.write(text)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    return json.loads(text) if text else {"error": "the forked process wrote nothing"}


def _load(n: int) -> list[subprocess.Popen]:
    """n busy CPU processes (pure Python loops), as a loaded machine has."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--processes", type=int, default=3, help="fresh processes per variant")
    ap.add_argument("--commit", default="unknown", help="the commit being measured (recorded in the file's provenance)")
    ap.add_argument("--kinds", default="spin", help="comma-separated: spin (the judge's spin kernel), sleep (torch.cuda._sleep), copy")
    ap.add_argument("--variants", default="plain", help="comma-separated: plain, or spin|yield|blocking and/or pin joined by + (module doc)")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS_US)), help="call lengths in us, comma-separated")
    ap.add_argument("--calls", type=int, default=CALLS, help="timed calls per length and kind")
    ap.add_argument("--load", type=int, default=0, help="busy CPU processes kept running throughout")
    ap.add_argument("--gap-s", type=float, default=0.0, help="measure each process again this many seconds later (rows_later)")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--variant", default="plain", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        for v in variants:
            parse_variant(v)
    except ValueError as exc:
        ap.error(str(exc))
    if not lengths or not variants or args.processes < 1 or args.calls < 4 or args.load < 0 or args.gap_s < 0:
        ap.error("need lengths, variants, at least one process, at least 4 calls, and a load and gap of 0 or more")
    if args.child:
        print(json.dumps(child(args.kinds.split(","), lengths, args.calls, args.variant, args.index, args.gap_s)))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    from judge_bench import provenance  # GPU, driver, torch, CUDA, commit, date, command

    runs: list[dict] = []
    burners = _load(args.load)
    t0 = time.monotonic()
    try:
        for k in range(args.processes):
            for v in variants:  # interleaved: a drift of the machine hits every variant alike
                if parse_variant(v)[2]:
                    run = _forked(args.kinds.split(","), lengths, args.calls, v, k, args.gap_s)
                else:
                    cmd = [sys.executable, __file__, "--out", str(args.out), "--kinds", args.kinds, "--lengths", args.lengths,
                           "--calls", str(args.calls), "--variant", v, "--index", str(k), "--gap-s", str(args.gap_s), "--child"]
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                    run = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 and p.stdout.strip() else {"error": p.stderr[-2000:]}
                run.setdefault("variant", v)
                run["process"], run["at_s"] = k, round(time.monotonic() - t0, 1)
                runs.append(run)
                if "error" in run:
                    print(f"process {k + 1} ({v}): {run['error'][-500:]}", flush=True)
                    continue
                for kind, rows in run["rows"].items():
                    print(f"process {k + 1} ({v}, cpu {run.get('cpu')}, ctx flags {run.get('ctx_flags')}), {kind}: " + "; ".join(
                        f"{us} us: tail {r['tail_median_us']} (p90 {r['tail_p90_us']})" for us, r in rows.items()), flush=True)
                summary = {kind: summarize(runs, lengths, kind) for kind in args.kinds.split(",")}
                (args.out / "tail_bench.json").write_text(json.dumps({
                    "provenance": provenance(args.commit), "lengths_us": lengths, "calls": args.calls, "load": args.load,
                    "variants": variants, "slow_us": SLOW_US, "summary": summary, "processes": runs}, indent=1))
    finally:
        for b in burners:
            b.kill()
    for kind, by in summary.items():
        for v, rows in by.items():
            print(f"{kind} {v}: " + "; ".join(f"{us} us: spread {r['spread_us']} us, slow {r['slow']} of {r['processes']}" for us, r in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
