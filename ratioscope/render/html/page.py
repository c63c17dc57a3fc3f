"""The run report as one self-contained HTML file (docs/report.md).

Everything is inline: the report document as JSON, the page's own script and style, and
one copy of Vega, Vega-Lite and vega-embed (``assets/``, pinned in
``vendor.json``) for the interactive charts; the token view is plain HTML. The page
computes nothing: every value it shows is in the document; it only lays out, colours
and formats.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: the page's content security policy: nothing is fetched, whatever a script asks for
#: (inline scripts and styles only; Vega compiles its expressions at run time)
POLICY = (
    "default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'unsafe-inline'; img-src data: blob:; font-src data:"
)
#: a source map comment would make a browser's developer tools ask for a file
_SOURCE_MAP = re.compile(r"^//# sourceMappingURL=.*$", re.M)


def vendored() -> list[dict[str, Any]]:
    """The chart libraries the page inlines, in load order (``assets/vendor.json``:
    name, version, file, npm integrity, sha256)."""
    return list(json.loads(_asset("vendor.json"))["packages"])


def chart_libraries() -> str:
    """The vendored libraries' sources, one ``<script>`` each, in load order."""
    return "\n".join(
        f"<script>{_inline_script(_SOURCE_MAP.sub('', _asset(item['file'])))}</script>"
        for item in vendored()
    )


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

    return (resources.files("ratioscope.render.html") / "assets" / name).read_text(encoding="utf-8")


def render_html(document: dict[str, Any]) -> str:
    """The HTML page of a run report document (:meth:`ratioscope.render.html.run_report.RunReport.
    to_dict`): the page's script and style (``assets/``) and the chart libraries
    inline."""
    title = str(document.get("title") or "ratioscope run report")
    versions = ", ".join(f"{item['name']} {item['version']}" for item in vendored())
    return (
        _PAGE.replace("@@TITLE@@", _escape(title))
        .replace("@@STYLE@@", _asset("report.css"))
        .replace("@@POLICY@@", POLICY)
        .replace("@@VERSIONS@@", _escape(versions))
        .replace("@@DATA@@", script_json(document))
        .replace("@@APP@@", _inline_script(_asset("report.js")))
        .replace("@@LIBRARIES@@", chart_libraries())
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
<meta name="generator" content="ratioscope (charts: @@VERSIONS@@)">
<title>@@TITLE@@</title>
<style>@@STYLE@@</style>
</head>
<body>
<div id="app"><p>Loading the report...</p></div>
<script type="application/json" id="report-data">@@DATA@@</script>
@@LIBRARIES@@
<script>@@APP@@</script>
</body>
</html>
"""
