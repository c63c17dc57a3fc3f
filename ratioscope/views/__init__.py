"""Run-level views: a run step by step, two runs side by side, a step drilled down, trackers."""
