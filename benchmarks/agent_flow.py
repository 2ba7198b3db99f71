"""The agent's flow on a real device, against the scripted local server (llm.scripted): no LLM is
involved, every model turn is scripted (agent.demo_script), every candidate is judged for real.

    PYTHONPATH=src python3 benchmarks/agent_flow.py --out DIR [--device cuda] [--commit SHA] [--sections flow,stall,replay] [--problem softmax]

- flow: `kernelwright optimize` (the CLI, in a subprocess) on examples/DEVICE/PROBLEM (softmax, or
  elementwise_chain on the CPU): a reply with
  no code, a compile error, a wrong kernel, (on CUDA) a slow correct one, then tool calls that
  write, verify, profile and submit the example's kernel; the final re-judge runs compute-sanitizer. Records what each request carried back to the
  model, the verdicts, the final re-judge, the export; its recording becomes DIR/DEVICE_PROBLEM.json.
- stall: a model that repeats a wrong kernel: the run pauses; `kernelwright resume --hint` puts the
  hint into the next request and the run goes on to the target.
- replay: `optimize --model replay:DIR/DEVICE_PROBLEM.json`: every candidate judged again; the
  statuses and any divergence from the recording.

Writes DIR/agent_DEVICE.json (rows with provenance) and DIR/*_console.log.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernelwright.agent import demo_script  # noqa: E402
from kernelwright.llm.scripted import ScriptedServer  # noqa: E402

HINT = "subtract the row max before exp"
COMMIT: list[str] = []  # --commit, handed to the runs' provenance (a copied tree's .git may not be its own)


def _cli(args: list[str], log: Path, timeout_s: float) -> tuple[int, dict, float]:
    """Run `python -m kernelwright ARGS --json`; stderr to the log; the JSON result."""
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), **({"KERNELWRIGHT_COMMIT": COMMIT[0]} if COMMIT else {})}
    done = subprocess.run([sys.executable, "-m", "kernelwright", *args, "--json"], capture_output=True, text=True, timeout=timeout_s, env=env)
    with log.open("a") as f:
        f.write(f"$ kernelwright {' '.join(args)}\n{done.stderr}\nexit {done.returncode}\n\n")
    try:
        result = json.loads(done.stdout)
    except ValueError:
        result = {"stdout": done.stdout[-2000:], "stderr": done.stderr[-3000:]}
    return done.returncode, result, time.monotonic() - t0


def _carried(requests: list[dict]) -> list[dict]:
    """Per request: the start of the last user or tool message (what the previous turn fed back)."""
    rows = []
    for i, r in enumerate(requests):
        msgs = [m for m in r["messages"] if m["role"] in ("user", "tool")]
        tail = msgs[-1] if msgs else {"role": "-", "content": ""}
        rows.append({"request": i, "slot": r.get("_slot"), "role": tail["role"], "fed_back": (tail.get("content") or "")[:400]})
    return rows


def _steps(store: Path, run_id: str) -> list[dict]:
    from kernelwright.store import Store

    with Store.open(store) as db:
        steps = db.run_steps(run_id)
    rows = []
    for s in steps:
        p, v = s["payload"], (s["payload"].get("verdict") or {})
        if s["kind"] in ("candidate", "final", "engineer_candidate"):
            rows.append({"kind": s["kind"], "key": p.get("key"), "status": v.get("status"), "runtime_ms": v.get("runtime_ms"),
                         "eager_ms": v.get("eager_ms"), "compile_ms": v.get("compile_ms"), "speedup_vs_eager": v.get("speedup_vs_eager"),
                         "speedup_vs_compile": v.get("speedup_vs_compile"), "speedup_vs_best": v.get("speedup_vs_best"),
                         "baseline_source": v.get("baseline_source"), "sanitizer": (v.get("sanitizer") or {}).get("total_errors")
                         if isinstance(v.get("sanitizer"), dict) else None})
        elif s["kind"] in ("pause", "hint", "note", "export", "llm_error"):
            rows.append({"kind": s["kind"], **{k: str(val)[:300] for k, val in p.items()}})
    return rows


def _recording_name(a: argparse.Namespace) -> str:
    return f"{a.device}_{a.problem}{'_triton' if a.language == 'triton' else ''}.json"


def section_flow(a: argparse.Namespace, out: Path, common: list[str]) -> dict:
    problem = str(ROOT / "examples" / a.device / a.problem / "problem.py")
    script = demo_script.optimize_script(a.device, a.problem, a.language)
    with ScriptedServer(script) as server:
        rc, result, wall = _cli(["optimize", problem, "--model", "openai:scripted", "--base-url", server.url, *common,
                                 *(["--target-speedup", str(a.target)] if a.device == "cuda" else []),  # CPU times are never claims
                                 "--max-turns", str(len(script)), "--out", str(out / "flow_export"), "--sanitize-timeout-s", str(a.sanitize_timeout_s),
                                 "--language", a.language, "--note", "scripted local server (kernelwright.llm.scripted), script "
                                 f"demo_script.optimize_script('{a.device}', '{a.problem}', '{a.language}')"],
                                out / "flow_console.log", a.timeout_s)
        carried = _carried(server.requests)
    rec = out / "flow_export" / "recording.json"
    if rec.is_file():
        shutil.copy(rec, out / _recording_name(a))
    return {"rc": rc, "wall_s": round(wall, 1), "result": result, "requests": carried,
            "steps": _steps(out / "store.sqlite", result.get("run_id", "")) if result.get("run_id") else []}


def section_stall(a: argparse.Namespace, out: Path, common: list[str]) -> dict:
    problem = str(ROOT / "examples" / a.device / "softmax" / "problem.py")
    log = out / "stall_console.log"
    with ScriptedServer(demo_script.stall_script(a.device, HINT)) as server:
        rc1, paused, w1 = _cli(["optimize", problem, "--model", "openai:scripted", "--base-url", server.url, *common,
                                "--target-speedup", str(a.target), "--max-failures", "2", "--out", str(out / "stall_export"), "--no-sanitize"],
                               log, a.timeout_s)
        n = len(server.requests)
        rc2, resumed, w2 = _cli(["resume", paused.get("run_id", "-"), "--hint", HINT + " and keep the row on chip",
                                 "--store", str(out / "store.sqlite")], log, a.timeout_s)
        after = _carried(server.requests[n:])
    return {"pause": {"rc": rc1, "wall_s": round(w1, 1), "result": paused}, "resume": {"rc": rc2, "wall_s": round(w2, 1), "result": resumed},
            "requests_after_resume": after, "hint_in_next_request": bool(after) and HINT in after[0]["fed_back"],
            "steps": _steps(out / "store.sqlite", paused.get("run_id", "")) if paused.get("run_id") else []}


def section_replay(a: argparse.Namespace, out: Path, common: list[str]) -> dict:
    rec = out / _recording_name(a)
    if not rec.is_file():
        return {"skipped": f"no recording at {rec} (the flow section did not export)"}
    problem = str(ROOT / "examples" / a.device / a.problem / "problem.py")
    rc, result, wall = _cli(["optimize", problem, "--model", f"replay:{rec}", *common, "--out", str(out / "replay_export"), "--no-sanitize"],
                            out / "replay_console.log", a.timeout_s)
    return {"rc": rc, "wall_s": round(wall, 1), "result": result,
            "steps": _steps(out / "store.sqlite", result.get("run_id", "")) if result.get("run_id") else []}


def provenance(a: argparse.Namespace) -> dict:
    from kernelwright.judge import baseline

    machine = baseline.probe_machine(a.device)
    return {**machine, "python": platform.python_version(), "commit": a.commit, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(sys.argv), "model": "scripted local server (kernelwright.llm.scripted); no LLM"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--commit", default="unknown")
    p.add_argument("--sections", default="flow,stall,replay")
    p.add_argument("--problem", default="softmax", choices=("softmax", "elementwise_chain"), help="the flow's and the replay's example (stall keeps softmax)")
    p.add_argument("--language", default="cuda", choices=("cuda", "triton"),
                   help="the scripted candidates' language (flow and replay; triton: examples/triton, stall keeps CUDA)")
    p.add_argument("--target", type=float, default=None, help="target speedup for flow (CUDA only) and stall (default 1.2 on CUDA, 0.1 on CPU)")
    p.add_argument("--timeout-s", type=float, default=280.0, help="per CLI call")
    p.add_argument("--sanitize-timeout-s", type=float, default=90.0, help="per compute-sanitizer tool in the flow's final re-judge (stall and replay skip it)")
    a = p.parse_args()
    a.target = a.target if a.target is not None else (1.2 if a.device == "cuda" else 0.1)
    if a.commit != "unknown":
        COMMIT.append(a.commit)
    a.out.mkdir(parents=True, exist_ok=True)
    common = ["--device", a.device, "--store", str(a.out / "store.sqlite")]
    doc = {"provenance": provenance(a), "sections": {}}
    path = a.out / f"agent_{a.device}{'_triton' if a.language == 'triton' else ''}.json"
    for name in a.sections.split(","):
        t0 = time.monotonic()
        try:
            doc["sections"][name] = {"flow": section_flow, "stall": section_stall, "replay": section_replay}[name](a, a.out, common)
        except Exception as exc:  # noqa: BLE001 - keep what the other sections found
            doc["sections"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        doc["sections"][name]["section_s"] = round(time.monotonic() - t0, 1)
        path.write_text(json.dumps(doc, indent=1, default=str) + "\n")
        sys.stdout.write(f"{name}: {json.dumps(doc['sections'][name], default=str)[:1500]}\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
