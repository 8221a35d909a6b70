"""Steady calls that skip Dynamo's frame evaluation, with Dynamo's own guards and translated bytecode.

Once a frame is compiled, each call of a `torch.compile` wrapper still pays for Dynamo's way in: the wrapper's
context (eval-frame hook, dispatch-key and stance bookkeeping), the frame's evaluation and its cache lookup.
For a small graph that costs more than all its kernels. `FrameReplay` makes the same lookup by hand: the cache
entries of the frame's code in the wrapper's region, in Dynamo's order, the first whose backend is the
wrapper's and whose guards pass on the frame's arguments; it then runs that entry's translated code as a
function with the frame function's globals, defaults and closure, as Dynamo would. The guards are Dynamo's,
so whatever makes Dynamo recompile (a new shape, grad mode, a changed module attribute) makes the replay
decline and the call go through Dynamo, which compiles it. Declined too: translations that call a resume
function (a graph break: outside Dynamo it would run eagerly), a stance other than "default", calls made while
Dynamo traces or another compiled region runs, and modules with call hooks.
"""

from __future__ import annotations

import functools
import inspect
import types

import torch
from torch._C._dynamo import eval_frame as _eval_frame
from torch._dynamo import eval_frame as _dynamo_eval_frame

_profiler = torch.autograd.profiler
_MISS = object()
_TRANSLATIONS_KEPT = 64


_ENTRIES_FOR_REGION = getattr(_eval_frame, "_get_cache_entries_for_region", None)


def _get_entries(code, region: int) -> list:
    if _ENTRIES_FOR_REGION is not None:
        return _ENTRIES_FOR_REGION(code, region)
    return _eval_frame._debug_get_cache_entry_list(code)


def _replayable(code: types.CodeType) -> bool:
    """One compiled graph called and no resume function (what follows a graph break) in the translation."""
    names = code.co_names
    return (sum(n.startswith("__compiled_fn") for n in names) == 1
            and not any(n.startswith("__resume_at") for n in names))


def _binder(function: types.FunctionType):
    """(args, kwargs) -> the frame's locals at entry (its arguments and free variables), or None."""
    code = function.__code__
    flags = code.co_flags
    varargs, varkw = bool(flags & inspect.CO_VARARGS), bool(flags & inspect.CO_VARKEYWORDS)
    free = code.co_freevars
    named_cells = tuple(zip(free, function.__closure__ or ()))

    def with_cells(found: dict | None) -> dict | None:
        """found, with the free variables' values added (None if a cell is empty)."""
        if found is None or not free:
            return found
        try:
            for name, cell in named_cells:
                found[name] = cell.cell_contents
        except ValueError:  # an empty cell
            return None
        return found

    signature = inspect.signature(function, follow_wrapped=False)  # the code's own parameters, not __wrapped__'s
    count = code.co_argcount
    positional = code.co_varnames[:count]

    def bind_general(args, kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return None  # let the call raise Python's own error
        bound.apply_defaults()
        return with_cells(dict(bound.arguments))

    if varargs and varkw and not code.co_kwonlyargcount:  # f(a, b, *args, **kwargs): a decorator's wrapper
        star, star_star = code.co_varnames[count:count + 2]

        if not count:  # f(*args, **kwargs), as Dynamo's wrapper of a module's call: every call binds this way
            def bind_all(args, kwargs):
                return with_cells({star: args, star_star: kwargs})

            return bind_all

        def bind_star(args, kwargs):
            if len(args) < count or (kwargs and not kwargs.keys().isdisjoint(positional)):
                return bind_general(args, kwargs)  # defaults to fill in, or a positional given by keyword
            found = dict(zip(positional, args))
            found[star], found[star_star] = args[count:], kwargs
            return with_cells(found)

        return bind_star

    simple = not (varargs or varkw or code.co_kwonlyargcount or function.__defaults__)

    def bind(args, kwargs):
        if simple and not kwargs and len(args) == count:
            return with_cells(dict(zip(positional, args)))
        return bind_general(args, kwargs)

    return bind


def _has_call_hooks(module: torch.nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks or torch.nn.modules.module._has_any_global_hook())


class FrameReplay:
    """Replays the Dynamo cache entries of one compiled frame (see the module docstring).

    frame_function: the function whose frame Dynamo translates; backend: the compiler function the wrapper
    compiles with (torch.compile wraps it: an entry of another backend is not this wrapper's); module: for a
    module compiled through its `__call__`, the module (its `forward` is that function, called with the module
    first).
    """

    def __init__(self, frame_function: types.FunctionType, backend, region: int, module=None):
        self.frame_function, self.backend, self.region, self.module = frame_function, backend, region, module
        self.bind = _binder(frame_function)
        self.code = frame_function.__code__
        # id(translated code) -> (that code, whether its entry is this backend's, its replayed function or None); the
        # code is kept, so that no other code takes its id (a cache entry's Python object may, once Dynamo frees it)
        self.translations: dict[int, tuple] = {}
        self.calls = 0  # calls replayed

    def __call__(self, args: tuple, kwargs: dict):
        """The call's result, or _MISS where Dynamo must take it."""
        # is_compiling first: Dynamo tracing this call folds it to True and reads no further
        if (torch.compiler.is_compiling() or _dynamo_eval_frame._stance.stance != "default"
                or _eval_frame.get_eval_frame_callback() is not None):
            return _MISS
        module = self.module
        if module is not None:
            forward = module.forward
            if getattr(forward, "__func__", None) is not self.frame_function or _has_call_hooks(module):
                return _MISS
            args = (module, *args)
        frame_locals = self.bind(args, kwargs)
        if frame_locals is None:
            return _MISS
        for entry in _get_entries(self.code, self.region):
            code = entry.code
            known = self.translations.get(id(code))
            if known is None or known[0] is not code:
                known = self._known(entry, code)
            # the guard manager read each time: Dynamo swaps an invalidated entry's for one that fails
            if known[1] and entry.guard_manager.check(frame_locals):
                translated = known[2]
                if translated is None:
                    return _MISS
                self.calls += 1
                return translated(*args, **kwargs)
        return _MISS

    def _known(self, entry, code: types.CodeType) -> tuple:
        """(code, whether the entry is this backend's, the function that replays it or None), kept for the code."""
        f = self.frame_function
        ours = getattr(entry.backend, "compiler_fn", entry.backend) is self.backend
        function = None
        if ours and _replayable(code):
            direct = _direct(code, f.__globals__)
            function = types.FunctionType(direct, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
            function.__kwdefaults__ = f.__kwdefaults__
        if len(self.translations) >= _TRANSLATIONS_KEPT:
            self.translations.clear()
        known = self.translations[id(code)] = (code, ours, function)
        return known


_DIRECT = "__torchfuser_direct_"  # globals the replayed code reads instead of Dynamo's wrapped ones


class _ProfilerMarks(types.ModuleType):
    """torch._dynamo.utils as the translated code reads it, but its pregraph-bytecode profiler marks without the
    wrapper that switches Dynamo's frame evaluation off around them (there is none to switch off in a replay)."""

    def __init__(self, utils):
        super().__init__(utils.__name__)
        self._utils = utils
        self._enter = inspect.unwrap(utils.record_pregraph_bytecode_enter)
        self._exit = inspect.unwrap(utils.record_pregraph_bytecode_exit)

    def record_pregraph_bytecode_enter(self):
        """Dynamo's mark where a profiler runs; else nothing to enter (no context made per call)."""
        return self._enter() if _profiler._is_profiler_enabled else None

    def record_pregraph_bytecode_exit(self, mark) -> None:
        if mark is not None:
            self._exit(mark)

    def __getattr__(self, name):
        return getattr(self._utils, name)


def _direct(code: types.CodeType, frame_globals: dict) -> types.CodeType:
    """The translated code, calling the compiled graph and the profiler marks without Dynamo's `disable` wrappers.

    Each wrapper switches Dynamo's frame evaluation off for the call and back on after it, a few microseconds
    for every call of a small graph. A replay runs only where no evaluation callback is set (FrameReplay
    declines otherwise), so the unwrapped callables do exactly what the wrapped ones would. Their globals are
    added next to Dynamo's own `__compiled_fn_*` in the frame function's module; other names are untouched."""
    names = list(code.co_names)
    for i, name in enumerate(names):
        target = frame_globals.get(name)
        if name.startswith("__compiled_fn") and getattr(target, "_torchdynamo_disable", False):
            inner = getattr(target, "_torchdynamo_orig_callable", None)
            if callable(inner):
                names[i] = f"{_DIRECT}{name}"
                frame_globals[names[i]] = inner
        elif isinstance(target, types.ModuleType) and target.__name__ == "torch._dynamo.utils":
            names[i] = f"{_DIRECT}dynamo_utils"
            if not isinstance(frame_globals.get(names[i]), _ProfilerMarks):
                frame_globals[names[i]] = _ProfilerMarks(target)
    return code.replace(co_names=tuple(names))


def _frame_of(dynamo_wrapper) -> tuple[types.FunctionType, torch.nn.Module | None] | None:
    """The function whose frame Dynamo translates when `dynamo_wrapper` (a compile wrapper) is called, and the
    module whose `__call__` it wraps, if any."""
    target = getattr(dynamo_wrapper, "_torchdynamo_orig_callable", None)
    if isinstance(target, types.FunctionType):
        return target, None
    module = getattr(target, "__self__", None)
    if (isinstance(module, torch.nn.Module) and getattr(target, "__func__", None) is torch.nn.Module._wrapped_call_impl
            and isinstance(getattr(module.forward, "__func__", None), types.FunctionType)):
        return module.forward.__func__, module
    return None


class ReplayingModule(_dynamo_eval_frame.OptimizedModule):
    """An OptimizedModule whose calls try the replay first, before nn.Module's call machinery: with no hooks
    on the wrapper that machinery only calls `forward`, and OptimizedModule's own costs more than a small
    graph's kernels."""

    replay: FrameReplay | None = None  # a class attribute: OptimizedModule sets this one on the wrapper itself

    def __call__(self, *args, **kwargs):
        if self.replay is not None and not _has_call_hooks(self):
            result = self.replay(args, kwargs)
            if result is not _MISS:
                return result
        return super().__call__(*args, **kwargs)


def with_replay(compiled, backend):
    """What `torch.compile` returned, its steady calls replayed: an OptimizedModule becomes a ReplayingModule,
    a function a replaying wrapper. Unchanged where the frame is not found."""
    module = isinstance(compiled, _dynamo_eval_frame.OptimizedModule)
    wrapper = compiled.forward if module else compiled
    frame = _frame_of(wrapper)
    if frame is None:
        return compiled
    replay = FrameReplay(frame[0], backend, getattr(wrapper, "_isolate_recompiles_id", -1), module=frame[1])
    if module:
        compiled.__class__ = ReplayingModule  # the same object and state: only calls change
        compiled.replay = replay
        return compiled

    @functools.wraps(compiled)
    def replaying(*args, **kwargs):
        result = replay(args, kwargs)
        return compiled(*args, **kwargs) if result is _MISS else result

    replaying.replay = replay
    return replaying
