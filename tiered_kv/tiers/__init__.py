"""The three cache tiers: GPU (in-flight), host (per-machine sliding windows), SSD (global KV)."""
