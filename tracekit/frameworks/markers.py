"""tracekit's own phase markers (the grammar lives in ``tracekit.markers``, the contract
between ``collect`` and analysis): the strongest source, the whole truth when present."""

from __future__ import annotations

from tracekit import markers
from tracekit.frameworks.base import DECODE, PREFILL, BatchSide, StepAnnotation

SOURCE = "tracekit markers"


def is_ours(name: str) -> bool:
    return name.startswith(markers.PREFIX)


def parse(name: str) -> StepAnnotation | None:
    """The step a ``tracekit::prefill`` / ``tracekit::decode#N`` marker describes; None otherwise
    (``tracekit::generate`` and names that are not ours)."""
    m = markers.parse(name)
    if m is None or m.phase not in (PREFILL, DECODE):
        return None
    tokens = m.tokens if m.tokens is not None else (m.batch if m.phase == DECODE else None)
    kv = m.kv_tokens if m.kv_tokens is not None else (tokens if m.phase == PREFILL else None)
    sum_q2 = None
    if m.phase == PREFILL and m.batch and tokens is not None and tokens % m.batch == 0:
        # tracekit's own prefills hold sequences of one length.
        sum_q2 = m.batch * (tokens // m.batch) ** 2
    side = BatchSide(
        requests=m.batch,
        tokens=tokens,
        kv_tokens=kv,
        sum_q2=sum_q2,
        sum_qk=sum_q2 if m.phase == PREFILL and kv == tokens else None,
    )
    return StepAnnotation(
        m.phase,
        SOURCE,
        f"marker {name!r}",
        prefill=side if m.phase == PREFILL else None,
        decode=side if m.phase == DECODE else None,
        tokens=tokens,
        batch=m.batch,
    )
