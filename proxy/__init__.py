"""xun-proxy: a transparent OpenAI-compatible proxy that compacts long agent sessions."""

__version__ = "0.1.0"
