"""torch.compile health: what dynamo compiled, recompiled and broke while code ran
(``watch``), read for a person (``graph_breaks``: the user's line, torch's reason and
the fix; ``recompiles``: why a function compiled again and what stops it), judged
(``checks``: ``assert_no_graph_breaks``, the compile budget, its record and table);
the marker ``torch_compile_budget`` around a test body is ``perf.checks.compile_budget``.
Imports nothing: torch is imported where code is compiled.
"""
