"""The example notebooks run headlessly (nbclient, a kernel on this venv's Python, the real compiler)
and every explorer they display carries the report bundle, the static page and the widget view."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import jsonschema
import nbformat
import pytest
from nbclient import NotebookClient

from explorer.widget import REPORT_MIME

ROOT = Path(__file__).resolve().parents[2]
REPORT_SCHEMA = json.loads((ROOT / "torchfuser" / "report" / "report.schema.json").read_text())
NOTEBOOKS = ["01_quickstart.ipynb", "02_gpt2_block.ipynb", "03_write_a_pass.ipynb"]
KERNEL_NAME = "torchfuser-tests"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernelspec in a temp dir that starts this very interpreter, with the repo importable."""
    jupyter_path = tmp_path_factory.mktemp("jupyter")
    spec_dir = jupyter_path / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "torchfuser tests", "language": "python",
            "env": {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join(filter(None, [str(jupyter_path), saved]))
    yield KERNEL_NAME
    if saved is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = saved


def test_all_three_examples_exist():
    assert sorted(p.name for p in (ROOT / "examples").glob("*.ipynb")) == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_example_notebook_runs_and_shows_report_bundles(name, kernel_name, tmp_path):
    notebook = nbformat.read(ROOT / "examples" / name, as_version=4)
    client = NotebookClient(notebook, kernel_name=kernel_name, timeout=600,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and traceback, if any cell fails
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    shown = [o["data"] for o in outputs if REPORT_MIME in o.get("data", {})]
    assert shown, f"{name}: no output carries {REPORT_MIME}"
    for data in shown:
        bundle = data[REPORT_MIME]
        assert bundle["kind"] == "torchfuser.explorer" and bundle["schema_version"] == 2
        assert bundle["reports"]
        jsonschema.validate(bundle, REPORT_SCHEMA, cls=jsonschema.Draft202012Validator)
        assert "application/vnd.jupyter.widget-view+json" in data
        assert data["text/html"].startswith("<!DOCTYPE html>")
        assert data["text/plain"].startswith("TorchFuser:")
    if name == "01_quickstart.ipynb":
        assert (tmp_path / "mlp_report.html").read_text().startswith("<!DOCTYPE html>")
