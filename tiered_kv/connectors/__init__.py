"""Real serving engines on the tiers: vLLM storing and loading its KV through the SSD tier.

The engine itself (vLLM's CPU build, or the CUDA build) lives in its own venv
(``scripts/setup_engine.sh``, ``make engine``) because its pins are not the workbench's.
Modules that import vLLM run only there: :mod:`.vllm` (the ``KVConnectorBase_V1``) and
:mod:`.engine_worker` (a JSON-lines server around one ``vllm.LLM``). The rest import no vLLM
and run in either venv: :mod:`.settings` (the connector's frozen config), :mod:`.cpu_layout` (K and V out of
the CPU backend's per-(block, head) tiles), :mod:`.blocks` (engine blocks <-> the tier's
``[tokens, 2, heads, head_dim]`` KV), :mod:`.capture` (the trace the simulator reads),
:mod:`.tiny_model` (a random Llama saved to disk: no download) and :mod:`.client` (the main venv's
handle on an engine-venv process). Two more run in the main venv: :mod:`.parity` (the simulator's
prediction for a capture) and :mod:`.tour` (notebook 08's steps).
"""
