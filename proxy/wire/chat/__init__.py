"""Chat Completions on the wire: the identity case of the neutral conversation; replies,
streams, shape checks."""
