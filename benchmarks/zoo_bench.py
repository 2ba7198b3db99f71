"""Run the exploit zoo (tests/zoo.py) on one device and write every verdict, or merge the CPU and
GPU runs into the table of docs/zoo.md.

    PYTHONPATH=src python3 benchmarks/zoo_bench.py run --device cpu --out DIR [--only NAME,...] [--commit SHA] [--resume]
    python3 benchmarks/zoo_bench.py table CPU.json [GPU.json] > table.md

`run` judges the entries of that device (the CPU fixtures call C++ on host memory, so they run on
the CPU only; the GPU ones need a GPU) and rewrites DIR/zoo_DEVICE.json after every entry. With
--resume, a run cut short goes on: the entries already in that file (same commit, device, GPU and
torch) that kept their promise are kept, and the rest run; without it the file is written anew.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def provenance(device: str, commit: str) -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if device == "cuda" and torch.cuda.is_available() else None
    if commit == "unknown":
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip() or commit
        except OSError:
            pass
    driver = None
    if gpu is not None:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True)
        driver = (smi.stdout.strip().splitlines() or [None])[0]
    return {"device": device, "gpu": gpu, "driver": driver, "cuda": torch.version.cuda if gpu else None,
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(), "commit": commit,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}


def _keep_samples(zoo) -> None:
    """Each row of a verdict also gets the timing phase's per-call times (the judge's debug line,
    judge.samples.samples_record), for benchmarks/charge_replay.py."""
    import logging

    from kernelwright.judge.phases_pricing import SAMPLES_PREFIX

    caught: list[str] = []

    class _Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith(SAMPLES_PREFIX):
                caught.append(msg[len(SAMPLES_PREFIX):])

    lg = logging.getLogger("kernelwright.judge.phases_pricing")
    lg.setLevel(logging.DEBUG)  # the root logger has no handler here: the line goes to _Catch alone
    lg.addHandler(_Catch())
    judge, plain = zoo._judge, zoo._row

    def judged(*args, **kwargs):
        caught.clear()  # a judgement that raised after timing must not lend its line to the next row
        return judge(*args, **kwargs)

    def row(verdict):
        r = plain(verdict)
        priced = [rec for rec in map(json.loads, caught) if not rec.get("superseded")]  # a window timed again was not priced
        r["samples"] = priced[-1] if priced else None
        caught.clear()
        return r

    zoo._judge, zoo._row = judged, row


def cmd_run(args: argparse.Namespace) -> int:
    import zoo

    _keep_samples(zoo)

    only = set(args.only.split(",")) if args.only else None
    exploits = [e for e in zoo.EXPLOITS if e.device == args.device and (only is None or e.name in only)]
    controls = [c for c in zoo.CONTROLS if c.device == args.device and (only is None or c.name in only)]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"zoo_{args.device}.json"
    doc = {"provenance": provenance(args.device, args.commit), "exploits": [], "controls": []}
    done: set[str] = set()
    if args.resume and path.exists():
        old = json.loads(path.read_text())
        mine = {k: doc["provenance"].get(k) for k in ("commit", "device", "gpu", "torch")}
        theirs = {k: old["provenance"].get(k) for k in mine}
        if mine != theirs:
            print(f"{path} is from {theirs}, not this run's {mine}: give another --out", file=sys.stderr)
            return 2
        doc["exploits"], doc["controls"] = old["exploits"], old["controls"]
        doc["earlier_runs"] = [*old.get("earlier_runs", []), old["provenance"]]
        done = {r["name"] for r in doc["exploits"] + doc["controls"] if not r.get("failures")}  # a failed entry runs again
        for section in ("exploits", "controls"):
            doc[section] = [r for r in doc[section] if r["name"] in done]
    jobs = [("exploits", e.name, lambda e=e: _exploit_row(zoo, e)) for e in exploits if e.name not in done] + \
           [("controls", c.name, lambda c=c: _control_row(zoo, c)) for c in controls if c.name not in done]
    total, bad = len(jobs), 0
    if done:
        print(f"resuming: {len(done)} entries kept from {path}, {total} to run", flush=True)
    for k, (section, name, job) in enumerate(jobs, 1):
        t0 = time.perf_counter()
        try:
            row = job()
        except Exception as exc:  # noqa: BLE001 - one broken entry must not lose the others
            row = {"name": name, "device": args.device, "failures": [f"{type(exc).__name__}: {exc}"]}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        bad += bool(row["failures"])
        doc[section].append(row)
        path.write_text(json.dumps(doc, indent=1))
        on, off = row.get("on", {}).get("status"), row.get("off", {}).get("status")
        print(f"[{k}/{total}] {name}: on {on}" + (f", off {off}" if off else "") + f" ({row['seconds']} s)"
              + (f"  FAILED: {'; '.join(row['failures'])}" if row["failures"] else ""), flush=True)
    print(f"{total - bad} of {total} as promised; {path}")
    return 1 if bad else 0


def _exploit_row(zoo, e) -> dict:
    row = zoo.judge_exploit(e)
    row["failures"] = zoo.exploit_failures(e, row)
    return row


def _control_row(zoo, c) -> dict:
    row = zoo.judge_control(c)
    row["failures"] = zoo.control_failures(row)
    return row


def _cell(row: dict | None, key: str) -> str:
    if row is None:
        return "not run"
    part = row.get(key)
    if part is None:
        return "—"
    s = part["status"]
    if key == "on" and part.get("fired"):
        s += f" ({', '.join(part['fired'])})"
    if part.get("speedup_vs_eager") is not None and part["status"] == "correct":
        s += f", {part['speedup_vs_eager']:.2f}x eager"
    return s


def _card(name: str | None) -> str:
    """A GPU's short model name from the driver's (\"NVIDIA H100 80GB HBM3\" -> H100)."""
    m = re.search(r"\b([A-Z]+\d{2,4}[A-Za-z]*)\b", name or "")
    return m.group(1) if m else (name or "GPU")


def cmd_table(args: argparse.Namespace) -> int:
    import zoo

    runs = [json.loads(Path(p).read_text()) for p in args.json]
    by = {(r["device"], r["name"]): {**r, "commit": doc["provenance"]["commit"], "card": _card(doc["provenance"].get("gpu"))}
          for doc in runs for r in doc["exploits"] + doc["controls"]}
    commits: dict[str, set[str]] = {}
    for doc in runs:
        commits.setdefault(doc["provenance"]["device"], set()).add(doc["provenance"]["commit"])

    def where(row: dict | None, device: str) -> str:  # the card of the row's own run; "GPU" for a row not run
        return "CPU" if device != "cuda" else (row["card"] if row is not None else "GPU")

    def at(row: dict | None, device: str) -> str:  # names the run where one device's rows come from several
        return f" [{row['commit']}]" if row is not None and len(commits.get(device, ())) > 1 else ""

    print("| exploit | trick | guard | every step on | with the guard off | steps switched off |")
    print("|---|---|---|---|---|---|")
    for e in zoo.EXPLOITS:
        row = by.get((e.device, e.name))
        off = ", ".join(sorted(e.off)) if e.off else (", ".join(f"{k}={v}" for k, v in e.off_policy.items()) or "nothing to switch off")
        if e.context or e.context_off:
            both = [f"{k}={v}" for k, v in e.context.items()] + sorted(e.context_off)
            off += f" (in both runs: {', '.join(both)})"
        on_cell = _cell(row, "on") + at(row, e.device)
        if e.guard == "degeneracy_gate" and row is not None:
            on_cell += "; the gate: " + ("degenerate" if row.get("gate_degenerate") else "not flagged")
        print(f"| `{e.name}` ({where(row, e.device)}) | {e.trick} | {e.guard} | {on_cell} | {_cell(row, 'off')} | {off} |")
    print()
    print("| control | what | verdict |")
    print("|---|---|---|")
    for c in zoo.CONTROLS:
        row = by.get((c.device, c.name))
        print(f"| `{c.name}` ({where(row, c.device)}) | {c.what} | {_cell(row, 'on')}{at(row, c.device)} |")
    for doc in runs:
        p = doc["provenance"]
        print(f"\n{p['device']}: commit {p['commit']}, {p['date']}, {p.get('gpu') or p['cpu']}, torch {p['torch']}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--device", choices=("cpu", "cuda"), required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--only", default="")
    r.add_argument("--commit", default="unknown")
    r.add_argument("--resume", action="store_true", help="keep OUT's zoo_DEVICE.json entries (same commit, device, GPU and torch) "
                                                          "that kept their promise, and run the rest")
    t = sub.add_parser("table")
    t.add_argument("json", nargs="+")
    args = ap.parse_args()
    return cmd_run(args) if args.cmd == "run" else cmd_table(args)


if __name__ == "__main__":
    sys.exit(main())
