"""Benchmark suites: one model over batch sizes x dtypes x modes x devices. ``cases``
declares a suite (``@benchmark_suite``), makes its cases and runs the steps of one;
``runner`` puts a case in a pytest run (one test per case, measured in place of the
function's body); ``report`` turns the results into tables, a JSON file and plots.
Imports nothing: torch is imported when a case runs.
"""
