"""Fixtures of the command-line tests."""

from tests.zygote import cli_zygote  # noqa: F401 (the fixture, for every module here)
