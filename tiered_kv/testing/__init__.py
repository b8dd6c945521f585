"""Reusable test suites and fakes (for example the shared store suite every SSD backend must pass)."""
