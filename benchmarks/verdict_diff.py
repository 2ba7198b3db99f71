"""Compare two `kernelwright demo --json` outputs (the shipped examples' verdicts at two commits): status,
guards fired, guards and steps present, steps that ran; fields added.

    python3 benchmarks/verdict_diff.py BEFORE.json AFTER.json
"""
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def key(v):
    return {"status": v["status"], "fired": sorted(g["name"] for g in v["guards"] if g["fired"]),
            "guards": sorted(g["name"] for g in v["guards"]), "steps": {s["name"]: s["ran"] for s in v["steps"]},
            "problem": v["problem"]["name"]}
out = []
for va, vb in zip(a, b):
    ka, kb = key(va), key(vb)
    new_steps = sorted(set(kb["steps"]) - set(ka["steps"]))
    changed_steps = sorted(s for s in ka["steps"] if s in kb["steps"] and ka["steps"][s] != kb["steps"][s])
    new_fields = sorted(set(vb) - set(va)); new_problem = sorted(set(vb["problem"]) - set(va["problem"]))
    out.append({"problem": ka["problem"], "status": [ka["status"], kb["status"]], "fired": [ka["fired"], kb["fired"]],
                "guards_added": sorted(set(kb["guards"]) - set(ka["guards"])), "guards_removed": sorted(set(ka["guards"]) - set(kb["guards"])),
                "steps_added": new_steps, "steps_ran_changed": changed_steps, "fields_added": new_fields, "problem_fields_added": new_problem})
print(json.dumps(out, indent=1))
