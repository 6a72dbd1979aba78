"""Measurement engines: how long a call takes, on a machine that other processes share.

Today one engine, the wall clock: ``calls`` turns a model or a callable into a call to
measure (its device, its thread count), ``timing`` samples it, ``machine_probes`` reads
the machine around every sample and ``contention`` says what the interference cost,
and ``settling`` decides a verdict from repeated measurements in proportion to it.
Imports nothing: each engine imports torch where it measures.
"""
