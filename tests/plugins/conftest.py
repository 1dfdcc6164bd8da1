"""The plugins reference tests' fixtures: the shipped suite's (rtp_ref.suites.plugins.fixtures)."""

from rtp_ref.suites.plugins.fixtures import checkpoint, packages, plugins_kit

__all__ = ["checkpoint", "packages", "plugins_kit"]
