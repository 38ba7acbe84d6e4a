"""What an engine's step annotation says about one step, as plain values.

Every engine module (``vllm``, ``sglang``, ``markers``, ``pytorch``, ``user``) parses
its own grammar into these types; segmentation only ever sees these, never an
engine's strings.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

PREFILL, DECODE, MIXED, UNKNOWN = "prefill", "decode", "mixed", "unknown"


@dataclass(frozen=True)
class BatchSide:
    """One phase's part of a step's batch, as far as the annotation states it.

    ``tokens`` are the query (new) tokens the step computes for these requests;
    ``kv_tokens`` the keys they attend to, summed over requests (context including
    the new tokens); ``sum_q2`` and ``sum_qk`` the sums over requests of q_i^2 and
    q_i * k_i that causal attention's work depends on. None: not stated.
    """

    requests: int | None = None
    tokens: int | None = None
    kv_tokens: int | None = None
    sum_q2: int | None = None
    sum_qk: int | None = None

    def attention_pairs(self) -> float | None:
        """Query-key pairs causal attention scores for these requests.

        A request with q new tokens over k keys (k >= q, the q newest) scores
        q*k - q*(q-1)/2 pairs, so the side scores sum_qk - (sum_q2 - tokens) / 2. Without
        sum_qk the requests are taken to have no cached prefix (k = q). A decode side
        (one query per request) scores one pair per key: kv_tokens.
        """
        if self.requests == 0 or self.tokens == 0:
            return 0.0
        if self.sum_qk is not None and self.sum_q2 is not None and self.tokens is not None:
            return float(self.sum_qk - (self.sum_q2 - self.tokens) / 2)
        if self.sum_q2 is not None and self.tokens is not None:
            return float((self.sum_q2 + self.tokens) / 2)
        if (
            self.kv_tokens is not None
            and self.tokens is not None
            and self.requests is not None
            and self.tokens == self.requests
        ):
            return float(self.kv_tokens)
        return None

    def merged(self, other: BatchSide | None) -> BatchSide:
        """Fields this side lacks, filled from ``other`` (two annotations of one step)."""
        if other is None:
            return self
        return replace(
            self,
            **{
                f.name: getattr(other, f.name)
                for f in fields(self)
                if getattr(self, f.name) is None and getattr(other, f.name) is not None
            },
        )

    def to_dict(self) -> dict[str, int | None]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class StepAnnotation:
    """A step range's phase and batch, as its annotation states them."""

    phase: str  # PREFILL, DECODE, MIXED or UNKNOWN (a malformed but recognisable annotation)
    source: str  # which grammar: one of the SOURCE_* names in ``tracekit.frameworks``
    evidence: str  # a sentence for the report
    prefill: BatchSide | None = None
    decode: BatchSide | None = None
    tokens: int | None = None  # all tokens the step computes
    batch: int | None = None  # requests in the step
    # Set when part of the name did not parse: the report shows it as a note.
    problem: str | None = None


def consistent(side: BatchSide, what: str, problems: list[str]) -> BatchSide:
    """``side`` less the counts that contradict each other, with a note in ``problems`` naming
    them. Shared by every engine whose annotation states the sums (vLLM's detailed
    ``execute_...``, SGLang's roofline ``step[...]`` fields, ATOM's detailed labels).

    The bounds hold for any batch of n requests, request i with q_i >= 1 new tokens over
    k_i >= q_i keys (Q = Σq, K = Σk):

    - Q >= n, K >= Q;
    - Σq² has Q's parity (q² - q = q(q-1) is even); Σq² >= Q (q² >= q); Σq² >= Q²/n
      (Cauchy-Schwarz, requests of one length); Σq² <= (Q - n + 1)² + n - 1 (every request
      but one at a single token, the most uneven split), so a decode side (Q = n) has Σq² = n;
      without n, Σq² <= Q²;
    - Σqk >= Σq² (k >= q) and Σqk >= K (q >= 1); Σqk <= (Q - n + 1)(K - n + 1) + n - 1: with
      a = q - 1 and b = k - 1, both >= 0, Σqk = Σab + (Q - n) + (K - n) + n and
      Σab <= Σa·Σb = (Q - n)(K - n); without n, Σqk <= Q·K.
    """
    bad = []
    q, n, k = side.tokens, side.requests, side.kv_tokens
    if q is not None and n and q < n:
        bad.append("tokens")
        q = None
    if side.sum_q2 is not None and q is not None:
        s2 = side.sum_q2
        most = (q - n + 1) ** 2 + n - 1 if n else q * q
        if s2 < q or s2 > most or (s2 - q) % 2 or (n and s2 * n < q * q):
            bad.append("sum_q2")
    if k is not None and q is not None and k < q:
        bad.append("kv_tokens")
        k = None
    if side.sum_qk is not None:
        s = side.sum_qk
        q2 = None if "sum_q2" in bad else side.sum_q2
        qk_most = None
        if q is not None and k is not None:
            qk_most = (q - n + 1) * (k - n + 1) + n - 1 if n else q * k
        if (q2 is not None and s < q2) or (k is not None and s < k) or (qk_most is not None and s > qk_most):
            bad.append("sum_qk")
    if not bad:
        return side
    problems.append(f"its {what} counts contradict each other ({', '.join(bad)} ignored)")
    return BatchSide(**{f: (None if f in bad else v) for f, v in side.to_dict().items()})


def sides_total(prefill: BatchSide | None, decode: BatchSide | None) -> tuple[int | None, int | None]:
    """(tokens, requests) of a step from its two sides; None where a side leaves it unknown."""
    parts = [s for s in (prefill, decode) if s is not None]
    if not parts:
        return None, None
    return known_sum([s.tokens for s in parts]), known_sum([s.requests for s in parts])


def known_sum(values: list[int | None]) -> int | None:
    """The sum of ``values``; None if any of them is unknown."""
    known = [v for v in values if v is not None]
    return sum(known) if len(known) == len(values) else None


def phase_of(prefill: BatchSide | None, decode: BatchSide | None) -> str | None:
    """PREFILL, DECODE or MIXED from which sides hold requests; None when neither does."""
    has_p = prefill is not None and (prefill.requests or 0) > 0
    has_d = decode is not None and (decode.requests or 0) > 0
    if has_p and has_d:
        return MIXED
    if has_p:
        return PREFILL
    if has_d:
        return DECODE
    return None
