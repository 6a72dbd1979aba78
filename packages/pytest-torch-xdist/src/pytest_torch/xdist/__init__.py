"""pytest-torch-xdist: GPUs and CPU cores shared fairly by pytest-xdist workers.

The plugin works through options and markers; its engines are :mod:`.workers` (what
each process gets), :mod:`.threads`, :mod:`.gpus` and :mod:`.locks`. Nothing here
imports torch.
"""

#: no public names at ``pytest_torch``: the plugin works through options and markers
EXPORTS: dict[str, str] = {}
__all__: list[str] = []
