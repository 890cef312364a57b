"""Benchmarks: each `bench/bench_<name>.py` measures one target against a naive baseline in the
same run. `make bench` (or `python -m bench [name ...]`) runs them and rewrites docs/benchmarks.md.
"""
