"""Host syncs: finding the operations that would make the host wait for a GPU, on any
device. ``checks`` runs a call and answers (``find_host_syncs``,
``assert_no_host_sync``); ``dispatch`` judges every aten operation and ``wrappers`` the
Python-level reads and moves the dispatcher cannot see, both into the call's
``recorder`` (where each tensor would live, what the call did); ``rules`` says what
synchronises on a GPU, why, and the sync-free spelling; ``sites`` finds the user's line
(with core's finder, ``pytest_torch.core.sites``) and the call on it; ``events`` tells a
person what was found.
Imports nothing: torch is imported when a call is checked.
"""
