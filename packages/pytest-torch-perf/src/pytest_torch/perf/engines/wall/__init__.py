"""The wall-clock engine's room: a call measured on this machine's clock (``latency``,
``timing``, ``layouts``), the machine read around every sample (``machine_probes``,
``contention``), verdicts settled in proportion to the interference (``settling``) and
judged: latency budgets (``budget``), recording (``recording``), comparing
(``comparison``), a short call measured again in a fresh process
(``fresh_process``); its baseline entry (``entry``) and the engine (``engine``).
Imports nothing: torch is imported where code is measured."""
