"""Byte units, named once for every package (sizes are shown in binary units: MiB)."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30
