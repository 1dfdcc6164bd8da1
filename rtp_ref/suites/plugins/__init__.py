"""The plugins behaviour suite: its kit, helpers, fixtures and test modules, and the emulations of rtp-llm's
registry and loader (main, and PR #1266) with their adapters."""
