"""Helpers for comparing compiled results with eager PyTorch."""

import pytest
import torch

import torchfuser


def assert_close(actual, expected, rtol=1e-4, atol=1e-5):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


@pytest.fixture
def check_against_eager():
    """check(fn, *inputs, disable=(), rtol, atol) -> the CompileReport; compares outputs with eager."""

    def check(fn, *inputs, disable=(), rtol=1e-4, atol=1e-5):
        expected = fn(*inputs)
        compiled = torchfuser.compile(fn, disable=disable)
        with torch.no_grad():
            actual = compiled(*inputs)
        assert_close(actual, expected, rtol, atol)
        return torchfuser.last_report()

    return check
