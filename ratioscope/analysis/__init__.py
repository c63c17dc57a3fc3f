"""Orchestration over files and steps: dumps -> chunks -> accumulators -> Report."""
