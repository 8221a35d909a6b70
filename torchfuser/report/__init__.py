"""What a compile did, for people: the CompileReport (versioned JSON: report.schema.json, schema.md), graph snapshots, static HTML.

The report is the only thing the explorer reads; the compiler fills it and imports nothing above it.
"""

from torchfuser.report.compile_report import CompileReport, FallbackEntry, KernelEntry, provenance
from torchfuser.report.html import render_html, render_text

__all__ = ["CompileReport", "FallbackEntry", "KernelEntry", "provenance", "render_html", "render_text"]
