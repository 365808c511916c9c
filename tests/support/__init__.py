"""Helpers the tests import (`from support import tui_store`, `from support.campaign import claim`)."""
