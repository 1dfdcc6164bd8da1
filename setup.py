"""Package discovery that pyproject.toml cannot express on its own.

The platform tables (``platforms/``) and the conformance suite (``conformance/``) live at the
repository root, where engine developers and vendors look for them; the wheel ships them as
``rtp_ref.platform_tables`` and ``rtp_ref.conformance`` so `rtp-ref certify` works when installed.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rtp_ref", "rtp_ref.*"]), "rtp_ref.platform_tables", "rtp_ref.conformance"],
    package_dir={"rtp_ref.platform_tables": "platforms", "rtp_ref.conformance": "conformance"},
)
