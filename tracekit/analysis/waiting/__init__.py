"""Stage 3, waiting: why the GPU was idle inside each step.

Takes the trace and the steps table; gives ``IdleCauses`` (``idle``: every idle interval of a
step attributed to what the launching host thread was doing then, read by ``host``), on the
interval arithmetic that segmentation shares (``intervals``).
"""
