"""Renderers for the terminal: rich tables and the lines each command prints."""
