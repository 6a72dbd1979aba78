"""FLOP counting (``--torch-perf-measure=flops`` and ``@pytest.mark.torch_max_flops``):
``counting`` runs a call (or a test body) under torch's ``FlopCounterMode`` and says,
besides the FLOPs per module and per aten op, which ops that do matrix, convolution or
attention work ran without a FLOP formula, so a count is never short without saying
so; ``judging`` compares counts with their baselines and budgets (no measuring, testable
with made-up counts); ``engine`` is the measurement engine that joins them to perf's
checks. Counts are exact: no repeats, no machine noise, the same on any device that
runs the same ops."""
