"""torch.compile health: what dynamo compiled, recompiled and broke while code ran
(``watch``), read for a person (``graph_breaks``: the user's line, torch's reason and
the fix; ``recompiles``: why a function compiled again and what stops it), judged
(``checks``: ``assert_no_graph_breaks``, the compile budget, its record and table) and
run around a test body marked ``torch_compile_budget`` (``runner``).
Imports nothing: torch is imported where code is compiled.
"""
