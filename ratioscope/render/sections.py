"""Terminal renderers of the objective-side sections, called by render.terminal.show_report.

Each renderer takes the report document (``Report.to_dict()``) and a rich Console and
prints its section when present.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console

Renderer = Callable[[Mapping[str, Any], Console], None]

RENDERERS: list[Renderer] = []
