"""Step replay: each step as a dependency graph with the trace's own durations, run forward
unchanged (it must reproduce the measured step) and under what-ifs (what each fix would save)."""
