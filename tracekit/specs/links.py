"""Scale-up links between GPUs: what a tensor-parallel group of N GPUs actually has.

The data is ``links.json`` (beside ``gpus.json``; its ``about`` says the format): per link type a
bandwidth per link per direction and a latency per collective step, per collective library a
start-up latency, and per GPU row its topology. ``group_link(spec, n)`` answers the one question
a collective model asks: over how many bytes/s per direction, and with what latencies, does one
rank of an N-GPU group talk to the others?

- ``switch`` (NVSwitch, NVLink switch trays): every GPU reaches every other at its full link
  bandwidth, whatever N, because the switches carry all of its links to any peer.
- ``mesh`` (AMD's fully connected xGMI platforms): one link per peer, so a group of N reaches
  N - 1 peers over N - 1 links. An MI300X TP4 group has 3 x 64 = 192 GB/s per direction, not the
  448 GB/s of all seven links of the node (issue 49).
- ``bridge``: a bridge joins up to ``bridge_peers`` + 1 cards at its links' bandwidth; a larger
  group falls back to its PCIe link (the slowest hop bounds a ring).
- ``pcie``: the card's x16 link to the host's root complex or switch.

A row without a topology (a user spec file, a CPU) has none: ``group_link`` returns None and
says why, and a caller keeps the collectives as measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from tracekit.specs.model import GIGA, GpuSpec

DATA_FILE = "links.json"
FORMAT = "tracekit-links"
VERSION = 1
TOPOLOGIES = ("switch", "mesh", "bridge", "pcie")


@dataclass(frozen=True)
class GroupLink:
    """What one rank of an N-GPU group has: bytes/s per direction to the group, the start-up
    latency of a collective call and the latency of each step over a link (seconds)."""

    gpu: str  # the spec row's key
    ranks: int
    bandwidth: float  # bytes/s per direction
    base_latency: float  # s, per collective call (the library's)
    hop_latency: float  # s, per step of the algorithm
    link: str  # the link type's name
    links_used: int  # links of this type the group's traffic crosses per rank
    links_total: int
    topology: str
    source: str

    def describe(self) -> str:
        """One sentence for a report: which link, how many of them, at what bandwidth."""
        if self.topology == "mesh":
            how = (
                f"{self.links_used} of its {self.links_total} {self.link} links (one per peer: a group of "
                f"{self.ranks} reaches {self.ranks - 1} peers)"
            )
        elif self.topology == "switch":
            how = f"all {self.links_total} {self.link} links through switches (any group size)"
        else:
            how = f"{self.link} ({self.topology})"
        return (
            f"{self.gpu}, TP{self.ranks}: {how}, {self.bandwidth / GIGA:.4g} GB/s per direction, "
            f"{self.base_latency * 1e6:.3g} µs per call + {self.hop_latency * 1e6:.3g} µs per step"
        )

    def to_dict(self) -> dict:
        return {
            "gpu": self.gpu,
            "ranks": self.ranks,
            "bandwidth": self.bandwidth,
            "base_latency_s": self.base_latency,
            "hop_latency_s": self.hop_latency,
            "link": self.link,
            "links_used": self.links_used,
            "links_total": self.links_total,
            "topology": self.topology,
            "description": self.describe(),
            "source": self.source,
        }


def parse(data: dict) -> dict:
    """The document, checked; ValueError names the first bad entry."""
    if (data.get("format"), data.get("version")) != (FORMAT, VERSION):
        raise ValueError(f"not a {FORMAT} version {VERSION} document")
    for key, lib in data["libraries"].items():
        if not (lib.get("base_latency_us", -1) >= 0 and str(lib.get("source", "")).strip()):
            raise ValueError(f"library {key!r} needs base_latency_us >= 0 and a source")
    for key, link in data["links"].items():
        if not (
            link.get("link_GBps", 0) > 0 and link.get("hop_latency_us", -1) >= 0 and str(link.get("source", "")).strip()
        ):
            raise ValueError(f"link {key!r} needs link_GBps > 0, hop_latency_us >= 0 and a source")
    for key, gpu in data["gpus"].items():
        if gpu.get("topology") not in TOPOLOGIES:
            raise ValueError(f"gpu {key!r}: topology must be one of {TOPOLOGIES}")
        for name in (gpu.get("link"), gpu.get("fallback")):
            if name is not None and name not in data["links"]:
                raise ValueError(f"gpu {key!r} names an unknown link {name!r}")
        if gpu.get("library") not in data["libraries"] or not gpu.get("links", 0) >= 1:
            raise ValueError(f"gpu {key!r} needs a known library and links >= 1")
        if not str(gpu.get("source", "")).strip():
            raise ValueError(f"gpu {key!r} needs a source")
    return data


@lru_cache(maxsize=1)
def table() -> dict:
    """tracekit's packaged table (tested; a failure here is a broken install)."""
    return parse(json.loads(resources.files("tracekit.specs").joinpath(DATA_FILE).read_text()))


def topology(spec: GpuSpec) -> dict | None:
    """The row's wiring from ``links.json``, or None (user spec files, CPUs, unknown parts)."""
    return table()["gpus"].get(spec.key)


def group_link(spec: GpuSpec, ranks: int) -> GroupLink | None:
    """What one rank of a group of ``ranks`` GPUs of ``spec`` has; None for one rank or a row
    without a topology."""
    topo = topology(spec)
    if topo is None or ranks < 2:
        return None
    t = table()
    lib = t["libraries"][topo["library"]]
    link_key, kind, n_links = topo["link"], topo["topology"], int(topo["links"])
    if kind == "mesh":
        used = min(ranks - 1, n_links)  # one link per peer; never more links than the GPU has
    elif kind == "bridge" and ranks - 1 > int(topo.get("bridge_peers", 1)):
        # The group spans more cards than a bridge joins: its ring crosses the host link.
        link_key, kind, used, n_links = topo["fallback"], "pcie", 1, 1
    else:
        used = n_links  # switch, pcie, and a bridge within its peers: every link serves the group
    link = t["links"][link_key]
    return GroupLink(
        spec.key,
        ranks,
        used * link["link_GBps"] * GIGA,
        lib["base_latency_us"] * 1e-6,
        link["hop_latency_us"] * 1e-6,
        link["name"],
        used,
        n_links,
        kind,
        f"{topo['source']}; link: {link['source']}; library: {lib['source']}",
    )


def no_link_reason(spec: GpuSpec, ranks: int) -> str | None:
    """Why ``group_link`` is None, as a clause; None when it is not."""
    if ranks < 2:
        return f"a group of {ranks} rank moves nothing across a link"
    if topology(spec) is None:
        return f"{spec.name}'s spec row has no link topology in tracekit's links table"
    return None
