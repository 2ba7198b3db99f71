"""The built-in suite on the GPU: computed metadata, the degeneracy gate, and eager / torch.compile
baselines timed by `kernelwright baseline`'s code (judge.baseline), in one go; then a Markdown table.

    PYTHONPATH=src python3 benchmarks/suite_bench.py run --out DIR --suite builtin:1 [--suite ...] [--commit SHA]
        [--jobs 8] [--gate-jobs 4] [--deadline-s 540] [--store PATH] [--budget-s 5]
    python3 benchmarks/suite_bench.py table DIR1/suite_rows.json [DIR2/suite_rows.json ...] > table.md
        (the table, then per level the gate, the timed count and the geometric mean of eager over
        torch.compile; exit 1 when the runs differ in commit, GPU, driver or torch)

`run` gates every problem (in parallel, beside the torch.compile builds, and finished before any
timing starts), then times them one at a time, and rewrites DIR/suite_rows.json after every
problem. Baselines go to the store (DIR/store.sqlite unless --store), so a second run with the same
store only does what the first did not reach. Every row carries the run's provenance.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hostinfo  # beside this file: on sys.path when run as a script



def cmd_run(args: argparse.Namespace) -> int:
    from kernelwright.judge import baseline, roofline
    from kernelwright.judge.evaluate import resolve_device
    from kernelwright.judge.policy import Policy, TimingConfig
    from kernelwright.judge.degeneracy import check_problem
    from kernelwright.judge.problem_meta import metadata_for
    from kernelwright.problems.suite import load_suite
    from kernelwright.store import Store

    t_start = time.monotonic()
    deadline = t_start + args.deadline_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(args.device)
    machine = baseline.probe_machine(device)
    prov = {**machine, "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "python": platform.python_version(),
            "commit": hostinfo.commit(args.commit), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "command": " ".join(sys.argv)}
    print(f"machine: {json.dumps(machine)}", flush=True)
    entries = [e for spec in args.suite for e in load_suite(spec)]
    if args.only:
        keep = set(args.only.split(","))
        entries = [e for e in entries if e.problem.name in keep]
    print(f"{len(entries)} problem(s)", flush=True)
    meta = metadata_for([e.problem for e in entries])
    print(f"metadata computed ({time.monotonic() - t_start:.0f} s)", flush=True)
    policy = Policy(compile_mode=args.mode, timing=TimingConfig(budget_s=args.budget_s, max_runs=args.max_runs))
    rows = {e.problem.hash: {"name": e.problem.name, "level": e.level, "category": e.category, "hash": e.problem.hash,
                             "flops": meta[e.problem.hash]["flops"], "bytes": meta[e.problem.hash]["bytes"],
                             "floor_ms": meta[e.problem.hash]["floor_ms"], "ceiling_fp32_ms": meta[e.problem.hash]["ceiling_ms"]["fp32"],
                             "provenance": prov} for e in entries}
    lock = threading.Lock()

    def save() -> None:
        with lock:
            doc = {"provenance": prov, "policy": policy.to_dict(), "rows": list(rows.values())}
            tmp = out / "suite_rows.json.tmp"
            tmp.write_text(json.dumps(doc, indent=1, default=str))
            os.replace(tmp, out / "suite_rows.json")

    def gate(e) -> None:
        if time.monotonic() > deadline:
            rows[e.problem.hash]["gate"] = {"error": "not reached before the deadline"}
            return
        t0 = time.monotonic()
        try:
            r = check_problem(e.problem, device=device, policy=Policy(n_seeds=3))
            g = {"degenerate": r.degenerate, "findings": r.findings, "cases": r.cases}
        except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
            g = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        g["seconds"] = round(time.monotonic() - t0, 2)
        rows[e.problem.hash]["gate"] = g
        print(f"gate {e.problem.name}: {'error ' + g['error'] if 'error' in g else ('DEGENERATE' if g['degenerate'] else 'ok')}", flush=True)
        save()

    store_path = Path(args.store) if args.store else out / "store.sqlite"
    gated = [e for e in entries if not args.skip_gate]
    if args.gate_skip_cached:  # problems a previous run with this store already timed (and gated)
        with Store.open(store_path) as db:
            done = {b["problem_hash"] for b in db.baselines(baseline.machine_key(machine))}
        gated = [e for e in gated if e.problem.hash not in done]
    gate_pool = ThreadPoolExecutor(max_workers=args.gate_jobs)
    gates = [gate_pool.submit(gate, e) for e in gated]

    def on_event(kind, problem, value) -> None:
        if kind == "phase":
            print(f"[{time.monotonic() - t_start:.0f} s] {value}", flush=True)
            if value.startswith("timing"):
                for f in gates:  # nothing else may use the GPU while baselines are timed
                    f.result()
                print(f"[{time.monotonic() - t_start:.0f} s] gate done", flush=True)
        elif kind == "compiled":
            rows[problem.hash]["compile_s"] = value[0]
            if value[1]:
                rows[problem.hash]["compile_error"] = value[1]
            print(f"compiled {problem.name}: {value[0] if value[0] is None else round(value[0], 1)} s {value[1][:200]}", flush=True)
        elif kind in ("timed", "cached"):
            r = value
            row = rows[problem.hash]
            row.update({"eager_ms": r.eager_ms, "compile_ms": r.compile_ms, "compile_s": r.compile_s, "compile_s_cached": r.compile_s_cached,
                        "baseline_detail": r.detail, "baseline_error": r.error, "baseline_source": kind})
            for c in ("eager", "compile"):
                ms = row.get(f"{c}_ms")
                row[f"efficiency_{c}"] = roofline.efficiency(row["bytes"], row["flops"], "fp32", ms) if ms else None
            print(f"[{time.monotonic() - t_start:.0f} s] {kind} {problem.name}: eager {r.eager_ms} compile {r.compile_ms} {r.error[:200]}", flush=True)
            save()

    with Store.open(store_path) as db:
        for e in entries:
            db.put_problem(e.problem.hash, e.problem.name, str(e.problem.path), e.problem.source)
        baseline.run([e.problem for e in entries], device=device, policy=policy, jobs=args.jobs, store=db, on_event=on_event, deadline=deadline)
    for f in gates:
        f.result()
    gate_pool.shutdown()
    save()
    print(f"done in {time.monotonic() - t_start:.0f} s", flush=True)
    print(table([json.loads((out / "suite_rows.json").read_text())]))
    return 0


def _f(x, fmt="{:.3g}") -> str:
    return "-" if x is None else fmt.format(x)


def merge(docs: list[dict]) -> list[dict]:
    """One row per problem hash over several runs: the run that timed it gives the times (a row a
    later run took from the store keeps the earlier run's), and a gate result is kept wherever it ran."""
    rows: dict[str, dict] = {}
    for d in docs:
        for r in d["rows"]:
            old = rows.get(r["hash"])
            if old is None:
                rows[r["hash"]] = dict(r)
                continue
            if r.get("eager_ms") is not None and (r.get("baseline_source") == "timed" or old.get("eager_ms") is None):
                old.update({k: v for k, v in r.items() if k != "gate"})
            if r.get("gate") and "error" not in r["gate"]:
                old["gate"] = r["gate"]
    return sorted(rows.values(), key=lambda r: (r["level"] or 0, r["category"] or "", r["name"]))


def table(docs: list[dict]) -> str:
    rows = merge(docs)
    lines = ["| level | problem | category | eager ms | compile ms | eager/compile | floor ms | eff. eager | eff. compile | data MB | GFLOP | compile s | gate |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        g = r.get("gate") or {}
        gate = "error" if "error" in g else ("-" if not g else ("degenerate: " + ", ".join(f["check"] for f in g["findings"] if f["native"]) if g["degenerate"] else "ok"))
        ratio = r["eager_ms"] / r["compile_ms"] if r.get("eager_ms") and r.get("compile_ms") else None
        lines.append(f"| {r['level']} | {r['name']} | {r['category']} | {_f(r.get('eager_ms'), '{:.4g}')} | {_f(r.get('compile_ms'), '{:.4g}')} | "
                     f"{_f(ratio, '{:.2f}')} | {_f(r['floor_ms'], '{:.3g}')} | {_f(r.get('efficiency_eager'), '{:.2f}')} | "
                     f"{_f(r.get('efficiency_compile'), '{:.2f}')} | {r['bytes'] / 1e6:.0f} | {r['flops'] / 1e9:.3g} | {_f(r.get('compile_s'), '{:.1f}')} | {gate} |")
    return "\n".join(lines)


RECORD_KEYS = ("commit", "gpu", "driver", "torch")  # what one record (issue 32) holds fixed over its runs


def summary(docs: list[dict]) -> dict:
    """Per level over the merged rows: problems, timed, gated (ok / degenerate / error), the
    geometric mean of eager over torch.compile over the timed ones (above 1: compile faster) and
    the problems where compile was the slower; and whether the runs share RECORD_KEYS."""
    rows = merge(docs)
    levels: dict[str, dict] = {}
    for lv in sorted({r["level"] for r in rows}, key=lambda x: (x is None, x or 0)):
        mine = [r for r in rows if r["level"] == lv]
        timed = [r for r in mine if r.get("eager_ms") and r.get("compile_ms")]
        ratios = [r["eager_ms"] / r["compile_ms"] for r in timed]
        gates = [r.get("gate") or {} for r in mine]
        levels[str(lv)] = {
            "problems": len(mine), "timed": len(timed), "untimed": sorted(r["name"] for r in mine if r not in timed),
            "gate_ok": sum(1 for g in gates if g and "error" not in g and not g.get("degenerate")),
            "gate_degenerate": sorted(r["name"] for r, g in zip(mine, gates) if g and "error" not in g and g.get("degenerate")),
            "gate_missing_or_error": sorted(r["name"] for r, g in zip(mine, gates) if not g or "error" in g),
            "geomean_eager_over_compile": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
            "compile_slower": sorted((r["name"], round(x, 3)) for r, x in zip(timed, ratios) if x < 1)}
    seen = {k: sorted({str(d["provenance"].get(k)) for d in docs}) for k in RECORD_KEYS}
    return {"levels": levels, "runs": len(docs), "one_record": all(len(v) == 1 for v in seen.values()), "seen": seen}


def summary_text(s: dict) -> str:
    lines = ["", "| level | problems | timed | gate ok | degenerate | gate missing or error | eager / compile, geometric mean | compile slower |",
             "|---:|---:|---:|---:|---|---|---:|---|"]
    for lv, v in s["levels"].items():
        gm = _f(v["geomean_eager_over_compile"], "{:.2f}")
        slower = ", ".join(f"{n} ({x})" for n, x in v["compile_slower"]) or "-"
        lines.append(f"| {lv} | {v['problems']} | {v['timed']} | {v['gate_ok']} | {', '.join(v['gate_degenerate']) or '-'} | "
                     f"{', '.join(v['gate_missing_or_error']) or '-'} | {gm} | {slower} |")
    if not s["one_record"]:
        lines += ["", "NOT ONE RECORD: the runs differ in " + "; ".join(f"{k}: {', '.join(v)}" for k, v in s["seen"].items() if len(v) > 1)]
    return "\n".join(lines)


def cmd_table(args: argparse.Namespace) -> int:
    docs = [json.loads(Path(p).read_text()) for p in args.files]
    s = summary(docs)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"runs": [{"provenance": d["provenance"], "policy": d["policy"]} for d in docs],
                                                   "rows": merge(docs), "summary": s}, indent=1, default=str))
    print(table(docs))
    print(summary_text(s))
    return 0 if s["one_record"] else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--suite", action="append", required=True)
    r.add_argument("--only", default="", help="comma-separated problem names")
    r.add_argument("--device", default="auto")
    r.add_argument("--commit", default="unknown")
    r.add_argument("--mode", default="default")
    r.add_argument("--jobs", type=int, default=8)
    r.add_argument("--gate-jobs", type=int, default=4)
    r.add_argument("--deadline-s", type=float, default=540.0)
    r.add_argument("--budget-s", type=float, default=5.0)
    r.add_argument("--max-runs", type=int, default=200)
    r.add_argument("--store", default="")
    r.add_argument("--skip-gate", action="store_true")
    r.add_argument("--gate-skip-cached", action="store_true", help="no gate for problems whose baselines the store already holds")
    r.set_defaults(func=cmd_run)
    t = sub.add_parser("table")
    t.add_argument("files", nargs="+")
    t.add_argument("--json-out", default="", help="also write the merged rows (with each run's provenance) here")
    t.set_defaults(func=cmd_table)
    args = ap.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
