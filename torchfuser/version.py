"""The TorchFuser version: it enters every kernel cache key and every report."""

__version__ = "0.1.0"
