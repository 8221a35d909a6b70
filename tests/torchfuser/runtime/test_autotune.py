"""The GEMM autotuner: candidates timed and checked, the tuning database written, reused and survived."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn

import torchfuser
import torchfuser.runtime.autotune as autotune
import torchfuser.runtime.gemm_launch as gemm_launch
from eager_compare import assert_close


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    """Autotuning on, a private cache dir, and a two-tile search space so tests stay quick; the AVX-512
    tables (16-float vectors) whatever this CPU's width, so the names below hold everywhere."""
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 16)
    monkeypatch.setattr(gemm_launch, "PACKED_VARIANTS", {16: ((8, 32, 256, 8), (4, 16, 0, 1))})
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)  # the test shapes are small
    quiet_machine(monkeypatch, 0.0)  # whatever else runs beside the suite
    return tmp_path


def quiet_machine(monkeypatch, others: float):
    """Searches see other processes take this share of the CPUs."""
    monkeypatch.setattr(autotune, "OtherLoad", lambda: type("Load", (), {"share": lambda self: others})())


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(48, 80), nn.GELU()).eval()


def compile_and_check(m, x):
    with torch.no_grad():
        assert_close(torchfuser.compile(m)(x), m(x), atol=1e-4)
    (kernel,) = torchfuser.last_report().to_dict()["kernels"]
    return kernel


def test_the_search_times_every_candidate_and_keeps_a_correct_winner(tuning):
    kernel = compile_and_check(model(), torch.randn(33, 48))
    record = kernel["tuning"]
    assert record["source"] == "tuned"
    assert set(record["candidates"]) == {"packed 8x32 k256 r8", "packed 4x16 k0 r1", "extern"}
    assert record["winner"] in record["candidates"] and all(t > 0 for t in record["candidates"].values())
    stored = json.loads((tuning / "tuning.json").read_text())
    (entries,) = stored["devices"].values()
    gemms = [e for key, e in entries.items() if not key.startswith("lane rates")]  # also: the lanes' rates
    assert [e["winner"] for e in gemms] == [record["winner"]]


def test_a_search_on_a_busy_machine_is_used_but_not_kept(tuning, monkeypatch):
    quiet_machine(monkeypatch, autotune.BUSY_SHARE + 0.3)
    record = compile_and_check(model(), torch.randn(33, 48))["tuning"]
    assert record["winner"] in record["candidates"]
    assert record["source"].startswith("tuned while other processes took 55% of the CPUs")
    path = tuning / "tuning.json"  # the lanes' rates only, where this process measured them first
    stored = json.loads(path.read_text()) if path.exists() else {"devices": {}}
    assert not [key for entries in stored["devices"].values() for key in entries if not key.startswith("lane rates")]


def test_timing_rounds_rotate_so_no_candidate_always_follows_the_host_blas(tuning, monkeypatch):
    order = []
    timed = autotune._timed_call

    def recording(runtime, kernel, launch, inputs):
        order.append(launch)
        return timed(runtime, kernel, launch, inputs)

    monkeypatch.setattr(autotune, "_timed_call", recording)
    monkeypatch.setattr(autotune, "SETTLE_SECONDS", 0.0)
    compile_and_check(model(), torch.randn(33, 48))
    rounds = order[-3 * autotune.REPEATS:]  # after the three correctness runs
    firsts = {id(rounds[3 * r]) for r in range(autotune.REPEATS)}
    after = {id(rounds[i + 1]) for i in range(len(rounds) - 1) if type(rounds[i]).__name__ == "ExternGemmLaunch"}
    assert len(firsts) == 3 and len(after) == 2


def test_an_older_database_version_is_replaced_without_a_warning(tuning, recwarn):
    (tuning / "tuning.json").write_text(json.dumps({"version": autotune.DB_VERSION - 1, "devices": {"x": {}}}))
    compile_and_check(model(), torch.randn(33, 48))
    stored = json.loads((tuning / "tuning.json").read_text())
    assert stored["version"] == autotune.DB_VERSION and "x" not in stored["devices"]
    assert not [w for w in recwarn if "tuning database" in str(w.message)]


def test_a_new_process_reuses_the_database(tuning):
    compile_and_check(model(), torch.randn(33, 48))
    code = textwrap.dedent("""
        import torch, torch.nn as nn, torchfuser
        torchfuser.runtime.autotune.SEARCH_MIN_FLOPS = 0  # as the fixture: the test shape is small
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(48, 80), nn.GELU()).eval()
        x = torch.randn(33, 48)
        with torch.no_grad():
            torch.testing.assert_close(torchfuser.compile(m)(x), m(x), rtol=1e-4, atol=1e-4)
        print("SOURCE", torchfuser.last_report().kernels[0].tuning["source"])
    """)
    env = {**os.environ, "TORCHFUSER_CACHE_DIR": str(tuning), "TORCHFUSER_AUTOTUNE": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "SOURCE tuning database" in done.stdout


def test_a_damaged_database_is_ignored_with_a_warning_and_rewritten(tuning):
    (tuning / "tuning.json").write_text("{ not json")
    with pytest.warns(RuntimeWarning, match="damaged tuning database"):
        kernel = compile_and_check(model(), torch.randn(9, 48))
    assert kernel["tuning"]["source"] == "tuned"
    assert json.loads((tuning / "tuning.json").read_text())["version"] == autotune.DB_VERSION


def test_the_extern_variant_is_blas_plus_an_opencl_epilogue(tuning, monkeypatch):
    monkeypatch.setattr(gemm_launch, "PACKED_VARIANTS", {16: ()})  # only the host BLAS is left to choose...
    monkeypatch.setattr(gemm_launch, "ROWS_MAX_M", 0)  # ...the decode schedule included
    x = torch.randn(17, 48)
    kernel = compile_and_check(model(), x)
    assert kernel["tuning"]["winner"] == "extern"
    assert kernel["kind"] == "gemm" and kernel["name"].startswith("tf_pointwise_")  # the epilogue kernel
    assert any("host BLAS" in t for t in kernel["transforms"])


def test_autotune_off_takes_the_heuristic(tuning, monkeypatch):
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "0")
    kernel = compile_and_check(model(), torch.randn(5, 48))
    assert kernel["tuning"]["source"].startswith("heuristic") and kernel["tuning"]["winner"] == "rows 8x32"
    kernel = compile_and_check(model(), torch.randn(40, 48))  # more rows than the decode schedule takes
    assert kernel["tuning"]["source"].startswith("heuristic") and kernel["tuning"]["winner"] == "packed 8x32 k256 r8"
    assert any("once per weight version" in t for t in kernel["transforms"])
    assert not (tuning / "tuning.json").exists()


def test_tiny_gemms_are_not_worth_a_search(tuning, monkeypatch):
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 2e7)
    kernel = compile_and_check(model(), torch.randn(3, 48))
    assert "too small to tune" in kernel["tuning"]["source"]


def test_max_autotunes_choices_for_small_gemms_stay_its_own(tuning, monkeypatch):
    """What a max-autotune search stored for a GEMM the default search would not tune (timed alone, such choices
    can lose inside a plan) does not replace the default's heuristic; a later max-autotune run reuses it."""
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 2e7)
    m, x = model(), torch.randn(3, 48)
    sources = []
    for search in ("max", "default", "max"):
        torch._dynamo.reset()
        with torch.no_grad():
            assert_close(torchfuser.compile(m, autotune=search)(x), m(x), atol=1e-4)
        sources.append(torchfuser.last_report().kernels[0].tuning["source"])
    assert sources[0] == "tuned" and "too small to tune" in sources[1] and sources[2] == "tuning database"


def test_symbolic_sizes_take_the_database_or_the_heuristic_and_max_still_searches(tuning):
    """A GEMM whose rows Dynamo marks dynamic is not searched at its example size (the default search), unless
    autotune="max"; either way every size agrees with eager."""
    m = model()
    records = {}
    for search in ("default", "max"):
        torch._dynamo.reset()
        compiled = torch.compile(m, backend="torchfuser", dynamic=True, options={"autotune": search})
        with torch.no_grad(), torchfuser.collect_reports() as reports:
            for rows in (5, 33, 70):
                x = torch.randn(rows, 48)
                assert_close(compiled(x), m(x), atol=1e-4)
        (kernel,) = [k for k in reports[-1].to_dict()["kernels"] if k["kind"] == "gemm"]
        records[search] = kernel["tuning"]
    assert "sizes vary between calls" in records["default"]["source"]
    assert records["max"]["source"] == "tuned"


def test_variant_names_round_trip():
    variants = [gemm_launch.GemmVariant("packed", *v) for vs in gemm_launch.PACKED_VARIANTS.values() for v in vs]
    variants += [gemm_launch.tiled_variant(*v) for v in gemm_launch.TILED_VARIANTS]
    variants += [gemm_launch.STRIDED_VARIANT, gemm_launch.GemmVariant("extern")]
    assert [gemm_launch.GemmVariant.parse(v.name) for v in variants] == variants
    assert gemm_launch.tiled_variant(8, 4, 128, 64, 16).name == "tiled 8x4 m128 n64 k16"
    assert gemm_launch.STRIDED_VARIANT.name == "strided 4x8"  # names already in tuning databases stay


def test_gpu_search_rejects_tiled_variants_the_device_cannot_fit(tuning, monkeypatch):
    """A device with groups of at most 16 items: every tiled candidate is rejected, with the reason, unrun."""
    from torchfuser.runtime.device import Device

    monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))
    limits = gemm_launch.DeviceLimits(16, (16, 16, 16), 1 << 16)
    monkeypatch.setattr(gemm_launch, "device_limits", lambda device: limits)
    record = compile_and_check(model(), torch.randn(33, 48))["tuning"]
    tiled = {gemm_launch.tiled_variant(*v).name for v in gemm_launch.TILED_VARIANTS}
    assert record["winner"] == "strided 4x8" and set(record["candidates"]) == {"strided 4x8"}
    assert set(record["rejected"]) == tiled
    assert all("does not fit the device: a " in why and "16 items" in why for why in record["rejected"].values())


def test_the_host_blas_must_win_by_a_margin():
    close = {"extern": 1.0, "packed 8x32 k256 r8": 1.0 * autotune.EXTERN_MARGIN * 0.99}
    assert autotune._winner(close) == "packed 8x32 k256 r8"
    clear = {"extern": 1.0, "packed 8x32 k256 r8": 1.0 * autotune.EXTERN_MARGIN * 1.01}
    assert autotune._winner(clear) == "extern"


def test_another_variant_replaces_the_heuristic_choice_only_by_a_margin():
    close = {"packed 8x32 k0 r8": 1.0, "packed 8x16 k0 r8": 1.0 / autotune.PRIOR_MARGIN * 1.01}
    assert autotune._winner(close, prior="packed 8x32 k0 r8") == "packed 8x32 k0 r8"
    assert autotune._winner(close) == "packed 8x16 k0 r8"
    clear = {"packed 8x32 k0 r8": 1.0, "packed 8x16 k0 r8": 1.0 / autotune.PRIOR_MARGIN * 0.99}
    assert autotune._winner(clear, prior="packed 8x32 k0 r8") == "packed 8x16 k0 r8"


@pytest.mark.parametrize("rows, cold", [(64, True), (300, False)])
def test_few_rows_over_a_large_weight_are_timed_with_the_weight_evicted(tuning, monkeypatch, rows, cold):
    """Such a GEMM streams its weight, which a model reads from memory: every call the max search times finds it
    evicted, and the default search leaves it to the heuristic (no isolated call is timed as the model runs it)."""
    evictions = []
    monkeypatch.setattr(autotune, "_evict_caches", lambda: evictions.append(1))
    torch.manual_seed(0)
    m = nn.Linear(512, 640, bias=False).eval()  # B: 1.25 MiB
    x = torch.randn(rows, 512) / 16
    with torch.no_grad():
        assert_close(torchfuser.compile(m, mode="max-autotune")(x), m(x), atol=1e-4)
    (kernel,) = torchfuser.last_report().to_dict()["kernels"]
    timed = len(kernel["tuning"]["candidates"]) * autotune.REPEATS
    assert timed and len(evictions) == (timed if cold else 0)
    source = compile_and_check(m, x)["tuning"]["source"]
    assert source == "tuning database" if not cold else source.startswith("heuristic (few rows over a large weight")


@pytest.mark.parametrize("n, tile", [(16, "8x16"), (32, "8x32"), (33, "4x64"), (64, "4x64"), (65, "8x32")])
def test_the_heuristic_covers_up_to_64_columns_with_one_panel(monkeypatch, n, tile):
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 16)
    assert gemm_launch.default_variant("CPU", n, m=None).name == f"packed {tile} k0 r8"


@pytest.mark.parametrize("n", [40, 64])
def test_one_panel_heuristic_matches_eager_for_a_linear_and_a_convolution(monkeypatch, n):
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "0")
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 16)
    torch.manual_seed(0)
    linear = nn.Sequential(nn.Linear(37, n), nn.ReLU()).eval()
    kernel = compile_and_check(linear, torch.randn(45, 37))
    assert kernel["tuning"]["winner"].startswith("packed 4x64")
    conv = nn.Sequential(nn.Conv2d(5, n, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(2, 5, 9, 11)
    with torch.no_grad():
        assert_close(torchfuser.compile(conv)(x), conv(x), atol=1e-4, rtol=1e-4)
    assert any((k.tuning or {}).get("winner", "").startswith("packed 4x64") for k in torchfuser.last_report().kernels)


def test_the_search_space_narrows_its_panels_for_narrow_outputs_only(monkeypatch):
    class Cpu:
        type_name, zero_copy = "CPU", True

    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 16)
    narrow = [v for v in gemm_launch.candidate_variants(Cpu(), 64, n=10) if v.schedule == "packed"]
    assert {v.tile_n for v in narrow} == {16} and len({v.name for v in narrow}) == len(narrow)
    assert gemm_launch.default_variant("CPU", 10, 64).name in {v.name for v in narrow}  # the prior is a candidate
    wide = [v for v in gemm_launch.candidate_variants(Cpu(), 64, n=512) if v.schedule == "packed"]
    assert min(v.tile_n for v in wide) == 32 and gemm_launch.default_variant("CPU", 512, 64) in wide
