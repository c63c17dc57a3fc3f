"""The data of every figure, one module per family; ``render/`` only draws it.

Plot commands get what they draw from here (curves, panels, matrices as typed
objects), computed from reports or inputs through the library, so that a figure and
the report it comes from can never disagree.

- :mod:`ratioscope.figures.evaluation`: Pass@k / UCC@k curves and similarity panels.
- :mod:`ratioscope.figures.ratios`: one sequence's raw, sequence and Kalman log-ratios.
"""
