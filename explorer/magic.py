"""`%%torchfuse`: run a notebook cell compiled by torchfuser and show what the compiler did."""
from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

from .cell_program import CellSyntaxError, build_cell_program
from .programs import CellRun, compiler, current_pipeline
from .widget import ExplorerWidget


def enabled_passes_for(pipeline: list[str], disable: list[str], only: list[str] | None) -> list[str]:
    """Pipeline order; --only keeps just the named passes, --disable then removes more."""
    unknown = [n for n in [*disable, *(only or [])] if n not in pipeline]
    if unknown:
        raise UsageError(f"unknown pass {', '.join(map(repr, unknown))}; the pipeline has: {', '.join(pipeline)}")
    return [n for n in pipeline if (only is None or n in only) and n not in disable]


@magics_class
class TorchfuseMagics(Magics):

    @magic_arguments()
    @argument("--disable", nargs="+", action="extend", default=[], metavar="PASS",
              help="switch these passes off (names as in torchfuser.passes.PIPELINE)")
    @argument("--only", nargs="+", action="extend", default=None, metavar="PASS",
              help="run only these passes")
    @argument("--device", metavar="D", default=None, help="OpenCL device to compile for (default: TORCHFUSER_DEVICE)")
    @argument("--no-show", dest="show", action="store_false", help="run and collect reports, display nothing")
    @argument("--bench", type=int, metavar="N", default=0,
              help="time the cell: 1+N runs eager (one warm-up), N compiled; record the medians")
    @argument("--html", metavar="FILE", default=None, help="also write the static HTML report to FILE")
    @cell_magic
    def torchfuse(self, line: str, cell: str):
        """Run the cell compiled by torchfuser and show the explorer for every graph it captured.

        The cell's code is the program: Dynamo captures it (graph breaks such as print() split it
        into several graphs), names it assigns land in the namespace as usual, and the value of a
        last bare expression is returned. Names assigned in the cell are passed in at the start, so
        re-runs from the explorer start from the same values. With --bench the cell runs again
        2*N times: side effects repeat. Functions defined in the cell see the cell's final values.

        Examples::

            %%torchfuse --disable fuse_pointwise
            y = model(x)

            %%torchfuse --only fuse_gemm_epilogue --bench 10 --html mlp.html
            y = model(x)
        """
        args = parse_argstring(self.torchfuse, line)
        if args.bench < 0:
            raise UsageError("--bench N needs N >= 0")
        pipeline = current_pipeline()
        enabled = enabled_passes_for(pipeline, args.disable, args.only)
        source = self.shell.transform_cell(cell)
        filename = self.shell.compile.cache(source, self.shell.execution_count)
        try:  # check the cell up front, so a cell that cannot be a function is a one-line error
            build_cell_program(source, self.shell.user_ns, filename)
        except CellSyntaxError as error:
            raise UsageError(str(error)) from None
        run = CellRun(source=source, namespace=self.shell.user_ns, filename=filename, device=args.device,
                      bench_runs=args.bench, title=f"In[{self.shell.execution_count}]")
        widget = ExplorerWidget(run, pipeline=pipeline, enabled_passes=enabled, title=f"%%torchfuse In[{self.shell.execution_count}]")
        device_error = getattr(compiler(), "DeviceSelectionError", ())
        try:
            widget.rerun()
        except device_error as error:  # --device names no OpenCL device: a bad argument, not a crash
            raise UsageError(str(error).splitlines()[0]) from None
        if args.html:
            widget.save_html(args.html)
        if args.show:
            display(widget)
        self.shell.user_ns["_torchfuse"] = widget  # the last cell's explorer, for .rerun() from code
        return run.last_value


def load_ipython_extension(ipython) -> None:
    ipython.register_magics(TorchfuseMagics)


__all__ = ["TorchfuseMagics", "load_ipython_extension", "enabled_passes_for"]
