"""One module per reproduced figure; see :mod:`tiered_kv.viz.report` for the contract."""
