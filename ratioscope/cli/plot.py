"""``ratioscope plot KIND PATH... --out FILE``: one subcommand per kind of figure.

The kinds are registered from three modules so that each family of figures keeps its
options next to its code: token-ratio figures (KPO), objective-side figures (CW-GRPO)
and evaluation figures (Pass@k, UCC@k, similarity).
"""

from __future__ import annotations

import typer

from ratioscope.cli import compare, plot_eval, plot_objectives, plot_ratios, timeline

plot_app = typer.Typer(
    help=(
        "Draw a figure from a dump (computing what it needs) or from a report JSON.\n\n"
        "Example: ratioscope plot spectrum sample_data/verl/ --out spectrum.png"
    ),
    no_args_is_help=True,
)

plot_ratios.register(plot_app)
plot_objectives.register(plot_app)
plot_eval.register(plot_app)
plot_app.command("timeline")(timeline.plot_timeline)
plot_app.command("compare")(compare.plot_compare)
