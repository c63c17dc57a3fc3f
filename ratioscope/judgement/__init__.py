"""Judgement of a report: the health verdict, CI check rules and their TOML, recorded settings."""
