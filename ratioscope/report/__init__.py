"""The analyze report: its typed model and JSON, the files that hold one, its metrics catalog."""
