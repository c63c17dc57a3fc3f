"""The data model: raw columns, the canonical TokenBatch, analysis parameters, trainer settings."""
