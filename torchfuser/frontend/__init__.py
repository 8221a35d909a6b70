"""The ways a graph comes in: Dynamo's backend, FX symbolic trace, and the lowering to core ATen."""
