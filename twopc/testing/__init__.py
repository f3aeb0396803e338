"""Test support shipped with twopc: helpers that tests, benchmarks and the demo share (no fakes here)."""
