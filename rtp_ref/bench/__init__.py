"""Benchmarks: kernel bandwidth as a fraction of a device copy measured in the same run."""
