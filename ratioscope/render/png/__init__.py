"""Renderers of figures: matplotlib draws the figure data to PNG (SVG, PDF by suffix)."""
