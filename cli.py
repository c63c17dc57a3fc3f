"""Run ratioscope from a checkout without installing it: ``python cli.py --help``."""

from ratioscope.cli import app

if __name__ == "__main__":
    app()
