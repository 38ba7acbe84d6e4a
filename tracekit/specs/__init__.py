"""The GPU peak database and the lookup from a trace's ``deviceProperties``.

- ``database``: the data file shipped in the package (``gpus.json``, format documented there)
  and user spec files.
- ``model``: ``GpuSpec``, peaks per dtype and unit in SI units, achievable ceilings.
- ``lookup``: which row a trace ran on (exact name, normalised name, MIG slice, generic-name
  fallback, ``--gpu``, spec file), or why none.
- ``measured``: ceilings measured by ``tracekit collect`` (CPU peaks, GPU achievable ceilings).

Typical use::

    match = lookup(trace.devices[0], gpu=options.gpu, spec_file=options.spec_file)
    if match.spec is None:
        print(match.reason)          # roofline columns absent, with this reason
    else:
        match.spec.peak_flops("c10::BFloat16", "matrix"), match.spec.peak_bandwidth
"""

from tracekit.specs.database import all_specs, cpu_entry, load_spec_file
from tracekit.specs.lookup import SpecMatch, lookup, match_device, normalise_name, spec_by_name
from tracekit.specs.measured import cpu_lookup, cpu_spec_from_sidecar, measured_spec, with_calibration
from tracekit.specs.model import DTYPES, UNITS, GpuSpec, normalise_dtype

__all__ = [
    "DTYPES",
    "UNITS",
    "GpuSpec",
    "SpecMatch",
    "all_specs",
    "cpu_lookup",
    "cpu_spec_from_sidecar",
    "cpu_entry",
    "load_spec_file",
    "lookup",
    "match_device",
    "measured_spec",
    "normalise_dtype",
    "normalise_name",
    "spec_by_name",
    "with_calibration",
]
