"""Benchmarks: ``python -m bench`` (see bench/embedded_throughput.py)."""
