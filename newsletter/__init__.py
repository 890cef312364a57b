"""newsletter: a self-hosted daily digest of trending research papers, per subscriber topic."""

__version__ = "0.1.0"
