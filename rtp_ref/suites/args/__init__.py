"""The args behaviour suite: its kit, helpers, fixtures and test modules, and the emulations of rtp-llm's parser and
generator (main, and PR #1266) with their adapters."""
