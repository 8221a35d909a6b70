"""Compile options, the same for `torchfuser.compile(...)` and `torch.compile(..., options={...})`.

    torchfuser.compile(model, disable=["fuse_pointwise"], autotune="max")
    torch.compile(model, backend="torchfuser", options={"disable": ["fuse_pointwise"], "device": "pthread"})
    torch.compile(model, backend="torchfuser", mode="max-autotune")

An unknown option or mode is an error that names it and lists the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torchfuser.passes import check_pass_names
from torchfuser.runtime.autotune import SEARCHES
from torchfuser.runtime.device import get_device

# torch.compile's modes: max-autotune searches every GEMM (not only the big ones); reduce-overhead is what
# steady calls already do (pre-bound launches replayed), so it changes nothing.
MODES = {"default": {}, "reduce-overhead": {}, "max-autotune": {"autotune": "max"},
         "max-autotune-no-cudagraphs": {"autotune": "max"}}
_AUTOTUNE_WORDS = {True: "default", False: "off"}


@dataclass(frozen=True)
class Options:
    disable: tuple[str, ...] = ()  # pass names (torchfuser.passes.PIPELINE) to switch off
    device: str | None = None  # "P:D" or part of a device or platform name; None: TORCHFUSER_DEVICE, else the default
    autotune: str | None = None  # GEMM search: "off", "default", "max"; None: TORCHFUSER_AUTOTUNE

    @classmethod
    def make(cls, mode: str | None = None, **options) -> "Options":
        """Checked options: pass names exist, the device can be found, autotune is a known search."""
        valid = [f.name for f in fields(cls)]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ValueError(f"unknown torchfuser option(s) {unknown}; valid options: {', '.join(valid)}")
        if mode is not None:
            if mode not in MODES:
                raise ValueError(f"unknown mode {mode!r}; torchfuser takes {', '.join(MODES)}")
            options = {**MODES[mode], **{k: v for k, v in options.items() if v is not None}}  # None: not given
        autotune = options.get("autotune")
        autotune = _AUTOTUNE_WORDS.get(autotune, autotune) if isinstance(autotune, bool) else autotune
        if autotune is not None and autotune not in SEARCHES:
            raise ValueError(f"autotune must be one of {SEARCHES} (or True / False), got {autotune!r}")
        device = options.get("device")
        if device is not None:
            get_device(device)  # a bad name fails here, listing the devices there are
        return cls(tuple(check_pass_names(options.get("disable", ()))), device, autotune)
