"""A notebook cell → one Python function that torchfuser (Dynamo) can compile.

The cell body becomes the body of `__torchfuse_cell__`, whose globals are the user namespace. Names
the cell assigns at top level would become locals of that function, so they are passed in as
parameters (their current values, so `x = x + 1` still reads the old `x`) and returned at the end;
`apply_results` then stores them back into the namespace, as running the cell plainly would. The
value of a last bare expression is returned too, so the magic can display it like IPython does.

Line numbers are kept from the cell and the source is put in `linecache`, so tracebacks and the
report's provenance (file, line, code) point at the user's own lines.
"""
from __future__ import annotations

import ast
import linecache
import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

FUNCTION_NAME = "__torchfuse_cell__"
LAST_VALUE_NAME = "__torchfuse_value__"


class CellSyntaxError(ValueError):
    """The cell uses something that cannot live inside a function (one line, shown as a usage error)."""


class _Unset:
    """Stands for 'not bound in the namespace yet'; never written back."""

    def __repr__(self) -> str:
        return "<unset>"


UNSET = _Unset()


class _TopLevelBindings(ast.NodeVisitor):
    """Names bound by the cell's top-level code (not inside its functions, classes or lambdas)."""

    def __init__(self) -> None:
        self.stored: list[str] = []
        self.deleted: set[str] = set()
        self.declared_global: set[str] = set()

    def _bind(self, name: str) -> None:
        if name not in self.stored:
            self.stored.append(name)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self._bind(node.id)
        elif isinstance(node.ctx, ast.Del):
            self.deleted.add(node.id)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._bind(node.name)
        for child in (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults):
            if child is not None:
                self.visit(child)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name)
        for child in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(child)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for child in (*node.args.defaults, *node.args.kw_defaults):
            if child is not None:
                self.visit(child)

    def _visit_comprehension(self, node: ast.AST) -> None:
        # Only the walrus escapes a comprehension's scope; loop variables do not.
        for child in ast.walk(node):
            if isinstance(child, ast.NamedExpr) and isinstance(child.target, ast.Name):
                self._bind(child.target.id)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _visit_comprehension

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name == "*":
                raise CellSyntaxError("'from ... import *' cannot run inside a %%torchfuse cell")
            self._bind(alias.asname or alias.name)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self.deleted.add(node.name)  # Python unbinds it when the handler ends
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.declared_global.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        raise CellSyntaxError("'nonlocal' is not allowed at the top level of a cell")


def _reject_function_only_statements(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.Return, ast.Yield, ast.YieldFrom)) and _at_top_level(tree, node):
            raise CellSyntaxError(f"'{type(node).__name__.lower()}' outside a function")
        if isinstance(node, (ast.Await, ast.AsyncFor, ast.AsyncWith)) and _at_top_level(tree, node):
            raise CellSyntaxError("top-level 'await' cannot be compiled; move it out of the %%torchfuse cell")


def _at_top_level(tree: ast.Module, target: ast.AST) -> bool:
    """True when target is not inside a def, lambda or class of the cell."""
    def search(node: ast.AST) -> bool | None:
        for child in ast.iter_child_nodes(node):
            if child is target:
                return True
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                if any(n is target for n in ast.walk(child)):
                    return False
                continue
            found = search(child)
            if found is not None:
                return found
        return None

    return bool(search(tree))


@dataclass
class CellProgram:
    """The cell as a function: call `function(*arguments(namespace))`, then `apply_results`."""
    source: str
    filename: str
    function: Callable[..., tuple]
    parameters: list[str]               # assigned names, passed in and returned in this order
    global_names: list[str] = field(default_factory=list)  # written straight to the namespace
    returns_value: bool = False          # the cell ends in a bare expression

    def arguments(self, namespace: MutableMapping[str, object]) -> list[object]:
        return [namespace.get(name, UNSET) for name in self.parameters]

    def apply_results(self, namespace: MutableMapping[str, object], results: tuple) -> object:
        """Store assigned names into the namespace; return the last expression's value (or None)."""
        values = list(results)
        last_value = values.pop() if self.returns_value else None
        for name, value in zip(self.parameters, values):
            if value is not UNSET:
                namespace[name] = value
        return last_value


def build_cell_program(source: str, namespace: dict, filename: str = "<torchfuse-cell>") -> CellProgram:
    """Parse the cell and define its function with `namespace` as globals.

    Raises SyntaxError for invalid Python and CellSyntaxError for code that can't be a function body.
    """
    tree = ast.parse(source, filename=filename)
    if not tree.body:
        raise CellSyntaxError("the cell has no code to compile")
    _reject_function_only_statements(tree)
    bindings = _TopLevelBindings()
    for statement in tree.body:
        bindings.visit(statement)
    # Names the cell deletes (`del x`, `except E as x`) or declares global must act on the namespace
    # itself, so they are declared global in the function instead of passed in and returned.
    global_names = sorted(bindings.deleted | bindings.declared_global)
    parameters = [n for n in bindings.stored if n not in global_names]

    body = [ast.copy_location(ast.Pass(), s) if isinstance(s, ast.Global) else s for s in tree.body]
    returns_value = isinstance(body[-1], ast.Expr) and not source.rstrip().endswith(";")
    if returns_value:  # IPython shows a last bare expression; `;` at the end hides it
        last = body[-1]
        body[-1] = ast.copy_location(ast.Assign(targets=[ast.Name(LAST_VALUE_NAME, ast.Store())], value=last.value),
                                     last)
    returned = [ast.Name(n, ast.Load()) for n in parameters]
    if returns_value:
        returned.append(ast.Name(LAST_VALUE_NAME, ast.Load()))
    end_line = body[-1].end_lineno or body[-1].lineno
    body.append(ast.Return(value=ast.Tuple(elts=returned, ctx=ast.Load()), lineno=end_line, col_offset=0,
                           end_lineno=end_line, end_col_offset=0))
    if global_names:
        body.insert(0, ast.Global(names=global_names, lineno=1, col_offset=0, end_lineno=1, end_col_offset=0))
    function = ast.FunctionDef(
        name=FUNCTION_NAME, body=body, decorator_list=[], returns=None,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in parameters], kwonlyargs=[], kw_defaults=[],
                           defaults=[]),
        lineno=1, col_offset=0, end_lineno=end_line, end_col_offset=0, **({"type_params": []} if sys.version_info >= (3, 12) else {}))
    module = ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[]))
    code = compile(module, filename, "exec")
    if filename not in linecache.cache:
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    scope: dict = {}
    exec(code, namespace, scope)
    return CellProgram(source=source, filename=filename, function=scope[FUNCTION_NAME], parameters=parameters,
                       global_names=global_names, returns_value=returns_value)
