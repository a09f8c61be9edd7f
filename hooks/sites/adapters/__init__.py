"""The built-in architecture adapters, one family per module (hooks.sites.adapter)."""
