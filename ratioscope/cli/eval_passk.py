"""Placeholder until the command lands."""

from ratioscope.errors import UsageError


def eval_passk() -> None:
    """Not available yet."""
    raise UsageError("this command is not available yet")
