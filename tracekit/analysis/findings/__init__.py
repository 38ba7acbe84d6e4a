"""Stage 4, findings: plain sentences from a finished ``Analysis``.

Takes an ``Analysis``; gives ``Finding`` lists: documented thresholds (``rules``) and advice that
names a cause, a thing to try and the time at stake (``advice``).
"""
