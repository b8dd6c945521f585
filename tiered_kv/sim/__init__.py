"""Trace-driven simulation: traces, one-pass curves, policies, cluster and latency models."""
