"""Run history: what each (re-)run of the explorer compiled and how fast it ran, and two runs compared.

A run is recorded from its report dicts (the explorer reads only reports): the passes it had on, per kernel
(by OpenCL kernel name: equal specs share one) its uses and profiled time per program call, and the program's
eager and compiled medians. Comparing two runs gives the kernels one has and the other not, each shared
kernel's time in both, and the change in speedup.
"""
from __future__ import annotations

from collections.abc import Sequence


def run_record(number: int, enabled_passes: Sequence[str], reports: Sequence[dict], reused: bool = False) -> dict:
    kernels: dict[str, dict] = {}
    for report in reports:
        calls = (report.get("timings") or {}).get("calls") or 0
        for k in report.get("kernels") or []:
            entry = kernels.setdefault(k["name"], {"name": k["name"], "kind": k["kind"], "uses": 0,
                                                   "seconds_per_call": 0.0})
            entry["uses"] += 1
            entry["seconds_per_call"] += k["seconds"] / calls if calls else 0.0
    timings = (reports[0].get("timings") or {}) if reports else {}
    return {"number": number, "enabled_passes": list(enabled_passes), "reused": reused, "graphs": len(reports),
            "kernels": sorted(kernels.values(), key=lambda k: -k["seconds_per_call"]),
            "eager_seconds": timings.get("eager_seconds"), "compiled_seconds": timings.get("compiled_seconds"),
            "speedup": timings.get("speedup")}


def compare_runs(before: dict, after: dict) -> dict:
    """What changed from run `before` to run `after`: passes switched, kernels added and removed, the time of
    each kernel both have, and the speedup's change (None where either was not timed)."""
    old = {k["name"]: k for k in before["kernels"]}
    new = {k["name"]: k for k in after["kernels"]}
    speedups = before.get("speedup"), after.get("speedup")
    return {
        "runs": [before["number"], after["number"]],
        "passes_on": [p for p in after["enabled_passes"] if p not in before["enabled_passes"]],
        "passes_off": [p for p in before["enabled_passes"] if p not in after["enabled_passes"]],
        "added": [new[name] for name in new if name not in old],
        "removed": [old[name] for name in old if name not in new],
        "shared": [{"name": name, "kind": new[name]["kind"], "before": old[name]["seconds_per_call"],
                    "after": new[name]["seconds_per_call"]} for name in new if name in old],
        "speedup_delta": speedups[1] - speedups[0] if None not in speedups else None,
    }
