"""Benchmark harnesses and the deterministic data sets they run on."""
