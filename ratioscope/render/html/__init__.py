"""The run report as one self-contained HTML page: its document, layout, script and style."""
