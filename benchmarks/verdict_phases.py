"""Where a verdict's time goes, from the service's own account of the job (client.service: queued_s,
judged_s, progress_log of [seconds since a worker took the job, message]): shared by the
benchmarks that judge through `kernelwright serve` (soak_bench, warm_bench's concurrent section)."""

from __future__ import annotations

import statistics
from typing import Any

# where a verdict's time goes under concurrency: the first progress message starting with each, in
# seconds since a service worker took the job (client.service: progress_log)
MILESTONES = {"children": "starting the children", "correctness": "checking correctness", "correctness_done": "correctness cases done",
              "lock_wait": ("waiting for the GPU", "waiting for the CPU"), "timing": "timing ", "timed": "timed ", "verdict": "verdict "}


def milestones(job: dict[str, Any]) -> dict[str, Any]:
    """The service's account of one job: seconds queued and judged, and when each milestone came."""
    at: dict[str, float] = {}
    for t, msg in job.get("progress_log") or []:
        for key, prefix in MILESTONES.items():
            if key not in at and str(msg).startswith(prefix):  # a str or a tuple of them
                at[key] = round(float(t), 3)
    return {"queued_s": job.get("queued_s"), "judged_s": job.get("judged_s"), "at": at}


def phase_medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the honest `correct` verdicts: seconds queued, to the children, the correctness
    cases, from their end to the timing phase (the device lock's wait, mostly), the timing phase,
    and the rest; and how many verdicts waited for the lock past its notice."""
    spans: dict[str, list[float]] = {k: [] for k in ("queued", "setup", "correctness", "to_timing", "timing", "after")}
    waited = 0
    for r in rows:
        svc = r.get("service") or {}
        at = svc.get("at") or {}
        if r.get("status") != "correct" or not all(k in at for k in ("correctness", "correctness_done", "timing", "verdict")):
            continue
        waited += "lock_wait" in at
        spans["queued"].append(svc.get("queued_s") or 0.0)
        spans["setup"].append(at["correctness"])
        spans["correctness"].append(at["correctness_done"] - at["correctness"])
        spans["to_timing"].append(at["timing"] - at["correctness_done"])
        spans["timing"].append(at["verdict"] - at["timing"])
        spans["after"].append(max(0.0, (svc.get("judged_s") or at["verdict"]) - at["verdict"]))
    return {"n": len(spans["queued"]), "waited_for_the_lock": waited,
            "median_s": {k: round(statistics.median(v), 3) for k, v in spans.items() if v}}
