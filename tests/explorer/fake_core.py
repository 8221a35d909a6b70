"""A stand-in for the torchfuser public API, for explorer tests that must not depend on OpenCL.

It keeps the API's shape (compile, collect_reports, passes.PIPELINE, CompileReport.to_dict and
record_timing, as_reused) and the behaviour the explorer relies on: one report per captured graph, reports go
to every open collect_reports() list, and a kernel built once is a cache "hit" afterwards.
"""
from __future__ import annotations

import contextlib
import copy
from types import SimpleNamespace

import report_factory


class FakeReport:
    def __init__(self, data: dict):
        self._data = data

    def to_dict(self) -> dict:
        return copy.deepcopy(self._data)

    def as_reused(self) -> "FakeReport":
        data = copy.deepcopy(self._data)
        for kernel in data["kernels"]:
            kernel["cache"] = "hit"
        return FakeReport(data)

    def record_timing(self, *, eager_seconds: float, compiled_seconds: float) -> None:
        self._data["timings"].update(eager_seconds=eager_seconds, compiled_seconds=compiled_seconds,
                                     speedup=eager_seconds / compiled_seconds if compiled_seconds else None)


class FakeCore:
    def __init__(self) -> None:
        self.passes = SimpleNamespace(PIPELINE=list(report_factory.PIPELINE))
        self.built_kernels: set[tuple] = set()
        self.compile_calls: list[dict] = []
        self._collectors: list[list] = []

    @contextlib.contextmanager
    def collect_reports(self):
        reports: list = []
        self._collectors.append(reports)
        try:
            yield reports
        finally:
            self._collectors.remove(reports)

    def _report(self, enabled: list[str]) -> FakeReport:
        data = report_factory.mlp_report(enabled=enabled)
        for kernel in data["kernels"]:
            key = (kernel["name"], tuple(enabled))
            kernel["cache"] = "hit" if key in self.built_kernels else "miss"
            self.built_kernels.add(key)
        return FakeReport(data)

    def compile(self, fn, *, disable=(), device=None):
        unknown = set(disable) - set(self.passes.PIPELINE)
        if unknown:
            raise ValueError(f"unknown passes {sorted(unknown)}")
        self.compile_calls.append({"fn": fn, "disable": tuple(disable), "device": device})
        enabled = [p for p in self.passes.PIPELINE if p not in disable]
        state = {"compiled": False}

        def compiled(*args):
            if not state["compiled"]:  # "Dynamo" captures on the first call
                state["compiled"] = True
                report = self._report(enabled)
                for reports in self._collectors:
                    reports.append(report)
            return fn(*args)

        return compiled
