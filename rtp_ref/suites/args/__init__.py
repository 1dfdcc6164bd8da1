"""The args behaviour suite: its kit, helpers, fixtures and test modules, and the emulation of rtp-llm's parser."""
