"""Recompute step device_sync's price from recorded per-call times, under each charging rule.

The judge logs every per-call time of its timing phase at debug level (judge.samples.samples_record);
`judge_bench.py` (its repeatability section), `zoo_bench.py run` and `warm_bench.py` (its
concurrent section, from the service's log: `concurrent_samples.json`) keep that record with each
verdict. This reads those files and prices each candidate again, without a GPU, two ways:

- "beyond": a call later than the tail base by more than the margin is charged the lateness
  beyond the margin (the judge since da7ad3d);
- "whole": such a call is charged its whole lateness past the tail base (the judge up to 258b71c).

    PYTHONPATH=src python3 benchmarks/charge_replay.py FILE.json [FILE.json ...]

Prints one line per recorded verdict: calls charged, and the median less the harness overhead
under each rule (the judge's step amortized_time is not replayed: a note says where it would
apply). Without empty calls in both children the judge prices every call at its device-wide time,
and so does this.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Iterator


def outcome_from(record: dict[str, Any]):
    """A judge.samples.TimingOutcome holding the record's calls."""
    from kernelwright.judge.samples import Samples, TimingOutcome

    samples = {}
    for name, calls in record["contenders"].items():
        s = Samples()
        s.times_ms.extend(calls["times_ms"])
        s.synced_ms.extend(calls["synced_ms"])
        samples[name] = s
    held = {k: (list(v["times_ms"]), list(v["synced_ms"])) for k, v in record.get("held", {}).items()}
    return TimingOutcome(samples=samples, stop_reason="", recheck_failure="", rechecked=0, compile_s=None,
                         null_ms=record.get("null_ms", {}), null_synced_ms=record.get("null_synced_ms", {}), held=held)


def whole(times: list[float], synced: list[float], base: float, margin: float) -> tuple[list[float], int]:
    """The rule up to 258b71c: a call past the margin is charged its device-wide time less the base."""
    out, n = [], 0
    for t, d in zip(times, synced):
        if d - t - base > margin:
            out.append(max(t, d - base))
            n += 1
        else:
            out.append(t)
    return out, n


def replay(record: dict[str, Any]) -> dict[str, Any]:
    """Both prices of the candidate (and the baselines) from one record."""
    from kernelwright.judge import stats
    from kernelwright.judge.samples import tail_margin
    from kernelwright.judge.pricing import MIN_MS, charged_times

    out = outcome_from(record)
    empty_calls = all(out.null_synced_ms.get(k) for k in ("reference", "candidate"))
    bases = out.tail_bases(record.get("null_tail_before_ms"), record.get("held_tail_before_ms")) if empty_calls else {}
    over = out.overheads(record.get("null_before_ms")) or {}
    rows = {}
    for name, s in out.samples.items():
        if not s.times_ms or len(s.synced_ms) != len(s.times_ms):
            continue
        o = over.get(name, 0.0)

        def price(times: list[float]) -> float:
            return max(MIN_MS, statistics.median(times) - o)

        if not empty_calls:  # the judge prices every call at its device-wide time then (step device_sync's text says so)
            rows[name] = {"n": len(s.times_ms), "base_us": None, "margin_us": None, "stream_ms": price(s.times_ms),
                          "beyond_ms": price(s.synced_ms), "beyond_charged": len(s.times_ms), "whole_ms": price(s.synced_ms),
                          "whole_charged": len(s.times_ms), "concentrated": stats.amortized(s.synced_ms)[2]}
            continue
        margin = tail_margin(statistics.median(s.times_ms))
        beyond, n_beyond, _ = out.charged(name, bases[name])
        old, n_old = whole(s.times_ms, s.synced_ms, bases[name], margin)
        rows[name] = {"n": len(s.times_ms), "base_us": round(bases[name] * 1e3, 2), "margin_us": round(margin * 1e3, 2),
                      "stream_ms": price(s.times_ms), "beyond_ms": price(beyond), "beyond_charged": n_beyond,
                      # the judge's price (judge.pricing: since its version 2, baselines are not charged)
                      "priced_ms": price(charged_times(name, beyond, s.times_ms)),
                      "whole_ms": price(old), "whole_charged": n_old, "concentrated": stats.amortized(s.synced_ms)[2],
                      # where the base came from: this contender's own tail, and the held calls' in each child
                      "tail_us": _us(statistics.median(d - t for t, d in zip(s.times_ms, s.synced_ms))),
                      "held_tails_us": {k.split(":")[0]: _us(out._held_tail(k)) for k in out.held if k.endswith(f":{name}")}}
    return rows


def samples_in_log(text: str) -> list[dict[str, Any]]:
    """The judge's per-call records (its debug line, judge.phases_pricing.SAMPLES_PREFIX) in a log's text,
    in the order they were written; a line cut short is skipped."""
    from kernelwright.judge.phases_pricing import SAMPLES_PREFIX

    out = []
    for line in text.splitlines():
        at = line.find(SAMPLES_PREFIX)
        if at >= 0:
            try:
                out.append(json.loads(line[at + len(SAMPLES_PREFIX):]))
            except json.JSONDecodeError:
                continue
    return out


def by_candidate(records: list[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Each record by its (problem hash, candidate hash); None where one pair was priced more than
    once, since which of its verdicts a record belongs to cannot then be told. A window the judge
    timed again (marked superseded, judge.phases_timing) was not priced and is skipped."""
    found: dict[str, dict[str, Any] | None] = {}
    for rec in records:
        if rec.get("candidate_hash") and not rec.get("superseded"):
            key = f"{rec.get('problem_hash')}:{rec['candidate_hash']}"
            found[key] = None if key in found else rec
    return found


def replay_summary(record: dict[str, Any] | None) -> dict[str, Any] | None:
    """The candidate's price replayed from a record: with no call charged (stream), as the judge
    charges (beyond), and the calls charged; None without a record or device-wide times."""
    if not record:
        return None
    r = replay(record).get("candidate")
    if not r:
        return None
    return {k: r.get(k) for k in ("n", "stream_ms", "beyond_ms", "beyond_charged", "base_us", "margin_us", "tail_us", "held_tails_us")}


def _us(ms: float | None) -> float | None:
    return None if ms is None else round(ms * 1e3, 2)


def records(doc: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(label, record) for every kept record in a judge_bench, zoo_bench or warm_bench file."""
    if isinstance(doc, list):  # judge_bench.json
        for row in doc:
            for k, rec in enumerate(row.get("samples") or []):
                if rec:
                    yield f"{row.get('section')}[{k}]", rec
    elif isinstance(doc, dict) and "samples_by_verdict" in doc:  # warm_bench's concurrent_samples.json
        for row in doc["samples_by_verdict"]:
            if row.get("record"):
                yield row.get("label", "?"), row["record"]
    elif isinstance(doc, dict) and "samples" in doc:  # repeat_partial.json
        for k, rec in enumerate(doc.get("samples") or []):
            if rec:
                yield f"repeatability[{k}]", rec
    elif isinstance(doc, dict):  # zoo_bench
        for section in ("exploits", "controls"):
            for row in doc.get(section, []):
                for side in ("on", "off"):
                    rec = (row.get(side) or {}).get("samples")
                    if rec:
                        yield f"{row['name']} ({side})", rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    found = 0
    for path in args.files:
        for label, rec in records(json.loads(path.read_text())):
            found += 1
            rows = replay(rec)
            if args.json:
                print(json.dumps({"file": str(path), "verdict": label, "contenders": rows}))
                continue
            if not rows:
                print(f"{path.name} {label}: no device-wide times (the CPU backend, or step device_sync off)")
            for name, r in rows.items():
                note = " (amortized_time would price its mean)" if r["concentrated"] else ""
                held = ", ".join(f"{child} {us} us" for child, us in r.get("held_tails_us", {}).items())
                print(f"{path.name} {label} {name}: n {r['n']}, tail {r.get('tail_us')} us"
                      + (f" (held calls: {held})" if held else "") + f", base {r['base_us']} us, margin {r['margin_us']} us; stream "
                      f"{r['stream_ms']:.5f} ms; beyond {r['beyond_ms']:.5f} ms ({r['beyond_charged']} charged); "
                      f"whole {r['whole_ms']:.5f} ms ({r['whole_charged']} charged){note}")
    if not found:
        print("no per-call records in these files (kept since the debug line of judge.samples.samples_record)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
