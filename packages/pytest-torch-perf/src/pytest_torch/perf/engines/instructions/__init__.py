"""The instruction-count engine's room: the session run under Callgrind (``launch``,
``valgrind``), Callgrind switched on around a call (``client_requests``), one call
counted (``counting``) and Callgrind's files read (``callgrind_output``), counts judged
(``judging``); its baseline entry (``entry``) and the engine (``engine``).
Imports nothing: torch is imported where code is counted."""
