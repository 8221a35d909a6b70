"""Graph inputs carry the names the user knows (fc1.weight, x) into every graph of the report."""
import pytest
import torch
import torch.nn as nn

import torchfuser
from torchfuser.frontend.input_names import user_name


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.layers = nn.Linear(4, 8), nn.ModuleList([nn.Linear(8, 8)])
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, x, y):
        return self.layers[0](self.fc1(x)) * self.scale + y


@pytest.mark.parametrize("source, name", [
    ("L['self']._modules['fc1']._parameters['weight']", "fc1.weight"),
    ("L['self']._modules['layers']._modules['0']._parameters['bias']", "layers.0.bias"),
    ("L['self']._buffers['scale']", "scale"),
    ("G['model']._modules['head']._parameters['weight']", "head.weight"),
    ("L['x']", "x"),
    ("L['args'][1]", "args.1"),
    ("L['kwargs']['input_ids']", "kwargs.input_ids"),
    ("L['self']._cache", "_cache"),
])
def test_user_name_of_a_dynamo_source(source, name):
    assert user_name(source) == name


INPUTS = ["fc1.weight", "fc1.bias", "x", "layers.0.weight", "layers.0.bias", "scale", "y"]


def placeholder_labels(report, graph):
    return [n["label"] for n in report.expanded()["graphs"][graph]["nodes"] if n["op"] == "placeholder"]


@pytest.mark.parametrize("training", [False, True])
def test_the_report_names_parameters_buffers_and_arguments(training):
    model, x, y = Model(), torch.randn(2, 4, requires_grad=training), torch.randn(2, 8)
    with torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model)(x, y)
    torch.testing.assert_close(out, model(x, y))
    (report,) = reports
    assert placeholder_labels(report, "aten") == INPUTS
    assert placeholder_labels(report, "captured") == INPUTS
    aten_ids = [n["id"] for n in report.expanded()["graphs"]["aten"]["nodes"] if n["op"] == "placeholder"]
    assert len(set(aten_ids)) == len(INPUTS)  # ids stay FX's own names (unique)


def test_the_explorer_names_the_arguments_of_the_shown_model():
    import explorer

    view = explorer.show(Model(), torch.randn(2, 4), torch.randn(2, 8), timing_runs=0)
    assert placeholder_labels(view.reports[0], "aten") == INPUTS
