"""Renderers: turn result objects into terminal tables, figures and report files."""
