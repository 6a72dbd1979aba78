"""pytest-torch-ci: failures readable in CI.

The plugin (:mod:`.plugin`) is wiring only; the work is in :mod:`.failures` (what a
failed test phase leaves in its report), :mod:`.heatmaps` (pictures of mismatches),
:mod:`.artifacts` (where they and the tensors are saved), :mod:`.notes` (what could not
be done, under the failure), :mod:`.annotations` and :mod:`.github` (GitHub annotations
and job summary), :mod:`.html_report` (pytest-html extras) and :mod:`.report_tables`
(the tables the other plugins offer). Nothing here imports torch or matplotlib.
"""

#: no public names at ``pytest_torch``: the plugin works through options and markers
EXPORTS: dict[str, str] = {}
__all__: list[str] = []
