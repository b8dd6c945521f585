"""The plug-in example of docs/policies.md (MRU), used by notebooks/07_policy_arena.ipynb."""

from tiered_kv.sim.policies import PluginPolicy, register_policy


@register_policy
class MRU(PluginPolicy):
    """Evict the most recently used block: good for loops larger than the cache."""

    name = "mru-example"

    def reset(self, capacity_blocks):
        self.order = {}  # block -> None, least recent first (dicts keep insertion order)

    def lookup(self, block):
        return block in self.order

    def touch(self, block):
        del self.order[block]
        self.order[block] = None

    def insert(self, block):
        self.order[block] = None

    def evict(self):
        block, _ = self.order.popitem()  # the most recent
        return block
