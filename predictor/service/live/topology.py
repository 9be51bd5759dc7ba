"""The cluster's topology: which host and rack each device is on, and the links between them.

A batch's input lives somewhere (a host, or already on a device); placing the batch on a
device first moves the input over the **link class** between the two, nearest first:

* ``device``: the input is already on the device;
* ``host``: another device of the same host (PCIe, NVLink);
* ``rack``: another host of the same rack (top-of-rack switch);
* ``remote``: another rack, or a place the topology does not know (the farthest is assumed).

Each class has a bandwidth (GB/s, 1e9 bytes per second) and a latency (ms): moving ``b``
bytes takes ``latency_ms + b / (bandwidth_gb_s * 1e6)`` ms. A farther link is never faster:
bandwidths must not grow and latencies must not shrink with distance.

The topology is read from a TOML or JSON file (``predictor serve --topology FILE``)::

    [links.host]              # every class optional: the defaults below
    bandwidth_gb_s = 16.0
    latency_ms = 0.01
    [links.remote]
    bandwidth_gb_s = 1.25
    latency_ms = 0.2

    [hosts.h0]                # a host's rack (optional: a device may give its rack)
    rack = "r0"

    [devices.gpu0]
    host = "h0"               # required
    [devices.gpu4]
    host = "h1"
    rack = "r1"

A field that breaks the rules is reported as a :class:`TopologyError` naming the field and
the line it is on.

Examples
--------
>>> topology = parse_topology('''
... [hosts.h0]
... rack = "r0"
... [devices.gpu0]
... host = "h0"
... [devices.gpu1]
... host = "h0"
... [devices.gpu2]
... host = "h1"
... rack = "r0"
... ''', "toml")
>>> [topology.link_class(d, input_host="h0") for d in ("gpu0", "gpu2", "gpu9")]
['host', 'rack', 'remote']
>>> topology.link_class("gpu1", input_device="gpu1")
'device'
>>> round(topology.links["rack"].time_ms(10e6), 3)  # 10 MB over 3.125 GB/s, plus 0.05 ms
3.25
>>> parse_topology('[devices.gpu0]\\nhost = ""\\n', "toml")
Traceback (most recent call last):
...
predictor.service.live.topology.TopologyError: line 2: devices.gpu0.host: must be a non-empty string, got ''
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from predictor.records import rules
from predictor.records.rules import RecordError

LINK_CLASSES = ("device", "host", "rack", "remote")
"""The link classes, nearest first."""


MIN_BANDWIDTH_GB_S = 1e-6
"""Slowest link a topology may give (1 kB/s): a transfer time stays finite."""


class TopologyError(RecordError):
    """A topology file field that breaks the rules (its path, what is wrong, and its line)."""


@dataclass(frozen=True, slots=True)
class Link:
    """One link class: bandwidth in GB/s (``inf``: free) and latency in ms."""

    bandwidth_gb_s: float
    latency_ms: float

    def time_ms(self, n_bytes: float) -> float:
        """Time to move ``n_bytes`` over the link, ms."""
        if n_bytes <= 0:
            return 0.0 if math.isinf(self.bandwidth_gb_s) else self.latency_ms
        return self.latency_ms + n_bytes / (self.bandwidth_gb_s * 1e6)


DEFAULT_LINKS: Mapping[str, Link] = MappingProxyType({
    "device": Link(math.inf, 0.0),
    "host": Link(16.0, 0.01),
    "rack": Link(3.125, 0.05),
    "remote": Link(1.25, 0.2),
})
"""The links of a topology file that gives none: local, PCIe 4 x16, 25 GbE, 10 GbE."""


@dataclass(frozen=True)
class Topology:
    """Devices' hosts and racks, and the link classes between places.

    Parameters
    ----------
    devices
        Device name to ``(host, rack)``; the rack is ``""`` when unknown.
    hosts
        Host name to its rack.
    links
        Link class (:data:`LINK_CLASSES`) to its :class:`Link`.
    """

    devices: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    hosts: Mapping[str, str] = field(default_factory=dict)
    links: Mapping[str, Link] = field(default_factory=lambda: DEFAULT_LINKS)

    def link_class(self, device: str, input_host: str = "", input_device: str = "") -> str:
        """The link class from where the input is (a host, or a device) to ``device``.

        A place the topology does not know is taken as the farthest (``remote``)."""
        if input_device and input_device == device:
            return "device"
        place = self.devices.get(device)
        if place is None:
            return "remote"
        host = input_host or self.devices.get(input_device, ("", ""))[0]
        if not host:
            return "remote"
        if host == place[0]:
            return "host"
        rack = self.hosts.get(host) or next((r for h, r in self.devices.values() if h == host and r), "")
        return "rack" if rack and rack == place[1] else "remote"

    def time_ms(self, link: str, n_bytes: float) -> float:
        """Nominal time to move ``n_bytes`` over link class ``link``, ms."""
        return self.links[link].time_ms(n_bytes)


# --------------------------------------------------------------------------- reading


def load_topology(path: str | Path) -> Topology:
    """Read a topology file (TOML, or JSON for a ``.json`` name); raises :class:`TopologyError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TopologyError("topology", f"cannot read {path}: {exc}") from None
    return parse_topology(text, "json" if path.suffix.lower() == ".json" else "toml")


def parse_topology(text: str, fmt: str = "toml") -> Topology:
    """A topology from the text of a TOML or JSON file; raises :class:`TopologyError`."""
    try:
        if fmt == "json":
            data = json.loads(text)
        else:
            data = tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise TopologyError("topology", f"not JSON: {exc.msg}", exc.lineno) from None
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"line (\d+)", str(exc))
        raise TopologyError("topology", f"not TOML: {exc}", int(found.group(1)) if found else None) from None
    try:
        return _topology(data)
    except RecordError as exc:
        raise TopologyError(exc.field, exc.message, _line_of(text, exc.field)) from None


def _topology(data: Any) -> Topology:
    data = rules.require_mapping(data, "topology")
    for key in data:
        if key not in ("links", "hosts", "devices"):
            raise RecordError(str(key), "unknown section (links, hosts, devices)")
    links = dict(DEFAULT_LINKS)
    for name, value in rules.require_mapping(data.get("links", {}), "links").items():
        path = f"links.{name}"
        if name not in LINK_CLASSES:
            raise RecordError(path, f"unknown link class (one of {', '.join(LINK_CLASSES)})")
        value = rules.require_mapping(value, path)
        for key in value:
            if key not in ("bandwidth_gb_s", "latency_ms"):
                raise RecordError(f"{path}.{key}", "unknown field (bandwidth_gb_s, latency_ms)")
        default = DEFAULT_LINKS[name]
        bandwidth = default.bandwidth_gb_s
        if "bandwidth_gb_s" in value:
            bandwidth = rules.positive(value["bandwidth_gb_s"], f"{path}.bandwidth_gb_s")
            if not MIN_BANDWIDTH_GB_S <= bandwidth <= rules.MAX_MAGNITUDE:
                raise RecordError(f"{path}.bandwidth_gb_s",
                                  f"must lie in [{MIN_BANDWIDTH_GB_S:g}, {rules.MAX_MAGNITUDE:g}] GB/s, got {bandwidth:g}")
        latency = default.latency_ms
        if "latency_ms" in value:
            latency = rules.non_negative_within(rules.number(value["latency_ms"], f"{path}.latency_ms"),
                                                f"{path}.latency_ms")
        links[name] = Link(bandwidth, latency)
    for near, far in zip(LINK_CLASSES, LINK_CLASSES[1:], strict=False):
        if links[far].bandwidth_gb_s > links[near].bandwidth_gb_s:
            raise RecordError(f"links.{far}.bandwidth_gb_s",
                              f"{links[far].bandwidth_gb_s:g} exceeds links.{near} ({links[near].bandwidth_gb_s:g}): "
                              "a farther link is never faster")
        if links[far].latency_ms < links[near].latency_ms:
            raise RecordError(f"links.{far}.latency_ms",
                              f"{links[far].latency_ms:g} is below links.{near} ({links[near].latency_ms:g}): "
                              "a farther link is never quicker")
    hosts: dict[str, str] = {}
    for name, value in rules.require_mapping(data.get("hosts", {}), "hosts").items():
        path = f"hosts.{name}"
        rules.name(name, path)
        value = rules.require_mapping(value, path)
        for key in value:
            if key != "rack":
                raise RecordError(f"{path}.{key}", "unknown field (rack)")
        hosts[name] = rules.name(value.get("rack"), f"{path}.rack")
    devices: dict[str, tuple[str, str]] = {}
    for name, value in rules.require_mapping(data.get("devices", {}), "devices").items():
        path = f"devices.{name}"
        rules.name(name, path)
        value = rules.require_mapping(value, path)
        for key in value:
            if key not in ("host", "rack"):
                raise RecordError(f"{path}.{key}", "unknown field (host, rack)")
        host = rules.name(value.get("host"), f"{path}.host")
        rack = rules.name(value.get("rack"), f"{path}.rack", required=False)
        if rack and host in hosts and hosts[host] != rack:
            raise RecordError(f"{path}.rack", f"{rack!r}, but hosts.{host}.rack is {hosts[host]!r}")
        devices[name] = (host, rack or hosts.get(host, ""))
    racks: dict[str, str] = dict(hosts)
    for name, (host, rack) in devices.items():
        if rack and racks.setdefault(host, rack) != rack:
            raise RecordError(f"devices.{name}.rack", f"{rack!r}, but another device of host {host!r} "
                                                      f"is in rack {racks[host]!r}")
    return Topology(MappingProxyType(devices), MappingProxyType(racks), MappingProxyType(links))


def _line_of(text: str, path: str) -> int | None:
    """The line (1-based) where the field ``path`` (``devices.gpu0.host``) is written, found by
    looking for each part of the path in turn, from the line of the part before."""
    lines = text.splitlines()
    at: int | None = None
    start = 0
    for part in path.split("."):
        pattern = re.compile(rf"(?<![\w-]){re.escape(part)}(?![\w-])")
        found = next((i for i in range(start, len(lines)) if pattern.search(lines[i])), None)
        if found is None:
            break
        at = start = found
    return None if at is None else at + 1
