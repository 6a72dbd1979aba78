"""Measurement engines: how long a call takes, on a machine that other processes share,
and how many instructions it executes, which no other process changes.

The wall clock: ``calls`` turns a model or a callable into a call to measure (its
device, its thread count), ``timing`` samples it, ``machine_probes`` reads the machine
around every sample and ``contention`` says what the interference cost, and
``settling`` decides a verdict from repeated measurements in proportion to it.
Instruction counts: ``valgrind`` runs the session under Callgrind, ``client_requests``
switches Callgrind on and off around a call, ``instructions`` counts one call (through
``calls`` too) and ``callgrind_output`` reads what Callgrind wrote.
Imports nothing: each engine imports torch where it measures.
"""
