"""Queues and projects as records.  Plain data; defined and folded by ``xce.model.catalog``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Queue:
    name: str
    priority: int
    description: str = ""


@dataclass
class Project:
    name: str
    description: str = ""
