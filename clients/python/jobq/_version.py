"""The library's version."""

__version__ = "0.3.7"
