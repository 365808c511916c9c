"""rmconsole: a terminal experiment console for continual learning around Rainbow Memory."""

__version__ = "0.1.0"
