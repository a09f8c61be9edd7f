"""Sites: where the toolkit reads and edits a model, named once (vocabulary), placed per
architecture family (adapters), resolved for one loaded model (SiteMap).

    from evprobe.hooks.sites import Site, Adapter, register_adapter
    handle.sites.point("attn_head.L3.H2")     # the module and port the intervention core hooks
"""

from evprobe.hooks.sites.adapter import Adapter, adapter_named, register_adapter, registered_adapters
from evprobe.hooks.sites.resolve import HookPoint, SiteMap, site_map
from evprobe.hooks.sites.vocabulary import SITE_KINDS, Site, SiteKind

__all__ = ["SITE_KINDS", "Adapter", "HookPoint", "Site", "SiteKind", "SiteMap", "adapter_named",
           "register_adapter", "registered_adapters", "site_map"]
