"""2. One folder per API the proxy speaks (pure), with the same module names for the same roles.

`chat/`, `responses/`, `messages/`: adapter, to_neutral / from_neutral, bodies, reply, stream,
whole, tool where the API has them; shared: `base` (the Wire protocol), `sse`, `usage` (one
sum of usage over rounds, a field table per API), `refusal` (length refusals, a table of
providers' wordings), `summary` (the summary POST), `apis` (the adapters by name),
`neutral_reuse`, `provider_compaction`.
"""
