"""What-if questions on whole analyses: another GPU, another deployment.

Builds on ``tracekit.analysis``, never the other way: ``project`` projects a measured run onto
another GPU, each kernel re-priced on its roofline by ``reprice``; ``check`` puts a projection
beside a trace measured on that GPU; ``fit`` fits the run's phase costs and ``plan`` sizes a
colocated or disaggregated deployment from them.
"""
