"""Wire adapters: one per API the proxy speaks."""
