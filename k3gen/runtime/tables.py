"""Which tuning table serves a GPU: the row of a family's picks that a call passes to its variant unit.

Each variant unit of a tuned family compiles a row of picks per device's table
(specs/tuning/<family>.<device>.yaml, k3gen.plan.tuning), and reads the row from Args. The row is the
table named by the GPU's short name (k3gen.runtime.devices.device_slug of torch.cuda.get_device_name,
the name `k3gen tune` gives the file), else the table the spec declares as `tuning.fallback`, else
none (-1: the spec's default config). Asking the driver for a name is slow, so each device is asked
once; its first call logs one line saying which table serves it (a warning where it is not the GPU's
own, a fallback's picks or the default config, or where its own leaves variants untuned).
"""

from __future__ import annotations

import logging
import threading

import torch

from .devices import device_slug

log = logging.getLogger("k3gen")
NO_ROW = -1  # no table serves the device: the variant units run the spec's default config


class DeviceTables:
    """One family's tables, device -> file in row order, and the device that serves the others."""

    def __init__(
        self, family: str, tables: dict[str, str], fallback: str | None = None, untuned: dict[str, str] | None = None
    ):
        self.family, self.tables, self.fallback = family, dict(tables), fallback
        self.untuned = dict(untuned or {})  # device -> what the variants its table has no pick for run there
        self.devices = list(self.tables)
        self._rows: dict[object, int] = {}  # a call's device (a torch.device with its index) -> row
        self._by_gpu: dict[tuple[str, int], int] = {}  # (type, index) -> row, asked and logged once
        self._lock = threading.Lock()

    def row(self, device) -> int:
        """The row of `device`'s table (NO_ROW: none serves it); the first call per GPU logs which."""
        row = self._rows.get(device)
        return row if row is not None else self._first(device)

    def _first(self, device) -> int:
        d = torch.device(device)
        index = d.index if d.index is not None else torch.cuda.current_device()
        with self._lock:
            row = self._by_gpu.get((d.type, index))
            if row is None:
                row, line, own = self.serves(torch.cuda.get_device_name(index))
                # Picks measured on this GPU are the expected case; any other is said where it is seen.
                (log.info if own else log.warning)("k3gen: %s", line)
                self._by_gpu[(d.type, index)] = row
            if d.index is not None:  # "cuda" alone is whichever device is current: asked each time
                self._rows[device] = row
        return row

    def serves(self, name: str) -> tuple[int, str, bool]:
        """(row, the line that says so, whether the GPU's own table serves) for the GPU torch names `name`."""
        own = device_slug(name)
        head = f"{self.family} on {name}"
        if own in self.tables:
            if own in self.untuned:  # its own table, stale or short for some variants: said as a warning
                return self.devices.index(own), f"{head}: {self.tables[own]}; {self.untuned[own]}", False
            return self.devices.index(own), f"{head}: {self.tables[own]}", True
        if self.fallback in self.tables:
            used = self.tables[self.fallback]
            line = f"{head}: no {own} table; the {self.fallback} table (the spec's fallback), {used}"
            return self.devices.index(self.fallback), line, False
        there = f" (tables: {', '.join(self.devices)})" if self.devices else ""
        return NO_ROW, f"{head}: no table for {own}{there}; the spec's default config", False
