"""pytest-torch-ci: failures readable in CI.

The plugin works through options; the engines are :mod:`.heatmaps` (pictures of
mismatches) and :mod:`.artifacts` (where they and the tensors are saved). Nothing here
imports torch or matplotlib.
"""
