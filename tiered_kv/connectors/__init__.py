"""Real serving engines on the tiers: vLLM storing and loading its KV through the SSD tier.

vLLM (its CPU build, or the CUDA build) lives in its own venv (``scripts/setup_engine.sh``,
``make engine``) because its pins are not the workbench's. Only :mod:`.vllm` (the
``KVConnectorBase_V1``) and :mod:`.engine_worker` (a JSON-lines server around one ``vllm.LLM``)
import it and run only there; the main venv drives an engine through :mod:`.client`. The other
modules import no vLLM: :mod:`.settings`, :mod:`.cpu_layout`, :mod:`.blocks` and :mod:`.capture`
run in either venv (the connector imports them), while :mod:`.parity` (the simulator) and
:mod:`.tour` (polars) need the main venv.
"""
