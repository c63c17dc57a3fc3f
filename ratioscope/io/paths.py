"""What a path given as input is, told from its name before the file is opened.

Commands that take reports beside dumps or samples route each path by its name alone,
so that a mix they cannot use is refused before any work is done.
"""

from __future__ import annotations

from pathlib import Path

#: the suffix of every ratioscope report (analyze and eval), in any case
REPORT_SUFFIX = ".json"


def is_report_path(path: str | Path) -> bool:
    """Whether ``path`` names a report (``*.json``) rather than a dump or a samples file.

    >>> is_report_path("runs/report.JSON"), is_report_path("samples.jsonl")
    (True, False)
    """
    return Path(path).suffix.lower() == REPORT_SUFFIX
