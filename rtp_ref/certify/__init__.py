"""Certification: grade kernel output against the reference, and turn results into reports."""
