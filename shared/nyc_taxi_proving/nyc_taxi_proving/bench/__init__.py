"""Benchmarks: commands that print comparable figures (ratios against a reference in the same run)."""
