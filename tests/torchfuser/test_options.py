"""torch.compile's options= and mode= take torchfuser's options; bad ones are errors that name them."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.options import MODES, Options


def relu_add(x):
    return torch.relu(x) * 2 + 1


def test_torch_compile_takes_options_and_they_take_effect():
    torch._dynamo.reset()
    f = torch.compile(relu_add, backend="torchfuser", options={"disable": ["fuse_pointwise"], "autotune": False})
    x = torch.randn(33)
    assert_close(f(x), relu_add(x))
    report = torchfuser.last_report()
    assert not report.kernels and {f.reason for f in report.fallbacks} == {"fuse_pointwise is disabled"}
    assert [p.name for p in report.passes if not p.enabled] == ["fuse_pointwise"]


@pytest.mark.parametrize("mode", list(MODES))
def test_every_torch_compile_mode_is_accepted(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))  # a fresh tuning database
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU()).eval()
    x = torch.randn(4, 16)
    with torch.no_grad():
        assert_close(torch.compile(model, backend="torchfuser", mode=mode)(x), model(x), atol=1e-4)
    (kernel,) = torchfuser.last_report().kernels
    source = kernel.tuning["source"]
    # the suite runs with TORCHFUSER_AUTOTUNE=0: only max-autotune's option overrides it
    assert source == "tuned" if mode.startswith("max-autotune") else source.startswith("heuristic")


def test_max_autotune_searches_even_a_small_gemm(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    model = nn.Linear(16, 24).eval()
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert_close(torchfuser.compile(model, autotune="max")(x), model(x), atol=1e-4)
    tuning = torchfuser.last_report().kernels[0].tuning
    assert tuning["source"] == "tuned" and len(tuning["candidates"]) > 1


def test_torchfuser_compile_takes_a_mode_too(tmp_path, monkeypatch):
    """torchfuser.compile(model, mode="max-autotune") searches as torch.compile's mode does (its autotune
    argument, left unset, does not undo the mode's)."""
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    model = nn.Linear(16, 24).eval()
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert_close(torchfuser.compile(model, mode="max-autotune")(x), model(x), atol=1e-4)
    assert torchfuser.last_report().kernels[0].tuning["source"] == "tuned"
    assert Options.make("max-autotune", autotune=None, device=None).autotune == "max"
    assert Options.make("max-autotune", autotune="off").autotune == "off"  # an explicit option wins


def test_unknown_options_and_modes_are_named_with_the_valid_ones():
    torch._dynamo.reset()
    x = torch.randn(4)
    with pytest.raises(Exception, match=r"unknown torchfuser option\(s\) \['fast_math'\]; valid options: "
                                        r"disable, device, autotune"):
        torch.compile(relu_add, backend="torchfuser", options={"fast_math": True})(x)
    with pytest.raises(ValueError, match="unknown mode 'fastest'; torchfuser takes default, reduce-overhead"):
        torchfuser.compile(relu_add, mode="fastest")
    with pytest.raises(ValueError, match="autotune must be one of"):
        torchfuser.compile(relu_add, autotune="sometimes")
    with pytest.raises(ValueError, match="unknown pass name"):
        Options.make(disable=["fuse_everything"])
    with pytest.raises(torchfuser.DeviceSelectionError, match="no OpenCL device matches"):
        Options.make(device="no-such-device")


def test_same_options_share_one_backend():
    from torchfuser.frontend.dynamo import make_backend

    assert make_backend(Options.make(disable=("fuse_pointwise",))) is make_backend(Options.make(disable=["fuse_pointwise"]))
    assert Options.make(mode="max-autotune").autotune == "max" and Options.make(autotune=True).autotune == "default"
