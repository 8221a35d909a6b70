"""A cell becomes a function over the user namespace; running it must look like running the cell."""
from __future__ import annotations

import traceback

import pytest

from explorer.cell_program import UNSET, CellSyntaxError, build_cell_program


def run_cell(source: str, namespace: dict) -> object:
    program = build_cell_program(source, namespace, filename="<cell-under-test>")
    return program.apply_results(namespace, program.function(*program.arguments(namespace)))


def test_assigned_names_land_in_the_namespace_and_old_values_are_read():
    ns = {"x": 1}
    value = run_cell("import math as m\nx = x + 1\ny, (z, *rest) = 2, (3, 4, 5)\nw = m.floor(2.5)", ns)
    assert value is None
    assert (ns["x"], ns["y"], ns["z"], ns["rest"], ns["w"]) == (2, 2, 3, [4, 5], 2)
    assert ns["m"].__name__ == "math"


def test_last_expression_is_returned_unless_silenced_with_semicolon():
    assert run_cell("a = 20\na + 1", {}) == 21
    assert run_cell("a = 20\na + 1;", {}) is None


def test_names_the_cell_only_reads_come_from_the_namespace_as_globals():
    ns = {"scale": 3}
    program = build_cell_program("y = scale * 2", ns)
    assert program.parameters == ["y"]
    assert program.function.__globals__ is ns
    run_cell("y = scale * 2", ns)
    assert ns["y"] == 6


def test_branch_not_taken_leaves_name_unbound_and_existing_value_kept():
    ns = {"kept": "old"}
    run_cell("if False:\n    never = 1\n    kept = 'new'\ndone = True", ns)
    assert "never" not in ns and ns["kept"] == "old" and ns["done"] is True


def test_comprehension_and_lambda_variables_do_not_leak_but_walrus_does():
    ns: dict = {}
    run_cell("squares = [i * i for i in range(4)]\nf = lambda j: j\nlast = [(k := v) for v in range(3)]", ns)
    assert ns["squares"] == [0, 1, 4, 9] and ns["k"] == 2
    assert "i" not in ns and "j" not in ns and "v" not in ns


def test_del_and_except_names_act_on_the_namespace():
    ns = {"gone": 1}
    run_cell("del gone\ntry:\n    1 / 0\nexcept ZeroDivisionError as err:\n    message = str(err)", ns)
    assert "gone" not in ns and "err" not in ns and ns["message"] == "division by zero"


def test_global_statement_writes_straight_to_the_namespace():
    ns = {"counter": 1}
    run_cell("global counter\ncounter += 1", ns)
    assert ns["counter"] == 2


def test_functions_and_classes_defined_in_the_cell_are_kept():
    ns: dict = {}
    run_cell("def double(a):\n    return 2 * a\nclass Box:\n    size = 3\nresult = double(Box.size)", ns)
    assert ns["result"] == 6 and ns["double"](4) == 8 and ns["Box"].size == 3


def test_names_not_yet_defined_are_passed_as_unset_and_never_written_back():
    ns: dict = {}
    program = build_cell_program("if False:\n    late = 1", ns)
    assert program.arguments(ns) == [UNSET]
    program.apply_results(ns, program.function(*program.arguments(ns)))
    assert "late" not in ns


def test_tracebacks_point_at_the_cell_lines():
    program = build_cell_program("a = 1\nb = 2\nc = a / 0", {}, filename="<cell-lines>")
    with pytest.raises(ZeroDivisionError) as caught:
        program.function(*program.arguments({}))
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.line) == ("<cell-lines>", 3, "c = a / 0")


@pytest.mark.parametrize("source, message", [
    ("from os import *", "import *"),
    ("return 1", "'return' outside a function"),
    ("yield 1", "'yield' outside a function"),
    ("await thing()", "top-level 'await'"),
    ("   \n# only a comment\n", "no code"),
])
def test_code_that_cannot_be_a_function_body_is_a_cell_syntax_error(source, message):
    with pytest.raises(CellSyntaxError, match=message):
        build_cell_program(source, {})


def test_return_inside_a_cell_function_is_fine():
    assert run_cell("def g():\n    return 5\ng()", {}) == 5


def test_invalid_python_is_a_syntax_error():
    with pytest.raises(SyntaxError):
        build_cell_program("x = = 1", {})
