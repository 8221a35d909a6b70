"""Why Dynamo ended a graph early (a graph break), read off the graph it hands the backend, for the report.

Dynamo stores the reason on the GraphModule (`compile_subgraph_reason`): its text (a first line, then
"Explanation:" and "Hint:" lines in recent versions), the user's stack where tracing stopped, and whether it
was a break at all (the last graph of a frame ends at its return).
"""

from __future__ import annotations

import torch.fx as fx

# Hints for breaks whose reason Dynamo gives without one (matched on the reason's first line).
_OUR_HINTS = (
    ("generic_jump", "Python control flow on a tensor's value: Dynamo cannot know the branch, so it splits the "
                     "graph there. torch.where (both sides computed) or torch.cond keeps one graph."),
    ("data dependent", "an op whose output size depends on tensor values: the graph ends before it."),
)


def graph_break_of(gm: fx.GraphModule) -> dict | None:
    """{"reason", "explanation", "hints", "file", "line", "code"} of the break that ended this graph, or None
    when the graph ran to the frame's end (or Dynamo recorded nothing)."""
    why = getattr(gm, "compile_subgraph_reason", None)
    if why is None or not getattr(why, "graph_break", False):
        return None
    lines = [line.strip() for line in str(why.reason).splitlines() if line.strip()]
    first = lines[0] if lines else "graph break"
    explanation = " ".join(line.removeprefix("Explanation:").strip() for line in lines
                           if line.startswith("Explanation:"))
    hints = [line.removeprefix("Hint:").strip() for line in lines if line.startswith("Hint:")]
    hints += [hint for key, hint in _OUR_HINTS if key in first and not hints]
    frame = why.user_stack[-1] if getattr(why, "user_stack", None) else None
    return {"reason": first, "explanation": explanation, "hints": hints,
            "file": frame.filename if frame else None, "line": frame.lineno if frame else None,
            "code": (frame.line or "").strip() or None if frame else None}
