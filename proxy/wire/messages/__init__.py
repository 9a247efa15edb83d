"""Anthropic's Messages API on the wire: blocks to neutral messages and back, bodies, replies,
streams."""
