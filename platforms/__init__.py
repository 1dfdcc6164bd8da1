"""Platform tables (one TOML file per target); installed as ``rtp_ref.platform_tables``."""
