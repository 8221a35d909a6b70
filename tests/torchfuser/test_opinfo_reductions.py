"""tools/opinfo_reductions: OpInfo samples compiled and compared with eager; counts what ran in kernels."""

import torch

from torchfuser.tools import opinfo_reductions


def test_sum_and_var_mean_samples_run_in_kernels_and_match_eager():
    infos = opinfo_reductions._op_infos()
    for name in ("sum", "var_mean"):
        result = opinfo_reductions.check_op(infos[name], max_samples=4)
        assert result["samples"] == 4 and result["wrong"] == 0 and result["error"] is None
        assert result["in_kernels"] == 4, result["why"]


def test_a_sample_left_in_pytorch_is_named_and_the_report_counts(capsys):
    assert opinfo_reductions.main(["--only", "nn.functional.group_norm,mean", "--samples", "2"]) == 0
    out = capsys.readouterr().out
    assert "aten.native_group_norm" in out and "2 ops: 1 get a kernel" in out


def test_a_wrong_result_is_caught():
    assert not opinfo_reductions._same(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.1]))
    assert opinfo_reductions._same((torch.tensor(float("nan")), 3), (torch.tensor(float("nan")), 3))
    assert not opinfo_reductions._same(torch.tensor([1, 2]), torch.tensor([1.0, 2.0]))  # dtype differs
