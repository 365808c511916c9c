"""The science: datasets, streams, models, augmentation, memory, methods, metrics, the protocol loop.

Nothing in this package knows about the store, the CLI or the TUI.
"""
