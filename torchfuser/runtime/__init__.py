"""The OpenCL runtime: device, kernel cache, memory, and the plan executor."""
