"""The SSA program's reference meaning (ir/interpret.py): a fused kernel's PyTorch fallback and the autotuner's
check run it, so it must take every form the passes emit."""

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.program import Const, ProgramBuilder


def test_literal_operands_of_ops_that_take_only_tensors():
    """hardtanh (ReLU6) becomes maximum and minimum with literal bounds; torch.maximum takes no number."""
    builder = ProgramBuilder(["float32"])
    clamped = builder.emit("minimum", (builder.emit("maximum", (0, Const(0.0, "float32")), "float32"),
                                       Const(6.0, "float32")), "float32")
    both = builder.emit("logical_and", (builder.emit("gt", (0, Const(1.0, "float32")), "bool"), Const(True, "bool")),
                        "bool")
    x = torch.tensor([-1.0, 3.0, 7.0, float("nan"), float("inf")])
    relu6, above_one = run_program(builder.build([clamped, both]), [x])
    torch.testing.assert_close(relu6, torch.nn.functional.relu6(x), equal_nan=True)
    assert relu6.dtype == torch.float32
    assert above_one.tolist() == (x > 1).tolist()
