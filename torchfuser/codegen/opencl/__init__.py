"""OpenCL C generation: the op table's C column (op_c), programs as statements (program_c), one template per kind."""
