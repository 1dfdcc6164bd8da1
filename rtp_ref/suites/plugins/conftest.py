"""The plugins suite's fixtures (rtp_ref.suites.plugins.fixtures)."""

from rtp_ref.suites.plugins.fixtures import checkpoint, packages, plugins_kit, registry

__all__ = ["checkpoint", "packages", "plugins_kit", "registry"]
