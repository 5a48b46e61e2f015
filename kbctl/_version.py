"""kbctl's version, in a module of its own so that anything can import it without importing the package."""

__version__ = "0.1.0"
