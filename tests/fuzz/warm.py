"""Imported by the fuzz suite's fork server: builds the command line once there."""

from fuzz.harness import _command

_command()
