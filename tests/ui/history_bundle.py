"""A real explorer bundle with a graph break, recompiles, an unfused node and two runs (browser tests, #16).

`explorer.show` of a function with a `print` in the middle (Dynamo breaks the graph there) and a float64
matmul (fuse_gemm_epilogue leaves it unfused, and says why), then re-run with fuse_pointwise off.
The bundle is what the widget saves in the notebook (`view._repr_mimebundle_()`), checked against
report.schema.json. Run as a script it writes the bundle to the path given (default: stdout).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "torchfuser" / "report" / "report.schema.json"
REPORT_MIME = "application/vnd.torchfuser.report+json"


def scaled_then_printed(x, w):
    y = torch.relu(x @ w) * 2 + 1
    wide = (x.double() @ w.double()).float()  # float64: fuse_gemm_epilogue leaves it unfused, with its reason
    print("a graph break")
    return torch.tanh(y) + y + wide


def history_bundle() -> dict:
    import explorer

    torch.manual_seed(0)
    view = explorer.show(scaled_then_printed, torch.randn(8, 16), torch.randn(16, 16), timing_runs=3)
    view.enabled_passes = [p for p in view.pipeline if p != "fuse_pointwise"]
    view.rerun()
    data, _ = view._repr_mimebundle_()
    return data[REPORT_MIME]


def validate(bundle: dict) -> None:
    import jsonschema

    jsonschema.validate(bundle, json.loads(SCHEMA.read_text()))


if __name__ == "__main__":
    bundle = history_bundle()
    validate(bundle)
    text = json.dumps(bundle)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(text)
    else:
        print(text)
