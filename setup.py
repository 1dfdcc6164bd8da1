"""Package discovery that pyproject.toml cannot express on its own.

The platform tables live at the repository root (``platforms/``) where engine developers look for
them; the wheel ships them as the data package ``rtp_ref.platform_tables``.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["rtp_ref", "rtp_ref.*"]), "rtp_ref.platform_tables"],
    package_dir={"rtp_ref.platform_tables": "platforms"},
)
