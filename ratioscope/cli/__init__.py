"""The ``ratioscope`` command line: a thin Typer layer over the library.

Every command lives in its own module and only parses options, calls the library and
hands the result to a renderer. Errors are turned into exit codes in one place,
:class:`_BoundaryGroup`, so ``CliRunner`` tests see exactly what users see.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

from ratioscope.errors import ParameterError, RatioscopeError, RegressionFound, UsageError

try:  # typer >= 0.2x ships its own copy of click
    from typer._click import exceptions as _click_exceptions
except ImportError:  # pragma: no cover - older typer uses the click package
    # the same module to us, a second definition to mypy (one branch or the other runs)
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]

_USAGE_ERROR = _click_exceptions.UsageError
#: `ratioscope` or `ratioscope plot` alone: a usage error that prints the help
_NO_ARGS_IS_HELP = getattr(_click_exceptions, "NoArgsIsHelpError", ())
#: what an exception that is not a RatioscopeError exits with: ours, an internal error
_INTERNAL_EXIT = RatioscopeError.exit_code

#: exceptions that carry their own exit handling (usage errors, --help, explicit exits)
_PASS_THROUGH = (
    typer.Exit,
    typer.Abort,
    *(
        getattr(_click_exceptions, name)
        for name in ("Exit", "Abort", "ClickException")
        if hasattr(_click_exceptions, name)
    ),
)

#: exits a command chose (a verdict's exit code): its outputs are kept
_CHOSEN_EXITS = (typer.Exit, *(e for e in (getattr(_click_exceptions, "Exit", None),) if e))


def _stderr_line(message: str, kind: str = "error") -> None:
    typer.echo(f"ratioscope: {kind}: {message}", err=True)


def _message(error: RatioscopeError) -> str:
    """The error's sentence; a library parameter is called by the option that sets it."""
    from ratioscope.cli._options import PARAMETER_OPTIONS
    from ratioscope.errors import naming_options

    message = str(error)
    if isinstance(error, ParameterError):
        option = PARAMETER_OPTIONS.get(error.parameter)
        if option is not None:
            message = error.naming(option)
    return naming_options(message, PARAMETER_OPTIONS)


def _with_flag_hint(
    message: str, error: RatioscopeError, group: TyperGroup, ctx: typer.Context, typed: list[str]
) -> str:
    """``message``, plus "(--quiet takes no value)" when the missing input is a word like
    ``true`` typed right after an on/off option (``--quiet true run/``)."""
    from ratioscope.errors import UnreadablePathError
    from ratioscope.io.paths import flag_given_a_value

    if not isinstance(error, UnreadablePathError) or error.path is None:
        return message
    command: Any = group
    words = list(typed)
    while isinstance(command, TyperGroup) and words:
        command = command.get_command(ctx, words[0])
        words = words[1:]
    if command is None:
        return message
    flags = {
        name
        for param in getattr(command, "params", [])
        if getattr(param, "is_flag", False)
        for name in (*param.opts, *param.secondary_opts)
    }
    flag = flag_given_a_value(error.path, words, flags)
    return message if flag is None else f"{message.rstrip('.')} ({flag} takes no value)."


def _outputs_of(typed: list[str]) -> Any:
    """A command's output files appear together when it ends, or none does
    (:func:`~ratioscope.io.atomic.outputs_together`); kept when it ends on a failed
    check or an exit it chose. ``watch`` writes its documents while it runs."""
    import contextlib

    from ratioscope.io.atomic import outputs_together

    command = next((word for word in typed if not word.startswith("-")), None)
    if command == "watch":
        return contextlib.nullcontext()
    return outputs_together(keep_on=(RegressionFound, *_CHOSEN_EXITS))


def _usage_error(error: _click_exceptions.UsageError) -> NoReturn:
    """A command-line usage error as one line like every other error (not a help panel),
    pointing at the help of the command it is about; a bare group still prints its help."""
    if isinstance(error, _NO_ARGS_IS_HELP):
        raise error
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "ratioscope"
    message = str(error.format_message()).rstrip(".")
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]  # "no such option", like our sentences
    _stderr_line(f"{message} (see {command} --help).")
    raise typer.Exit(UsageError.exit_code) from None


class _BoundaryGroup(TyperGroup):
    """Turns library exceptions into one line on stderr and the design's exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from ratioscope.cli._help import tidy

        super().__init__(*args, **kwargs)
        tidy(self)  # the commands are built before the group that holds them

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from ratioscope.cli._streams import guarded_process

        with guarded_process():
            return super().main(*args, **kwargs)

    def make_context(self, info_name, args, parent=None, **extra):
        # the group's own options are parsed here, before invoke: one line for them too
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except _USAGE_ERROR as error:
            _usage_error(error)

    def invoke(self, ctx: typer.Context):  # type: ignore[override]
        from ratioscope.analysis.allocator import keep_freed_memory
        from ratioscope.analysis.threads import short_thread_waits
        from ratioscope.io.paths import refuse_special_files

        short_thread_waits()  # before any command imports torch
        keep_freed_memory()
        # the arguments as typed, for the hint of a flag given a value (read before the
        # command consumes them)
        typed = [*getattr(ctx, "_protected_args", []), *ctx.args]
        try:
            refuse_special_files(typed)
            with _outputs_of(typed):
                return super().invoke(ctx)
        except RatioscopeError as error:
            if os.environ.get("RATIOSCOPE_DEBUG") == "1":
                raise
            # a failed check is the gate working, not an error of the tool
            kind = "regression" if isinstance(error, RegressionFound) else "error"
            _stderr_line(_with_flag_hint(_message(error), error, self, ctx, typed), kind)
            raise typer.Exit(error.exit_code) from None
        except _USAGE_ERROR as error:
            _usage_error(error)
        except _PASS_THROUGH:
            raise
        except KeyboardInterrupt:
            _stderr_line("interrupted")
            raise typer.Exit(130) from None
        except MemoryError:
            _out_of_memory()
        except Exception as error:  # the boundary: anything else is our bug
            if os.environ.get("RATIOSCOPE_DEBUG") == "1":
                raise
            if _is_out_of_memory(error):
                _out_of_memory()
            _stderr_line(
                f"internal error ({type(error).__name__}: {error}); "
                "run again with RATIOSCOPE_DEBUG=1 for the traceback and please report it"
            )
            raise typer.Exit(_INTERNAL_EXIT) from None


#: how torch's CPU allocator and Python's threads say the memory is spent (torch raises a
#: RuntimeError, not a MemoryError; a thread whose stack cannot be mapped is not started)
_OUT_OF_MEMORY = ("can't allocate memory", "can't start new thread")


def _is_out_of_memory(error: Exception) -> bool:
    """Whether ``error`` is the machine's memory running out, not a bug: torch's
    allocators (CPU and CUDA) and thread starts, by their messages."""
    if type(error).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError (CUDA)
        return True
    return isinstance(error, RuntimeError) and any(m in str(error) for m in _OUT_OF_MEMORY)


def _out_of_memory() -> NoReturn:
    """The machine, not the input or ratioscope: say what to change (exit 2)."""
    from ratioscope.io.limits import MAX_BYTES_VARIABLE

    _stderr_line(
        "out of memory; give fewer or smaller files at once, or set "
        f"{MAX_BYTES_VARIABLE} lower so that large files are refused up front"
    )
    raise typer.Exit(UsageError.exit_code) from None


app = typer.Typer(
    name="ratioscope",
    cls=_BoundaryGroup,
    help=(
        "Diagnostics for importance ratios, reweighting schemes and sample diversity "
        "in RL training of language models.\n\n"
        "Example: ratioscope analyze sample_data/verl/ --json report.json"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from ratioscope._version import __version__

        typer.echo(f"ratioscope {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print the version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """The options of ``ratioscope`` itself, before any command."""


def _register() -> None:
    # Each module only imports typer and the standard library at import time, so that
    # `ratioscope --help` stays fast; heavy imports live inside the command bodies.
    from ratioscope.cli import (
        analyze,
        check,
        compare,
        eval_passk,
        eval_ucc,
        info,
        merge,
        metrics,
        objectives,
        plot,
        report,
        sweep,
        timeline,
        watch,
    )

    app.command("info")(info.info)
    app.command("analyze")(analyze.analyze)
    app.command("sweep")(sweep.sweep)
    app.command("timeline")(timeline.timeline)
    app.command("report")(report.report)
    app.command("watch")(watch.watch)
    app.command("compare")(compare.compare)
    app.command("objectives")(objectives.objectives)
    app.add_typer(plot.plot_app, name="plot")
    app.command("eval-passk")(eval_passk.eval_passk)
    app.command("eval-ucc")(eval_ucc.eval_ucc)
    app.command("check")(check.check)
    app.command("merge")(merge.merge)
    app.command("metrics")(metrics.metrics)
    app.command("convert")(__import__("ratioscope.cli.convert", fromlist=["_"]).convert)


_register()

__all__ = ["app"]
