# Used by `make lab` (JUPYTER_CONFIG_PATH points here): notebooks are written to disk without
# outputs, so running them never dirties the files git tracks. See tiered_kv/viz/notebooks.py.
c = get_config()  # noqa: F821 - provided by traitlets when it loads this file
c.ContentsManager.pre_save_hook = "tiered_kv.viz.notebooks.pre_save_hook"
