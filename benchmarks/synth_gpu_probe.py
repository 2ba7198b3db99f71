"""Whether synthesis workers compile on this GPU machine, with the sandbox and without.

    PYTHONPATH=src python3 benchmarks/synth_gpu_probe.py --out "$OUT" [--device cuda]

At 8b5ee19 on an H100 every candidate of `kernelwright synth --device cuda` was rejected at stage
`error` with "AssertionError: Artifact of type=inductor already registered in mega-cache artifact
factory" (benchmarks/results/synth_h200.md, section 6): torch's inductor cache module ran twice in the
worker, the first time failing. The workers have run inside the sandbox since 2f568e5 and as the
judge's hosted children since 392df30, and no GPU run came between: this runs the same small synthesis
under `--sandbox off` and `--sandbox auto` (one worker) and prints each candidate's stage and reason,
then the end of each run's console. Since the commit after 8b5ee19 a failed compile's first error is
the one reported (judge.reference_checks.compiled: on a GPU the reset after it imported the cache
module again, and that second failure replaced the first in the result). Then, for the cause: a hosted child under the synthesis workers' sandbox (and one with --sandbox off)
reports, before anything else is imported, whether the fork server had imported torch._dynamo and which
artifact types torch's cache factory already holds, then imports torch._inductor.codecache and runs
one inductor compile on the device, each with its full traceback. Its command table is a module this
script writes into the checkout's src/kernelwright/ for the run and removes after (a hosted child
serves only kernelwright modules). Files in --out: probe_MODE/ (the runs) and synth_gpu_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(mode: str, out: Path, device: str) -> dict:
    folder = out / f"probe_{mode}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "kernelwright", "synth", "--n", "1", "--seed", "1", "--device", device, "--workers", "1",
           "--max-candidates", "2", "--timeout-s", "120", "--sandbox", mode, "--out", str(folder)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    rows = []
    path = folder / "candidates.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        r = json.loads(line)
        rows.append({"status": r.get("status"), "stage": r.get("stage"), "reason": r.get("reason")})
    return {"mode": mode, "rc": done.returncode, "seconds": round(time.perf_counter() - t0, 1), "candidates": rows,
            "console_tail": (done.stdout + done.stderr)[-6000:]}


PROBE_MODULE = "_synth_gpu_probe_cmds"
PROBE_SOURCE = r'''
import os, sys, traceback


def trace(args):
    out = {"uid": os.getuid(), "dynamo_preloaded": "torch._dynamo" in sys.modules,
           "codecache_preloaded": "torch._inductor.codecache" in sys.modules, "env": sorted(os.environ)}
    try:
        from torch.compiler._cache import CacheArtifactFactory
        out["artifact_types_before"] = sorted(CacheArtifactFactory._artifact_types)
    except Exception:
        out["artifact_types_before"] = traceback.format_exc()[-3000:]
    steps = [("triton_dirs", "import os; from triton import knobs; out_ = (knobs.cache.home_dir, knobs.cache.dir, os.environ.get('HOME'))\n"
                             "if not str(out_[1]).startswith(str(out_[2])): raise RuntimeError(out_)"),
             ("cc", "import os, subprocess, tempfile\n"
                    "d = tempfile.mkdtemp(); c = os.path.join(d, 'x.c'); open(c, 'w').write('int f(int x) { return x + 1; }\\n')\n"
                    "r = subprocess.run([os.environ.get('CC', 'gcc'), c, '-O3', '-shared', '-fPIC', '-o', os.path.join(d, 'x.so')], "
                    "capture_output=True, text=True)\n"
                    "if r.returncode: raise RuntimeError(f'{os.environ.get(\"CC\")} rc {r.returncode}: {r.stdout[-1500:]} {r.stderr[-3000:]}')"),
             ("import_codecache", "import torch._inductor.codecache"),
             ("import_compile_fx", "import torch._inductor.compile_fx"),
             ("compile", "import torch; f = torch.compile(lambda x: (x * 2).relu() + 1, backend='inductor'); "
                         "d = args['device']; x = torch.randn(64, device=d); y = f(x); "
                         "assert torch.allclose(y, (x * 2).relu() + 1)")]
    for name, code in steps:
        try:
            exec(code, {"args": args})
            out[name] = "ok"
        except BaseException:
            out[name] = traceback.format_exc()[-6000:]
    return out


def handlers():
    return {"trace": trace}
'''


def trace(out: Path, device: str) -> list[dict]:
    """The hosted child's report (PROBE_SOURCE) under the workers' sandbox and under --sandbox off."""
    sys.path.insert(0, str(ROOT / "src"))
    from kernelwright.judge import sandbox
    from kernelwright.judge.build import cache_dir
    from kernelwright.judge.workers import Child, ChildConfig

    module = ROOT / "src" / "kernelwright" / f"{PROBE_MODULE}.py"
    module.write_text(PROBE_SOURCE)
    reports = []
    try:
        for mode in ("auto", "off"):
            spec = sandbox.for_candidate(mode, str(cache_dir()), device=device)
            env = {sandbox.SPEC_ENV: spec.to_env(), "KERNELWRIGHT_CACHE": str(cache_dir())}
            workdir = out / f"trace_{mode}"
            workdir.mkdir(parents=True, exist_ok=True)
            child = Child(ChildConfig(role="hosted", device=device, gpu_index=0, workdir=workdir, env=env,
                                      commands=f"kernelwright.{PROBE_MODULE}"))
            try:
                child.send("trace", {"device": device})
                reports.append({"mode": mode, **child.wait("trace", timeout_s=240)})
            except Exception as exc:  # noqa: BLE001 - the probe reports whatever happened
                reports.append({"mode": mode, "failed": f"{type(exc).__name__}: {exc}", "log": str(getattr(exc, "log_tail", ""))[-4000:]})
            finally:
                child.close()
                log = workdir / "hosted.log"  # the child's stderr: what a compiler it ran printed
                reports[-1]["log_tail"] = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    finally:
        module.unlink(missing_ok=True)
    return reports


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    traces: list[dict] = []

    def save() -> None:  # after each part: a run cut short by its time limit keeps what finished
        (args.out / "synth_gpu_probe.json").write_text(json.dumps({"commit": os.environ.get("KERNELWRIGHT_COMMIT"), "runs": runs,
                                                                    "traces": traces}, indent=1))

    for mode in ("auto", "off"):  # the sandboxed run first: it is the one that failed
        r = run(mode, args.out, args.device)
        runs.append(r)
        save()
        print(f"--sandbox {r['mode']}: rc {r['rc']}, {r['seconds']} s")
        for c in r["candidates"]:
            print(f"  {c['status']:9} {c['stage']}: {(c['reason'] or '')[:300]}")
        print(r["console_tail"][-1500:], flush=True)
    traces.extend(trace(args.out, args.device))
    save()
    for t in traces:
        print(f"--- hosted child, sandbox {t['mode']}:")
        for k, v in t.items():
            if k != "env":
                print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
