"""Renderers of the files CI systems read: JUnit XML test reports and Markdown summaries."""
