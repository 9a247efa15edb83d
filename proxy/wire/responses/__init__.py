"""The Responses API on the wire (stateless mode): items to neutral messages and back, bodies,
replies, streams."""
