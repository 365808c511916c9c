"""Finetune / experience replay: the base schedule with the run's memory policy (random by
default). The reference point every other method is measured against."""

from __future__ import annotations

from .base import Method


class Finetune(Method):
    name = "finetune"
    default_memory_policy = "random"
