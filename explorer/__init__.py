"""TorchFuser explorer: see what the compiler did to your model, in a notebook.

    import explorer
    view = explorer.show(model, x)          # live widget: passes, graphs, kernels, timings
    view.enabled_passes = ["fuse_pointwise"]; view.rerun()
    view.save_html("report.html")

    %load_ext explorer                      # or %load_ext torchfuser
    %%torchfuse --disable fuse_pointwise    # run a cell compiled, and show it
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from .programs import DEFAULT_TIMING_RUNS, ModelProgram, check_pass_names, current_pipeline
from .widget import REPORT_MIME, ExplorerWidget, make_bundle


def show(model_or_fn: Callable, *example_inputs: object, disable: Sequence[str] = (), device: str | None = None,
         timing_runs: int = DEFAULT_TIMING_RUNS) -> ExplorerWidget:
    """Compile `model_or_fn`, run it on the example inputs (under torch.no_grad) and return the explorer.

    Eager and compiled times are the medians of `timing_runs` runs each (0 skips timing).
    """
    if isinstance(disable, str):
        disable = (disable,)
    check_pass_names(disable)
    pipeline = current_pipeline()
    program = ModelProgram(model_or_fn, tuple(example_inputs), device=device, timing_runs=timing_runs)
    title = getattr(model_or_fn, "__name__", None) or type(model_or_fn).__name__
    widget = ExplorerWidget(program, pipeline=pipeline, enabled_passes=[p for p in pipeline if p not in disable],
                            title=title)
    return widget.rerun()


def load_ipython_extension(ipython) -> None:
    """`%load_ext explorer` registers the %%torchfuse cell magic."""
    from .magic import load_ipython_extension as register

    register(ipython)


__all__ = ["show", "load_ipython_extension", "ExplorerWidget", "make_bundle", "REPORT_MIME"]
