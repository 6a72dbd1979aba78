"""Watching what ``torch.compile`` does while some code runs: every frame it compiles,
each recompile with the guard failures that caused it and the line that made the call,
each graph break with the user's line, and the time spent compiling.

A watch starts from an empty compile cache (``torch._dynamo.reset()``), so what it
counts does not depend on what ran before it in the process: a function compiled by an
earlier test is compiled again, and a shape seen earlier cannot hide a recompile. When
it ends it empties the cache again (what it compiled cannot change later counts), puts
back dynamo's and inductor's configuration as they were (a test that turns on
``capture_scalar_outputs`` does not change the next test) and the compile callbacks
registered before it. The cost of that isolation is time, never results: a function
compiled before the watch compiles again at its next call.

The facts come from dynamo's own records, read as data: its compile callbacks (compile
id, start and end), ``guard_failures`` (why a cached graph did not fit) and
``graph_break_reasons`` (why a graph ended, with the user's stack). No log is parsed.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from pytest_torch.core.sites import is_internal, shown_path
from pytest_torch.perf.compilation.graph_breaks import (
    GraphBreak,
    Place,
    graph_breaks_of,
    place_of_frame,
    skipped_frame,
)
from pytest_torch.perf.compilation.recompiles import clean_guard_reason

#: dynamo's message when a function is recompiled more often than its limit allows
LIMIT_MARKERS = ("recompile limit", "cache_size_limit", "recompile_limit")


@dataclass
class Recompile:
    """One recompile: the function, why its cached graphs did not fit, who called it."""

    compile_id: str
    function: str
    reasons: list[str]
    call_site: Place | None
    #: for the code after a graph break: its function's parameter names (any other
    #: tensor it takes was made before the break); None for a whole function
    after_break_parameters: frozenset[str] | None = None


@dataclass
class CompileReport:
    """What was compiled while a watch ran."""

    #: frames compiled into graphs (a function, its resume functions after a graph break,
    #: every recompile)
    compiles: int = 0
    recompiles: list[Recompile] = field(default_factory=list)
    graph_breaks: list[GraphBreak] = field(default_factory=list)
    #: wall-clock seconds inside torch.compile (tracing, the backend, lazy backward compiles)
    seconds: float = 0.0
    #: functions that hit dynamo's recompile limit and ran uncompiled after it
    limit_hits: list[str] = field(default_factory=list)

    @property
    def graph_break_count(self) -> int:
        """Distinct places where a graph broke (a place hit by every recompile counts once)."""
        return len(self.graph_breaks)


class CompileUnavailableError(RuntimeError):
    """torch.compile cannot be watched in this environment (no dynamo, or one whose
    records this plugin does not know)."""


def dynamo_modules() -> tuple[Any, Any, Any]:
    """``torch._dynamo``, its utils and its callback handler; CompileUnavailableError
    naming the torch version when this torch lacks one of them."""
    import torch

    try:
        import torch._dynamo as dynamo
        from torch._dynamo import utils
        from torch._dynamo.callback import callback_handler
    except ImportError as exc:  # pragma: no cover - a torch without dynamo
        raise CompileUnavailableError(
            f"torch {torch.__version__} cannot compile here ({exc}); torch.compile checks"
            f" need torch >= 2.4 on a Python torch.compile supports"
        ) from None
    missing = [
        name
        for name, owner in (
            ("guard_failures", utils),
            ("graph_break_reasons", utils),
            ("counters", utils),
            ("register_start_callback", callback_handler),
            ("register_end_callback", callback_handler),
        )
        if not hasattr(owner, name)
    ]
    if missing:  # pragma: no cover - depends on the torch version
        raise CompileUnavailableError(
            f"torch {torch.__version__}'s torch._dynamo has no {', '.join(missing)}, which"
            f" the torch.compile checks read; they need torch >= 2.4"
        )
    return dynamo, utils, callback_handler


#: the configuration modules a watch puts back as they were (loaded at its start)
CONFIG_MODULES = (
    "torch._dynamo.config",
    "torch._inductor.config",
    "torch._functorch.config",
    "torch.compiler.config",
)
#: switched off while watching: a profile of dynamic shapes kept on disk between runs
#: (with a job id) would make counts depend on what ran before, even in another process
PROFILE_SWITCHES = ("automatic_dynamic_local_pgo", "automatic_dynamic_remote_pgo")


class _State:
    """torch.compile's configuration, its stance, torch's logging settings and the
    registered compile callbacks, saved to be put back."""

    def __init__(self, dynamo: Any, handler: Any) -> None:
        self.handler = handler
        self.start = list(getattr(handler, "start_callbacks", ()))
        self.end = list(getattr(handler, "end_callbacks", ()))
        self.configs = []
        for name in CONFIG_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:  # pragma: no cover - an older torch
                continue
            if hasattr(module, "get_config_copy"):
                self.configs.append((module, module.get_config_copy()))
        self.eval_frame: Any = getattr(dynamo, "eval_frame", None)
        self.stance = getattr(self.eval_frame, "_stance", None)
        self.logs = _log_settings()

    def restore(self) -> None:
        for module, saved in self.configs:
            now = module.get_config_copy()
            changed = {key: value for key, value in saved.items() if now.get(key) != value}
            with warnings.catch_warnings():  # setting a deprecated key warns; ours is a restore
                warnings.simplefilter("ignore")
                for key, value in changed.items():
                    setattr(module, key, value)
        if self.stance is not None and hasattr(self.eval_frame, "_set_stance"):
            self.eval_frame._set_stance(self.stance)
        if self.logs is not None and _log_settings() != self.logs:
            _restore_log_settings(*self.logs)
        if hasattr(self.handler, "start_callbacks"):
            self.handler.start_callbacks[:] = self.start
            self.handler.end_callbacks[:] = self.end


#: backends whose one-time start this process has already paid
_WARMED: set[Any] = set()


def _warm_up_function(x: Any) -> Any:
    return x * 2 + 1


def warm_up(backends: tuple[Any, ...]) -> None:
    """Pay torch.compile's one-time start in this process (imports, the first trace, the
    first code generation) outside any watch, once per backend: the first compile of a
    process takes seconds longer than any later one, and a test's compile time must not
    depend on whether it happens to be the first. A backend that cannot start here
    (inductor without a C++ compiler, say) is left for the test to meet."""
    import torch

    for backend in backends:
        if backend in _WARMED:
            continue
        _WARMED.add(backend)
        # a backend that fails here fails in the test too, which reports it there; the
        # deprecation warnings of torch's own imports are not the test's
        with contextlib.suppress(Exception), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.compile(_warm_up_function, backend=backend)(torch.ones(2))


def _log_settings() -> tuple[dict[str, Any], set[str]] | None:
    """torch's logging settings (torch._logging.set_logs, TORCH_LOGS): levels by logger
    and the artifacts switched on; None for a torch that keeps them elsewhere."""
    internal = sys.modules.get("torch._logging._internal")
    state = getattr(internal, "log_state", None)
    if state is None or not hasattr(state, "log_qname_to_level"):
        return None
    return dict(state.log_qname_to_level), set(state.artifact_names)


def _restore_log_settings(levels: dict[str, Any], artifacts: set[str]) -> None:
    """What torch._logging.set_logs does, with the saved settings."""
    internal = sys.modules["torch._logging._internal"]
    state = internal.log_state
    state.clear()
    state.log_qname_to_level.update(levels)
    state.artifact_names.update(artifacts)
    internal._init_logs()


class CompileWatch:
    """``with CompileWatch() as watch: ...`` then ``watch.report``.

    Watches nest (``assert_no_graph_breaks`` in a marked test): the inner one empties
    dynamo's records, the outer one keeps what it read and goes on watching, and counts
    the inner one's compiles too. Not thread-safe: the thread that compiles watches.
    """

    def __init__(self) -> None:
        self.report = CompileReport()
        self._modules: tuple[Any, Any, Any] | None = None
        self._state: _State | None = None
        self._seen: dict[Any, int] = {}
        self._unimplemented: dict[str, int] = {}
        self._started: float | None = None
        self._breaks_from = 0
        #: dynamo's graph-break records, each with the line that led to its compile
        self._breaks: list[tuple[Any, Place | None]] = []
        self._site: Place | None = None
        self._own_clear: Any = None
        #: the newest of dynamo's compilation metrics already read
        self._last_metrics: Any = None

    def __enter__(self) -> CompileWatch:
        dynamo, utils, handler = self._modules = dynamo_modules()
        self._state = _State(dynamo, handler)
        for switch in PROFILE_SWITCHES:
            if hasattr(dynamo.config, switch):
                setattr(dynamo.config, switch, False)
        dynamo.reset()  # also empties the callback lists: ours go in after it
        self._unimplemented = dict(utils.counters["unimplemented"])
        self._follow_resets(handler)
        self._restarted()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._modules is not None and self._state is not None
        dynamo, utils, handler = self._modules
        try:
            if self._started is not None:  # the code raised while compiling
                self.report.seconds += time.perf_counter() - self._started
                self._started = None
            self._harvest_breaks()
            self.report.graph_breaks = graph_breaks_of(self._breaks)
            self.report.limit_hits = self._limit_hits(utils)
        finally:
            # the clear of a watch around this one (assert_no_graph_breaks in a marked
            # test) goes back, so the outer watch keeps following resets
            if self._own_clear is None:
                handler.__dict__.pop("clear", None)
            else:
                handler.clear = self._own_clear
            dynamo.reset()
            self._state.restore()

    def _follow_resets(self, handler: Any) -> None:
        """A test may call torch._dynamo.reset() itself (torch.compiler.reset(), to start
        clean): it empties dynamo's records and drops every compile callback. Keep
        watching through it: its last step, emptying the callbacks, puts ours back and
        starts reading the emptied records from their beginning."""
        clear = handler.clear
        self._own_clear = handler.__dict__.get("clear")

        def clear_and_keep_watching() -> None:
            clear()
            self._harvest_skips()  # reset() keeps the metrics: read them before restarting
            self._restarted()

        handler.clear = clear_and_keep_watching  # on the instance; removed in __exit__

    def _restarted(self) -> None:
        assert self._modules is not None
        _, utils, handler = self._modules
        handler.register_start_callback(self._on_start)
        handler.register_end_callback(self._on_end)
        self._seen = {code: len(reasons) for code, reasons in utils.guard_failures.items()}
        self._breaks_from = len(utils.graph_break_reasons)
        metrics = _compilation_metrics(utils)
        self._last_metrics = metrics[-1] if metrics else None

    def _harvest_breaks(self) -> None:
        """Keep the graph breaks recorded since the last look (before a reset empties
        dynamo's list)."""
        assert self._modules is not None
        records = self._modules[1].graph_break_reasons
        self._breaks += [(record, self._site) for record in records[self._breaks_from :]]
        self._breaks_from = len(records)
        self._harvest_skips()

    def _harvest_skips(self) -> None:
        """Keep the frames torch.compile gave up on since the last look: a graph break it
        could not resume from (inside a ``with`` or ``try`` block, in a loop...) makes it
        run the whole function uncompiled, and no graph-break record says so; dynamo's
        compilation metrics of that compile do (a soft failure, no compiled code)."""
        assert self._modules is not None
        metrics = _compilation_metrics(self._modules[1])
        new = metrics
        for index in range(len(metrics) - 1, -1, -1):
            if metrics[index] is self._last_metrics:
                new = metrics[index + 1 :]
                break
        for entry in new:
            skipped = skipped_frame(entry)
            if skipped is not None:
                self._breaks.append((skipped, self._site))
        if metrics:
            self._last_metrics = metrics[-1]

    # compile callbacks: dynamo calls them once per outermost compile (nested ones are
    # counted by its handler), with a CallbackArgs (compile_id, trigger) since torch 2.6
    def _on_start(self, args: Any = None) -> None:
        self._harvest_skips()  # a compile's metrics are recorded after its end callback
        self._started = time.perf_counter()
        trigger = getattr(getattr(args, "callback_trigger", None), "name", "DYNAMO")
        if trigger != "DYNAMO":
            return  # a lazy backward compile, autotuning...: time, not a new compile
        self.report.compiles += 1
        self._site = place_of_frame(sys._getframe(1))  # the user's line that led here
        compile_id = str(getattr(args, "compile_id", "") or "")
        reasons, function, parameters = self._new_guard_failures()
        attempt = compile_id.partition("/")[2]
        if (attempt.isdigit() and int(attempt) > 0) or (not attempt and reasons):
            self.report.recompiles.append(
                Recompile(compile_id, function, reasons, self._site, parameters)
            )

    def _on_end(self, args: Any = None) -> None:
        self._harvest_breaks()
        if self._started is not None:
            self.report.seconds += time.perf_counter() - self._started
            self._started = None

    def _new_guard_failures(self) -> tuple[list[str], str, frozenset[str] | None]:
        """The guard failures recorded since the last compile started (why the cached
        graphs did not fit the call being compiled now), the function's name, and for
        the code after a graph break its function's parameters."""
        assert self._modules is not None
        utils = self._modules[1]
        reasons: list[str] = []
        function = ""
        parameters = None
        for code, failures in list(utils.guard_failures.items()):
            seen = self._seen.get(code, 0)
            if len(failures) > seen:
                function = _function_name(code)
                parameters = _parameters_after_break(code)
                reasons += [clean_guard_reason(text) for text in failures[seen:]]
            self._seen[code] = len(failures)
        return list(dict.fromkeys(reasons)), function, parameters

    def _limit_hits(self, utils: Any) -> list[str]:
        hits = []
        for text, count in utils.counters["unimplemented"].items():
            if count > self._unimplemented.get(text, 0) and any(
                marker in text for marker in LIMIT_MARKERS
            ):
                hits.append(text.splitlines()[0])
        if hits:
            _, function, _ = self._new_guard_failures()
            if function:
                hits = [f"{function}: {hit}" for hit in hits]
        return hits


def _compilation_metrics(utils: Any) -> list[Any]:
    """dynamo's metrics of its latest compiles (the newest last; it keeps the last 64),
    or none for a torch without them."""
    getter = getattr(utils, "get_compilation_metrics", None)
    return list(getter()) if getter is not None else []


def _function_name(code: Any) -> str:
    """``forward (models.py:30)`` for a code object (dynamo keys guard failures by the
    original code)."""
    name = getattr(code, "co_name", None)
    if name is None or is_internal(code.co_filename):
        return ""  # torch's wrapper around a compiled module: the call site names it
    path = shown_path(code.co_filename)
    resumed = RESUME.match(name)
    if resumed:  # the code dynamo made for the rest of a function after a graph break
        function, line = resumed.groups()
        return f"{function}, after its graph break at {path}:{line},"
    return f"{name} ({path}:{code.co_firstlineno})"


#: dynamo's name for the rest of a function after a graph break
RESUME = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_(\d+)$")


def _parameters_after_break(code: Any) -> frozenset[str] | None:
    """For the code dynamo made for the rest of a function after a graph break, the
    parameter names of that function (found through dynamo's record of the code it was
    made from); None for any other code, or when torch keeps no such record."""
    if not RESUME.match(getattr(code, "co_name", "")):
        return None
    try:
        from torch._dynamo.resume_execution import ContinueExecutionCache

        made_from = ContinueExecutionCache.generated_code_metadata
        original = code
        for _ in range(64):  # the rest after a second break is made from the first rest
            meta = made_from.get(original)
            if meta is None:
                break
            original = meta.code
    except Exception:  # a torch without this record: no guess
        return None
    if original is code or RESUME.match(original.co_name):
        return None
    count = original.co_argcount + original.co_kwonlyargcount
    count += bool(original.co_flags & inspect.CO_VARARGS)
    count += bool(original.co_flags & inspect.CO_VARKEYWORDS)
    return frozenset(original.co_varnames[:count])
