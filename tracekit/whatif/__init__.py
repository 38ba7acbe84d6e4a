"""What-if questions on whole analyses: another GPU, another deployment.

Builds on ``tracekit.analysis``, never the other way: ``project`` re-prices a measured run on
another GPU's roofline, ``check`` puts a projection beside a trace measured on that GPU, and
``plan`` sizes a colocated or disaggregated deployment from the run's fitted phase costs.
"""
