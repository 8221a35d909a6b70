"""The layer contract: imports point one way, none is hidden in a function, and the compiler never loads Jupyter.

    ir < lowering < passes < codegen < runtime < kinds < report < options < driver < frontend < api, ops
       < the public API (torchfuser/__init__) < tools < the commands (__main__, the bench and GPU-check
       aliases) < explorer (which reads only the report and the public API)

A module may import its own layer and the layers below it, never above; imports of TorchFuser modules sit at
the top of a module (an import inside a function is how a cycle gets hidden), and no two modules import each
other, directly or around a loop. The one exception is IPython's `%load_ext torchfuser` hook, which hands over
to the explorer when IPython calls it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = [
    ["torchfuser.version", "torchfuser.ir"],
    ["torchfuser.lowering"],
    ["torchfuser.passes"],
    ["torchfuser.codegen"],
    ["torchfuser.runtime"],
    ["torchfuser.kinds"],
    ["torchfuser.report"],
    ["torchfuser.options"],
    ["torchfuser.driver"],
    ["torchfuser.frontend"],
    ["torchfuser.api", "torchfuser.ops"],
    ["torchfuser"],  # the public API
    ["torchfuser.tools"],
    ["torchfuser.__main__", "torchfuser.bench", "torchfuser.check_gpu_gemm"],
    ["explorer"],
]
JUPYTER = ("IPython", "ipywidgets", "anywidget", "traitlets", "ipykernel", "explorer")
# (module, imported module): the only imports allowed inside a function or against the layers
EXCEPTIONS = {("torchfuser", "explorer")}  # torchfuser.load_ipython_extension: IPython's %load_ext hook


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in ("torchfuser", "explorer"):
        for path in (ROOT / package).rglob("*.py"):
            if "labextension" not in path.parts and "static" not in path.parts:
                found[module_name(path)] = path
    return found


def rank(module: str) -> int:
    best, rank_of = -1, None
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank_of = len(prefix), i
    assert rank_of is not None, f"{module} is in no layer: add it to LAYERS"
    return rank_of


def imports(module: str, path: Path, known: dict) -> list[tuple[str, bool, int]]:
    """(imported module, at module top, line) for every import of a TorchFuser, explorer or Jupyter module."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(node) for node in tree.body}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import submodule` imports the submodule
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in ("torchfuser", *JUPYTER):
                found.append((target, id(node) in top, node.lineno))
    return found


def test_imports_point_down_the_layers_and_sit_at_the_top():
    known = modules()
    problems = []
    for module, path in sorted(known.items()):
        for target, at_top, line in imports(module, path, known):
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if (module, target.split(".")[0]) in EXCEPTIONS:
                continue
            if target.split(".")[0] in JUPYTER and module.startswith("torchfuser"):
                problems.append(f"{where}: the compiler never imports Jupyter or the explorer")
            elif target.startswith("torchfuser") and rank(target) > rank(module):
                problems.append(f"{where}: against the layers ({LAYERS[rank(module)][0]} is below "
                                f"{LAYERS[rank(target)][0]})")
            elif target.startswith("torchfuser") and module.startswith("torchfuser") and not at_top:
                problems.append(f"{where}: inside a function (imports of TorchFuser modules sit at the top)")
    assert not problems, "\n".join(problems)


def test_no_import_cycles():
    known = modules()
    edges = {m: {t for t, at_top, _ in imports(m, p, known) if at_top and t in known and t != m}
             for m, p in known.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module, path):
        state[module] = 1
        for target in sorted(edges[module]):
            if state.get(target) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(known):
        if module not in state:
            visit(module, [module])


def test_explorer_reads_only_the_report_and_the_public_api():
    known = modules()
    allowed = ("torchfuser", "torchfuser.report")
    for module, path in known.items():
        if module.startswith("explorer"):
            for target, _, line in imports(module, path, known):
                if target.startswith("torchfuser"):
                    assert target in allowed or target.startswith("torchfuser.report."), f"{path}:{line} imports {target}"


def test_importing_torchfuser_loads_no_jupyter_module():
    code = ("import sys, torchfuser; import torchfuser.tools.bench; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {JUPYTER!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_contract_itself_catches_what_it_forbids(tmp_path):
    """A module importing a layer above it, or hiding an import in a function, is found."""
    bad = tmp_path / "torchfuser" / "ir" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("from torchfuser.runtime.device import get_device\n\ndef f():\n    import torchfuser.ir.ops\n")
    known = {"torchfuser.ir.bad": bad, "torchfuser.runtime.device": bad, "torchfuser.ir.ops": bad}
    found = [(t, top) for t, top, _ in imports("torchfuser.ir.bad", bad, known)]
    assert found == [("torchfuser.runtime.device", True), ("torchfuser.ir.ops", False)]
    assert rank("torchfuser.runtime.device") > rank("torchfuser.ir.bad")
