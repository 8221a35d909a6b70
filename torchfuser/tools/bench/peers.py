"""The peers torchfuser is compared with in every bench section, timed in the same interleaved rounds,
and the columns that show them.

Peers: eager; inductor (torch.compile's default); inductor with `freezing=True`, what a CPU inference user
picks: parameters become constants that inductor folds and pre-packs (oneDNN weight packing for Linear).
Freezing needs no_grad and applies to nn.Module parameters (a plain function has none, so there it compiles
what plain inductor compiles). torchfuser's ratio is given to eager and to the BEST peer; a row where
torchfuser is slower than the best peer is flagged: we treat that as a bug to fix.
"""

from __future__ import annotations

import statistics

import torch

from torchfuser.runtime.timing import interleaved_medians

PEERS = ("eager", "inductor", "inductor+freezing")
SLOWER = "<< SLOWER than"


def peer_candidates(fn, args: tuple, inductor: bool = True) -> dict:
    """{peer: zero-argument callable} for fn(*args): eager, and with inductor both inductor forms, compiled
    and called once here. freezing is set only while its candidate compiles (config.patch) and, as an option
    of that torch.compile, for any recompile: the option also keeps Dynamo from handing the freezing
    candidate the plain inductor's cached code (two inductor wrappers with equal options share a cache)."""
    candidates = {"eager": lambda: fn(*args)}
    if inductor:
        compiled = torch.compile(fn)
        compiled(*args)
        with torch.no_grad(), torch._inductor.config.patch(freezing=True):
            frozen = torch.compile(fn, options={"freezing": True})
            frozen(*args)
        candidates["inductor"] = lambda: compiled(*args)
        candidates["inductor+freezing"] = lambda: frozen(*args)
    return candidates


def against_peers(fn, args: tuple, fused, repeats: int, inductor: bool = True, extra: dict | None = None,
                  then=None) -> dict:
    """Interleaved medians (steady state) of the peers and torchfuser (`fused`) calling fn(*args), plus any
    `extra` candidates timed in the same rounds; no grad; then `then()` where given, while torchfuser's plans are
    still the ones timed; resets Dynamo afterwards (later calls compile new plans)."""
    with torch.no_grad():
        candidates = {**peer_candidates(fn, args, inductor), "torchfuser": lambda: fused(*args), **(extra or {})}
        medians = interleaved_medians(candidates, repeats=repeats)
        if then is not None:
            then()
    torch._dynamo.reset()
    return medians


def best_peer(medians: dict) -> tuple[str, float]:
    """(name, seconds) of the fastest peer that was timed."""
    return min(((name, medians[name]) for name in PEERS if medians.get(name)), key=lambda item: item[1])


def best_spread(medians: dict) -> tuple[float, float] | None:
    """The quartiles (lower, upper) of the per-round ratios best peer / torchfuser: each round times one block of
    every candidate, so a round's ratio shares that round's machine noise. None where the rounds' samples are
    not known (medians that are not runtime.timing.Timings)."""
    samples = getattr(medians, "samples", None) or {}
    peer, ours = samples.get(best_peer(medians)[0]), samples.get("torchfuser")
    if not peer or not ours or len(peer) != len(ours):
        return None
    ratios = [p / o for p, o in zip(peer, ours)]
    if len(ratios) == 1:
        return ratios[0], ratios[0]
    lower, _, upper = statistics.quantiles(ratios, n=4, method="inclusive")
    return lower, upper


def slower_flag(medians: dict) -> str:
    """'<< SLOWER than <peer>' where torchfuser's median is above the best peer's, else ''."""
    name, seconds = best_peer(medians)
    return f"  {SLOWER} {name}" if medians["torchfuser"] > seconds else ""


_UNITS = {"ms": 1e3, "us": 1e6}


def times_head(unit: str = "ms") -> str:
    return (f"{'eager ' + unit:>10}{'inductor':>10}{'ind+frz':>10}{'torchfuser':>12}"
            f"{'x eager':>9}{'x best':>8}{'rounds':>11}")


def times_columns(medians: dict, unit: str = "ms") -> str:
    """The times_head columns: medians in `unit`, torchfuser's ratios (peer time / torchfuser time, higher is
    better; nan where inductor was skipped) and the middle half of the per-round ratios to the best peer."""
    scale, nan = _UNITS[unit], float("nan")
    digits = 3 if unit == "ms" else 1
    fused = medians["torchfuser"]
    cells = "".join(f"{(medians.get(name) or nan) * scale:>{w}.{digits}f}"
                    for name, w in (("eager", 10), ("inductor", 10), ("inductor+freezing", 10), ("torchfuser", 12)))
    return cells + f"{medians['eager'] / fused:>9.2f}{best_peer(medians)[1] / fused:>8.2f}{rounds_cell(medians)}"


def rounds_cell(medians: dict) -> str:
    """The 'rounds' column: best_spread as 'lower-upper', '-' where unknown."""
    spread = best_spread(medians)
    return f"{'-' if spread is None else f'{spread[0]:.2f}-{spread[1]:.2f}':>11}"


TIMES_NOTE = ("'x eager', 'x best': eager's / the best peer's time over torchfuser's (higher is better; best of eager, "
              "inductor, inductor+freezing);\n'rounds': the middle half (quartiles) of the rounds' own best peer / "
              "torchfuser ratios: where it spans 1.00, rounds disagree on which is faster;\n'" + SLOWER +
              " ...': torchfuser is slower than the best peer (a bug to fix).")
