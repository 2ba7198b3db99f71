"""Two benches (or runs) side by side: per problem and in aggregate.

Times from two sessions are not compared directly: each side's speedup is against baselines timed in
its own session, and the comparison is the ratio of those speedups (B over A). Differences in policy,
GPU or suite that would confound the comparison are listed as warnings first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from kernelwright.report.metrics import MARGIN, Bootstrap, bootstrap_geomean, geomean, outcome_of

HEADLINE = ("pass_rate", "n_correct", "n_problems")  # aggregate counts shown for both sides


def load_side(ref: str, store: Optional[Path], boot: Bootstrap = Bootstrap()) -> dict[str, Any]:
    """A bench document from a bench JSON file, or built from a run in the store."""
    from kernelwright.report.bench import load_bench
    from kernelwright.report.runs import bench_from_run

    path = Path(ref)
    return load_bench(path) if path.exists() else bench_from_run(ref, store, boot)


def _label(doc: dict[str, Any], fallback: str) -> str:
    return str(doc.get("label") or fallback)


def confounds(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between the two sides besides the candidates."""
    out = []
    pa, pb = a.get("policy") or {}, b.get("policy") or {}
    keys = sorted(k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k))
    if keys:
        out.append("policies differ in " + ", ".join(f"{k} ({pa.get(k)!r} vs {pb.get(k)!r})" for k in keys[:6]))
    ga, gb = (a.get("system") or {}).get("gpu"), (b.get("system") or {}).get("gpu")
    if ga != gb:
        out.append(f"different devices: {ga or 'cpu'} vs {gb or 'cpu'}")
    if a.get("device") == "cpu" or b.get("device") == "cpu":
        out.append("CPU times check the flow only; they are never claims")
    names_a = {r["name"] for r in a.get("problems", [])}
    names_b = {r["name"] for r in b.get("problems", [])}
    if names_a != names_b:
        out.append(f"problem sets differ: {len(names_a - names_b)} only in A, {len(names_b - names_a)} only in B")
    changed = _changed_sources(a, b)
    if changed:
        out.append("problem sources differ for " + ", ".join(changed[:6]) + " (left out of the paired ratio)")
    for key in ("driver", "cuda", "torch"):
        va, vb = (a.get("system") or {}).get(key), (b.get("system") or {}).get(key)
        if va != vb:
            out.append(f"{key} differs: {va} vs {vb} (it moves the baselines too)")
    for side, doc in (("A", a), ("B", b)):
        if doc.get("complete") is False:
            out.append(f"{side} is a partial bench: {len(doc.get('pending') or [])} problem(s) not judged yet")
    return out


def _changed_sources(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    hashes = {r["name"]: r.get("problem_hash") for r in a.get("problems", [])}
    return [r["name"] for r in b.get("problems", []) if r["name"] in hashes and hashes[r["name"]] != r.get("problem_hash")]


def _change(ra: Optional[dict[str, Any]], rb: Optional[dict[str, Any]], ratio: Optional[float]) -> str:
    if ra is None or rb is None:
        return "only in B" if ra is None else "only in A"
    if ra.get("problem_hash") != rb.get("problem_hash"):
        return "problem changed"
    ca, cb = ra["status"] == "correct", rb["status"] == "correct"
    if ca != cb:
        return "fixed" if cb else "broken"
    if not ca:
        return "failing"
    if ratio is None:
        return "untimed"
    return "faster" if ratio > 1 / MARGIN else "slower" if ratio < MARGIN else "same"


def problem_pairs(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per problem in either side: statuses, speedups against the faster baseline, ratio B/A."""
    by_a = {r["name"]: r for r in a.get("problems", [])}
    by_b = {r["name"]: r for r in b.get("problems", [])}
    names = list(by_a) + [n for n in by_b if n not in by_a]
    changed = set(_changed_sources(a, b))
    rows = []
    for name in names:
        ra, rb = by_a.get(name), by_b.get(name)
        sa = outcome_of(ra).speedup("best") if ra else None
        sb = outcome_of(rb).speedup("best") if rb else None
        ratio = sb / sa if sa and sb and name not in changed else None
        rows.append({"name": name, "level": (ra or rb).get("level"), "status_a": ra["status"] if ra else None,
                     "status_b": rb["status"] if rb else None, "speedup_a": sa, "speedup_b": sb, "ratio": ratio,
                     "change": _change(ra, rb, ratio)})
    return rows


def aggregate(a: dict[str, Any], b: dict[str, Any], rows: list[dict[str, Any]], boot: Bootstrap) -> dict[str, Any]:
    """Both sides' headline metrics, and the paired ratio over problems correct and timed on both."""
    ma, mb = a["metrics"]["overall"], b["metrics"]["overall"]

    def side(m: dict[str, Any]) -> dict[str, Any]:
        g = m["geomean_speedup"]["best"]
        return {**{k: m.get(k) for k in HEADLINE}, "faster_than_both_over_5pct": m["faster_than"]["both"]["over_5pct"],
                "fast_1_best": m["fast_p"]["best"]["1"], "geomean_best_correct": g["correct"]["value"], "geomean_best_all": g["all"]["value"]}

    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["change"]] = counts.get(r["change"], 0) + 1
    return {"a": side(ma), "b": side(mb), "paired": {"n": len(ratios), "geomean_ratio": geomean(ratios),
            "ci95": bootstrap_geomean(ratios, boot, "compare/paired")}, "changes": dict(sorted(counts.items()))}


def compare(a: dict[str, Any], b: dict[str, Any], labels: tuple[str, str], boot: Bootstrap = Bootstrap()) -> dict[str, Any]:
    """The comparison document."""
    rows = problem_pairs(a, b)
    return {"a": _label(a, labels[0]), "b": _label(b, labels[1]), "warnings": confounds(a, b),
            "aggregate": aggregate(a, b, rows, boot), "problems": rows, "bootstrap": boot.to_dict()}
