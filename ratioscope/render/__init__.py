"""Renderers by medium: the terminal, figures (PNG), the HTML run report, files for CI."""
