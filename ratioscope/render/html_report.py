"""The run report as one self-contained HTML file (docs/report.md).

Everything is inline: the report document as JSON, the page's own script and style, and
one copy of plotly.js (from the ``plotly`` package, the ``report`` extra) for the
interactive charts; the token view is plain HTML. The page computes nothing: every value
it shows is in the document; it only lays out, colours and formats.
"""

from __future__ import annotations

import json
from typing import Any

from ratioscope.errors import UsageError

PLOTLY_MISSING = (
    "the HTML report needs the plotly package for its charts: pip install 'ratioscope[report]'"
)


#: the page's content security policy: nothing is fetched, whatever a script asks for
#: (inline scripts and styles only; plotly.js compiles some functions at run time)
POLICY = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'unsafe-inline'; img-src data: blob:; font-src data:"
)


def plotly_source() -> tuple[str, str]:
    """(plotly.js minified source, the plotly package's version).

    Raises:
        UsageError: the plotly package is not installed.
    """
    from importlib import metadata, resources

    try:
        text = (resources.files("plotly") / "package_data" / "plotly.min.js").read_text(
            encoding="utf-8"
        )
        version = metadata.version("plotly")
    except (ModuleNotFoundError, FileNotFoundError, metadata.PackageNotFoundError):
        raise UsageError(PLOTLY_MISSING) from None
    return text, version


def script_json(document: Any) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``</script>``, no ``<!--``).

    >>> script_json({"a": "</script>"})
    '{"a": "\\\\u003c/script\\\\u003e"}'
    """
    text = json.dumps(document, allow_nan=False, ensure_ascii=False)
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _inline_script(source: str) -> str:
    # a script element ends at the first "</script": keep the library's own text intact
    return source.replace("</script", "<\\/script")


def _asset(name: str) -> str:
    from importlib import resources

    return (resources.files("ratioscope.render") / "report_assets" / name).read_text(
        encoding="utf-8"
    )


def render_html(document: dict[str, Any]) -> str:
    """The HTML page of a run report document (:meth:`ratioscope.run_report.RunReport.
    to_dict`): the page's script and style (``report_assets/``) and plotly.js inline."""
    library, version = plotly_source()
    title = str(document.get("title") or "ratioscope run report")
    return (
        _PAGE.replace("@@TITLE@@", _escape(title))
        .replace("@@STYLE@@", _asset("report.css"))
        .replace("@@POLICY@@", POLICY)
        .replace("@@PLOTLY_VERSION@@", _escape(version))
        .replace("@@DATA@@", script_json(document))
        .replace("@@APP@@", _inline_script(_asset("report.js")))
        .replace("@@PLOTLY@@", _inline_script(library))
    )


def _escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="@@POLICY@@">
<meta name="generator" content="ratioscope (plotly.js from plotly @@PLOTLY_VERSION@@)">
<title>@@TITLE@@</title>
<style>@@STYLE@@</style>
</head>
<body>
<div id="app"><p>Loading the report...</p></div>
<script type="application/json" id="report-data">@@DATA@@</script>
<script>@@PLOTLY@@</script>
<script>@@APP@@</script>
</body>
</html>
"""
