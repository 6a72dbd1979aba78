"""perf's per-test checks, one module each, each a ``core.checks.Check`` that declares
its marker, the fixture it needs, what it does around the test body and whether it can
act on a unittest.TestCase method; ``plugin`` lists them in one ``core.checks.Checks``.
Imports nothing."""
