"""ReductionSpec → OpenCL C: row reductions with their prologue and epilogue programs inlined.

row_per_item (CPU devices): one work-item owns a row and walks it once per stage, OpenCL vectors along
the row (two accumulators in flight to hide add latency) and a scalar tail; the lanes are combined at
the end of the stage. Rows of a few KB stay in L1, so re-reading them per stage is cheap; a local-memory
tree is 2-30x slower on PoCL.
group_per_row (GPUs): a work-group per row, work-items strided along it (coalesced), partial results
combined by a local-memory tree. Written to be correct for any work-group size the runtime picks (rows
are strided over the groups; items beyond the scratch width fold in first), so it also runs on PoCL.
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES, VECTOR_SAFE, c_expression, vector_type
from torchfuser.codegen.opencl.program_c import (PREAMBLE, const_c, costly, helpers_for, program_statements, tagged,
                                                  vector_load, vector_store)
from torchfuser.ir.program import Const, Program, ProgramBuilder
from torchfuser.ir.kernels.reduction import GROUP_PER_ROW
from torchfuser.ir.kernels import ReductionSpec

_IDENTITY = {"sum": "(({T})0)", "prod": "(({T})1)", "max": "(({T})-INFINITY)", "min": "(({T})INFINITY)"}
_INTEGER_IDENTITY = {"sum": "(({T})0)", "prod": "(({T})1)", "max": "(({T})LONG_MIN)", "min": "(({T})LONG_MAX)"}
_FLOAT_C = ("float", "double")


def _identity(combine: str, c_type: str) -> str:
    """The combine's identity in `c_type` (a scalar or vector type; integer accumulators are long)."""
    table = _IDENTITY if c_type.rstrip("0123456789") in _FLOAT_C else _INTEGER_IDENTITY
    return table[combine].format(T=c_type)


def _combine(combine: str, a: str, b: str, c_type: str) -> str:
    """a combined with b; floating max / min propagate NaN as eager does (tf_maximum, not fmax)."""
    if combine in ("sum", "prod"):
        return f"({a} {'+' if combine == 'sum' else '*'} {b})"
    if c_type.rstrip("0123456789") in _FLOAT_C:
        return f"tf_{'maximum' if combine == 'max' else 'minimum'}_{c_type}({a}, {b})"
    return f"{combine}({a}, {b})"


def _used_inputs(program: Program) -> set[int]:
    used = {a for ins in program.instrs for a in ins.args if isinstance(a, int) and a < program.n_inputs}
    return used | {v for v in program.outputs if v < program.n_inputs}


class _Writer:
    """Generates the kernel for one spec; names: in{i} loads, rv{r} row values, out{o}/rout{o} outputs."""

    def __init__(self, spec: ReductionSpec):
        self.spec = spec
        self.red = spec.reduction
        self.idx = spec.index_type
        self.n_loads = len(self.red.load_dtypes)
        # When the final program recomputes the last stage's costly element value (softmax's exp), that
        # stage stores it in element output 0 and the final reads it back at the same j instead.
        self.final, self.stash = self.red.final, None
        stage = self.red.stages[-1] if self.red.stages else None
        if stage is not None and self.final.output_dtypes[:1] == (stage.acc_dtype,) and costly(stage.element):
            value = _recomputed(stage.element, self.final)
            if value is not None:
                self.final, self.stash = _reading_back(self.final, value), len(self.red.stages) - 1
        self.stash_input = self.red.final.n_inputs

    # -------------------------------------------------------------- signature and per-row set-up

    def parameters(self) -> list[str]:
        idx, nd = self.idx, self.spec.ndim
        params = []
        for i, (dtype, layout) in enumerate(zip(self.red.load_dtypes, self.spec.layouts)):
            params.append(f"__global const {C_TYPES[dtype]}* restrict in{i}, const {idx} off{i}")
            params += [f"const {idx} st{i}_{d}" for d in range(nd)]
            if layout == "strided":
                params.append(f"const {idx} cs{i}")
        # element outputs are contiguous: row r starts at r * n
        params += [f"__global {C_TYPES[d]}* restrict out{o}" for o, d in enumerate(self.red.element_output_dtypes)]
        params += [f"__global {C_TYPES[d]}* restrict rout{o}" for o, d in enumerate(self.red.row_output_dtypes)]
        params += [f"const {idx} R", f"const {idx} n"] + [f"const {idx} size{d}" for d in range(nd)]
        return params

    def row_setup(self) -> list[str]:
        """Outer coordinates of `row`, the base offset of every load, the per-row loads."""
        idx, nd = self.idx, self.spec.ndim
        lines = []
        if nd:
            lines.append(f"{idx} rem = row;")
            for d in range(nd - 1, 0, -1):
                lines.append(f"const {idx} c{d} = rem % size{d}; rem /= size{d};")
            lines.append(f"const {idx} c0 = rem;")

        def offset(stride_name):
            return "".join(f" + c{d} * {stride_name}_{d}" for d in range(nd))

        for i, layout in enumerate(self.spec.layouts):
            lines.append(f"const {idx} base{i} = off{i}{offset(f'st{i}')};")
            if layout == "bcast":
                lines.append(f"const {C_TYPES[self.red.load_dtypes[i]]} b{i} = in{i}[base{i}];")
        if self.red.element_output_dtypes:
            lines.append(f"const {idx} obase = row * n;")
        return lines

    # -------------------------------------------------------------- element programs at j

    def vectorised(self, program: Program) -> bool:
        """Vector path: one floating type (plus bools, as masks), no strided loads, floating outputs."""
        if self.spec.schedule == GROUP_PER_ROW or self.spec.vector_width <= 1 or program.indexes_last_dim:
            return False
        used = _used_inputs(program)
        if any(self.spec.layouts[i] == "strided" for i in used if i < self.n_loads):
            return False
        return mask_vectorisable(program, used)

    def element_block(self, program: Program, j: str, prefix: str, width: int) -> tuple[list[str], list[str]]:
        """Statements evaluating an element program at column j (a vector of `width` from j); output names."""
        used = _used_inputs(program)
        lines, names = [], []
        if program.indexes_last_dim:  # the column (last_index): argmax's position in the row
            lines.append(f"const {self.idx} jlast = {j};")
        for i in range(program.n_inputs):
            dtype = program.input_dtypes[i]
            if self.stash is not None and program is self.final and i == self.stash_input:
                names.append(f"{prefix}stash")
                value = (vector_load(vector_type(dtype, width), f"out0 + obase + {j}") if width > 1
                         else f"out0[obase + {j}]")
                lines.append(f"const {vector_type(dtype, width)} {prefix}stash = {value};")
                continue
            if i >= self.n_loads:  # a row value, the same for the whole row
                r = i - self.n_loads
                names.append(_broadcast(f"rv{r}", dtype, width, program) if width > 1 else f"rv{r}")
                continue
            name = f"{prefix}x{i}"
            names.append(name)
            if i not in used:
                continue
            layout = self.spec.layouts[i]
            if width > 1:
                value = vector_load(vector_type(dtype, width), f"in{i} + base{i} + {j}")
                if layout == "bcast":
                    value = _broadcast(f"b{i}", dtype, width, program)
                elif dtype == "bool":  # bytes in memory, a -1/0 mask in registers
                    value = f"(convert_{_mask_type(program, width)}({value}) != 0)"
                lines.append(f"const {_vector_c_type(dtype, width, program)} {name} = {value};")
                continue
            value = {"bcast": f"b{i}", "contig": f"in{i}[base{i} + {j}]"}.get(layout, f"in{i}[base{i} + {j} * cs{i}]")
            lines.append(f"const {C_TYPES[dtype]} {name} = {value};")
        if width > 1:
            body, outputs = mask_vector_statements(program, names, prefix, width)
        else:
            body, outputs = program_statements(program, names, prefix=prefix, width=1)
        return lines + body, outputs

    # -------------------------------------------------------------- one work-item per row

    def stage_per_item(self, k: int) -> list[str]:
        stage, idx = self.red.stages[k], self.idx
        c_type = C_TYPES[stage.acc_dtype]
        lines = [f"{c_type} acc{k} = {_identity(stage.combine, c_type)};", f"{idx} j{k} = 0;"]
        if self.vectorised(stage.element):
            w = self.spec.vector_width
            vtype = vector_type(stage.acc_dtype, w)
            vinit = _identity(stage.combine, vtype)
            steps = []
            for lane in range(2):
                body, (value,) = self.element_block(stage.element, f"j{k} + {lane * w}", f"s{k}u{lane}_", w)
                steps.append(body + [f"va{lane} = {_combine(stage.combine, f'va{lane}', value, vtype)};"]
                             + self.stash_store(k, value, f"j{k} + {lane * w}", w))
            lines += [f"{{ {vtype} va0 = {vinit}, va1 = {vinit};",
                      f"for (; j{k} + {2 * w} <= n; j{k} += {2 * w}) {{", *steps[0], *steps[1], "}",
                      f"for (; j{k} + {w} <= n; j{k} += {w}) {{", *steps[0], "}",
                      f"acc{k} = tf_fold_{stage.combine}_{vtype}({_combine(stage.combine, 'va0', 'va1', vtype)}); }}"]
        body, (value,) = self.element_block(stage.element, f"j{k}", f"s{k}_", 1)
        lines += [f"for (; j{k} < n; ++j{k}) {{", *body, *self.stash_store(k, value, f"j{k}", 1),
                  f"acc{k} = {_combine(stage.combine, f'acc{k}', value, c_type)};", "}"]
        return lines + self.finish(k)

    def stash_store(self, k: int, value: str, j: str, width: int) -> list[str]:
        if k != self.stash:
            return []
        return self.stores([value], j, width)

    def finish(self, k: int) -> list[str]:
        stage = self.red.stages[k]
        first = self.red.row_inputs_before(k)
        names = [f"acc{k}", f"(({C_TYPES[stage.acc_dtype]})n)"] + [f"rv{r}" for r in range(first)]
        body, outputs = program_statements(stage.finish, names, prefix=f"f{k}_")
        dtypes = stage.finish.output_dtypes
        return body + [f"const {C_TYPES[d]} rv{first + i} = {name};" for i, (d, name) in enumerate(zip(dtypes, outputs))]

    def stores(self, outputs: list[str], j: str, width: int) -> list[str]:
        if width > 1:
            return [vector_store(vector_type(d, width), name, f"out{o} + obase + {j}")
                    for o, (d, name) in enumerate(zip(self.red.element_output_dtypes, outputs))]
        return [f"out{o}[obase + {j}] = {name};" for o, name in enumerate(outputs)]

    def final_per_item(self) -> list[str]:
        final, idx = self.final, self.idx
        if not final.outputs:
            return []
        lines = [f"{idx} jf = 0;"]
        if self.vectorised(final):
            w = self.spec.vector_width
            body, outputs = self.element_block(final, "jf", "fv_", w)
            lines += [f"for (; jf + {w} <= n; jf += {w}) {{", *body, *self.stores(outputs, "jf", w), "}"]
        body, outputs = self.element_block(final, "jf", "fs_", 1)
        return lines + [f"for (; jf < n; ++jf) {{", *body, *self.stores(outputs, "jf", 1), "}"]

    def row_stores(self) -> list[str]:
        return [f"rout{o}[row] = rv{r};" for o, r in enumerate(self.red.row_outputs)]

    def per_item_body(self) -> list[str]:
        lines = [f"const {self.idx} row = get_global_id(0);", "if (row >= R) return;"] + self.row_setup()
        for k in range(len(self.red.stages)):
            lines += self.stage_per_item(k)
        return lines + self.final_per_item() + self.row_stores()

    # -------------------------------------------------------------- a work-group per row

    def group_body(self) -> list[str]:
        idx = self.idx
        lines = [f"__local {C_TYPES[s.acc_dtype]} scratch{k}[{self.spec.group_size}];"
                 for k, s in enumerate(self.red.stages)]
        lines += ["const int lid = get_local_id(0);", "const int lsize = get_local_size(0);",
                  f"for ({idx} row = get_group_id(0); row < R; row += get_num_groups(0)) {{"]
        lines += self.row_setup()
        for k, stage in enumerate(self.red.stages):
            c_type = C_TYPES[stage.acc_dtype]
            body, (value,) = self.element_block(stage.element, f"j{k}", f"s{k}_", 1)
            lines += [f"{c_type} acc{k} = {_identity(stage.combine, c_type)};",
                      f"for ({idx} j{k} = lid; j{k} < n; j{k} += lsize) {{", *body,
                      *self.stash_store(k, value, f"j{k}", 1),
                      f"acc{k} = {_combine(stage.combine, f'acc{k}', value, c_type)};", "}",
                      f"acc{k} = tf_group_{stage.combine}_{c_type}(acc{k}, scratch{k}, lid, lsize);"]
            lines += self.finish(k)
        if self.final.outputs:
            body, outputs = self.element_block(self.final, "jf", "fs_", 1)
            lines += [f"for ({idx} jf = lid; jf < n; jf += lsize) {{", *body, *self.stores(outputs, "jf", 1), "}"]
        lines += ["if (lid == 0) {", *self.row_stores(), "}", "}"]
        return lines

    # -------------------------------------------------------------- helpers and the whole kernel

    def helpers(self) -> str:
        programs = [p for s in self.red.stages for p in (s.element, s.finish)] + [self.red.final]
        group = self.spec.schedule == GROUP_PER_ROW
        text = helpers_for(programs, 1 if group else self.spec.vector_width)
        if group:
            for combine, dtype in sorted({(s.combine, s.acc_dtype) for s in self.red.stages}):
                text += _group_helper(combine, C_TYPES[dtype], self.spec.group_size)
            return text
        vector_stages = {(s.combine, s.acc_dtype) for s in self.red.stages if self.vectorised(s.element)}
        for combine, dtype in sorted(vector_stages):  # lanes to fold: floating accumulators only
            text += _fold_helper(combine, C_TYPES[dtype], self.spec.vector_width)
        return text

    def source(self) -> str:
        group = self.spec.schedule == GROUP_PER_ROW
        body = self.group_body() if group else self.per_item_body()
        attribute = f"__attribute__((work_group_size_hint({self.spec.group_size}, 1, 1))) " if group else ""
        params = ",\n    ".join(self.parameters())
        text = "\n  ".join(body)
        return f"""{PREAMBLE}{self.helpers()}
__kernel {attribute}void {self.spec.kernel_name}(
    {params})
{{
  {text}
}}
"""


def _fold_helper(combine: str, c_type: str, width: int) -> str:
    """Combine the lanes of a vector accumulator: a pairwise tree of halves."""
    if width <= 1:
        return ""
    lines, current, w = [], "v", width
    while w > 1:
        w //= 2
        half = vector_type({"float": "float32", "double": "float64"}[c_type], w)
        a, b = f"{current}.lo", f"{current}.hi"
        if combine in ("sum", "prod"):
            value = f"({a} {'+' if combine == 'sum' else '*'} {b})"
        else:  # NaN propagates through max and min, as in eager (fmax / fmin alone would drop it)
            value = f"((isnan({a}) || isnan({b})) ? ({a} + {b}) : f{combine}({a}, {b}))"
        lines.append(f"const {half} h{w} = {value};")
        current = f"h{w}"
    body = "\n  ".join(lines)
    return f"""
inline {c_type} tf_fold_{combine}_{c_type}{width}({c_type}{width} v) {{
  {body}
  return {current};
}}
"""


def _group_helper(combine: str, c_type: str, scratch: int) -> str:
    """Combine one value per work-item across the group; every item gets the result. Items beyond the
    scratch width fold in block by block first; then a tree over the occupied slots (any count)."""
    step = _combine(combine, "s[lid - b]", "v", c_type)
    pair = _combine(combine, "s[lid]", "s[lid + upper]", c_type)
    return f"""
{c_type} tf_group_{combine}_{c_type}({c_type} v, __local {c_type}* s, int lid, int lsize) {{
  for (int b = 0; b < lsize; b += {scratch}) {{
    if (lid >= b && lid < b + {scratch}) s[lid - b] = b == 0 ? v : {step};
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  for (int active = min(lsize, {scratch}); active > 1;) {{
    const int upper = (active + 1) / 2;
    if (lid < active - upper) s[lid] = {pair};
    barrier(CLK_LOCAL_MEM_FENCE);
    active = upper;
  }}
  const {c_type} result = s[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return result;
}}
"""


# ---------------------------------------------------------------- reading a stage's value back

def _value_numbers(program: Program, table: dict) -> list[int]:
    """Structural value numbers: equal numbers (one table) mean equal expressions over the same inputs."""
    numbers = [table.setdefault(("in", i), len(table)) for i in range(program.n_inputs)]
    for ins in program.instrs:
        args = tuple(("c", a.exact_text(), a.dtype) if isinstance(a, Const) else numbers[a] for a in ins.args)
        numbers.append(table.setdefault((ins.op, ins.dtype, args), len(table)))
    return numbers


def _recomputed(element: Program, final: Program) -> int | None:
    """The value of `final` that computes exactly `element`'s output (loads and row values share ids)."""
    table: dict = {}
    target = _value_numbers(element, table)[element.outputs[0]]
    numbers = _value_numbers(final, table)
    return next((v for v in range(final.n_inputs, len(numbers)) if numbers[v] == target), None)


def _reading_back(program: Program, value: int) -> Program:
    """`program` with `value` taken from a new last input; what only it needed is dropped."""
    n = program.n_inputs
    live, stack = set(), list(program.outputs)
    while stack:
        v = stack.pop()
        if v not in live:
            live.add(v)
            if v >= n and v != value:
                stack += [a for a in program.instrs[v - n].args if isinstance(a, int)]
    builder = ProgramBuilder(program.input_dtypes + (program.dtype_of(value),))
    renamed = {i: i for i in range(n)} | {value: n}
    for v, ins in enumerate(program.instrs, start=n):
        if v in live and v != value:
            renamed[v] = builder.emit(ins.op, [a if isinstance(a, Const) else renamed[a] for a in ins.args], ins.dtype)
    return builder.build([renamed[v] for v in program.outputs])


# ---------------------------------------------------------------- vectors with masks
# The shared vector path (program_c) covers arithmetic only. Masked softmax needs where, comparisons and
# bool loads too (a causal mask ran 7x slower on the scalar path), so here bools live in registers as
# OpenCL relational results: integer vectors of the float's width, -1 for true, 0 for false.

_COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_LOGICAL = {"logical_and": "&", "logical_or": "|", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_MASK_SCALARS = {"float32": "int", "float64": "long"}


def _float_dtype(program: Program) -> str | None:
    """The one floating type of the values a program uses, if it has exactly one."""
    floats = ({program.input_dtypes[i] for i in _used_inputs(program)} | {i.dtype for i in program.instrs}
              | set(program.output_dtypes)) - {"bool"}
    return next(iter(floats)) if len(floats) == 1 and floats <= set(_MASK_SCALARS) else None


def _mask_type(program: Program, width: int) -> str:
    return f"{_MASK_SCALARS[_float_dtype(program)]}{width}"


def _vector_c_type(dtype: str, width: int, program: Program) -> str:
    return _mask_type(program, width) if dtype == "bool" else vector_type(dtype, width)


def _broadcast(name: str, dtype: str, width: int, program: Program) -> str:
    if dtype == "bool":
        return f"(({_mask_type(program, width)})(({name}) ? -1 : 0))"
    return f"(({vector_type(dtype, width)}){name})"


def mask_vectorisable(program: Program, used) -> bool:
    """One floating type and bools; arithmetic, where, comparisons, logic, float<->bool casts; the outputs
    floating (stores are float vectors)."""
    floating = _float_dtype(program)
    if floating is None or "bool" in program.output_dtypes:
        return False
    dtypes = {program.input_dtypes[i] for i in used} | {ins.dtype for ins in program.instrs}
    if not dtypes <= {floating, "bool"}:
        return False
    for ins in program.instrs:
        ok = (ins.op in VECTOR_SAFE and ins.dtype == floating) or ins.op in ("where", "cast", "logical_not")
        ok = ok or ins.op in _COMPARISONS or (ins.op in _LOGICAL and ins.dtype == "bool")
        if not ok:
            return False
    return True


def mask_vector_statements(program: Program, input_names: list[str], prefix: str, width: int):
    """Like program_statements at a vector width, with bools as masks (see above)."""
    names, lines = list(input_names), []
    mask = _mask_type(program, width)
    for i, ins in enumerate(program.instrs, start=program.n_inputs):
        ops = []
        for a in ins.args:
            if isinstance(a, Const):
                ops.append(_broadcast(a.exact_text(), "bool", width, program) if a.dtype == "bool" else const_c(a, width))
            else:
                ops.append(names[a])
        source = program.dtype_of(ins.args[0]) if isinstance(ins.args[0], int) else ins.args[0].dtype
        if ins.op == "where":
            expression = f"select({ops[2]}, {ops[1]}, {ops[0]})"
        elif ins.op == "cast" and ins.dtype == "bool":
            expression = f"(({ops[0]}) != 0)"
        elif ins.op == "cast":  # a mask to 1/0 in the float type
            expression = f"convert_{vector_type(ins.dtype, width)}(-({ops[0]}))" if source == "bool" else ops[0]
        elif ins.op in _COMPARISONS:
            expression = f"(({ops[0]}) {_COMPARISONS[ins.op]} ({ops[1]}))"
        elif ins.op in _LOGICAL:
            expression = f"(({ops[0]}) {_LOGICAL[ins.op]} ({ops[1]}))"
        elif ins.op == "logical_not":
            expression = f"(~({ops[0]}))"
        else:
            expression = c_expression(ins.op, ops, ins.dtype, width)
        name = f"{prefix}{i}"
        c_type = mask if ins.dtype == "bool" else vector_type(ins.dtype, width)
        lines.append(tagged(f"const {c_type} {name} = {expression};", program, i))
        names.append(name)
    return lines, [names[v] for v in program.outputs]


def reduction_source(spec: ReductionSpec) -> str:
    return _Writer(spec).source()
