"""Keep the hidden checks honest inside a student's kernel.

The grading pipeline starts each kernel through ``coursekit.grade.kernel_boot``,
which calls :func:`boot` before any student code runs. ``boot`` records the
functions the checks rely on (torch, numpy, math, builtins, helpers.checks and
the grading modules themselves) and receives a secret key for this one
notebook. From then on:

* :func:`verify` (called at the start and end of every hidden check) fails
  when student code has replaced any of them — ``torch.allclose = lambda *a,
  **k: True`` and the like — or left a torch function mode active;
* :func:`seal` prints, after a check passed, a token the pipeline can verify
  with the key (HMAC). A test cell that nbgrader scored but carries no valid
  token for each of its checks (because the check was replaced or skipped)
  loses its points in the pipeline, which runs outside the kernel.

Outside the pipeline (a student's own JupyterLab, ``nbgrader validate``) no
key is given: verify() still compares against what was imported first, and
seal() prints nothing.
"""
from __future__ import annotations

import sys

from . import protocol

_WATCHED_MODULES = ("builtins", "math", "torch", "torch.nn.functional", "torch.testing", "torch.overrides",
                    "numpy", "numpy.testing", "hmac", "hashlib", "helpers.checks", "helpers.ch12_quiz", "grading.core",
                    "grading.guard", "grading.protocol", "grading.cases")
# names that IPython / ipykernel legitimately rebind while a cell runs
_ALLOWED_CHANGES = {
    "builtins": {"_", "__", "___", "exit", "quit", "get_ipython", "display", "input", "raw_input", "getpass",
                 "__IPYTHON__", "help", "copyright", "credits", "license", "__builtins__"},
}


def _collect() -> dict:
    """The watched modules, and every grading.ch* module imported so far."""
    import importlib
    mods = {}
    for name in _WATCHED_MODULES:
        try:
            mods[name] = importlib.import_module(name)
        except Exception:
            continue
    for name, mod in list(sys.modules.items()):
        if name.startswith("grading.ch") and mod is not None:
            mods[name] = mod
    return mods


def _snap(mods: dict) -> dict:
    snap = {name: dict(vars(mod)) for name, mod in mods.items()}
    torch = mods.get("torch")
    if torch is not None:
        snap["torch.Tensor"] = dict(vars(torch.Tensor))
        snap["torch._C.TensorBase"] = dict(vars(torch._C.TensorBase))
    snap["sys"] = {k: getattr(sys, k) for k in ("setprofile", "settrace", "_getframe", "modules")}
    return snap


def _import_graders() -> None:
    import importlib
    import pkgutil

    import grading
    for info in pkgutil.iter_modules(grading.__path__):
        if info.name.startswith("ch"):
            importlib.import_module(f"grading.{info.name}")


def _grading_codes(mods: dict, here: str) -> dict:
    """code object -> its module's globals, for the grading modules' own
    functions and methods (files in ``here``)."""
    import os
    codes = {}
    for name, mod in mods.items():
        if not name.startswith("grading."):
            continue
        for obj in vars(mod).values():
            members = vars(obj).values() if isinstance(obj, type) and obj.__module__ == name else (obj,)
            for member in members:
                code = getattr(member, "__code__", None)
                if code is not None and os.path.dirname(os.path.abspath(code.co_filename)) == here:
                    codes.setdefault(code, vars(mod))
    return codes


def _module_changes(mods: dict, snap: dict, is_wrapper, missing) -> list[str]:
    out = []
    for name, mod in mods.items():
        if sys.modules.get(name) is not mod:
            out.append(f"sys.modules[{name!r}]")
            continue
        allowed = _ALLOWED_CHANGES.get(name, ())
        now = vars(mod)
        for attr, obj in snap[name].items():
            if attr in allowed or (name == "helpers.i18n"):
                continue
            new = now.get(attr, missing)
            if new is not obj and not is_wrapper(new, obj):
                out.append(f"{name}.{attr}")
    return out


def _torch_changes(torch, snap: dict, codes, missing) -> list[str]:
    out = []
    for label, typ in (("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase)):
        now = vars(typ)
        for attr, obj in snap[label].items():
            if now.get(attr, missing) is not obj:
                out.append(f"{label}.{attr}")
    try:
        for i in range(torch._C._len_torch_function_stack()):
            mode = torch._C._get_function_stack_at(i)
            if getattr(type(mode).__torch_function__, "__code__", None) not in codes:
                out.append("torch function mode left active")
        if torch._C._len_torch_dispatch_stack() > 0:
            out.append("torch dispatch mode left active")
    except AttributeError:
        pass
    return out


def _closure():
    """Build verify/seal/boot around private state (not module globals). The
    helpers are bound here once: replacing the module's names later changes nothing."""
    import os

    seal_token, collect, snap_of, codes_of = protocol.seal_token, _collect, _snap, _grading_codes
    module_changes, torch_changes, load_graders = _module_changes, _torch_changes, _import_graders
    is_wrapper, missing, getframe = _library_wrapper, _MISSING, sys._getframe
    here = os.path.dirname(os.path.abspath(__file__))
    state = {"snapshot": None, "modules": None, "key": None, "codes": {}, "hooks": None, "passed": None}

    def boot(key: bytes | None = None, import_graders: bool = True) -> None:
        if import_graders:
            load_graders()
        mods = collect()
        core = mods.get("grading.core")
        state.update(modules=mods, snapshot=snap_of(mods), key=key, codes=codes_of(mods, here),
                     passed=getattr(getattr(core, "passed", None), "__code__", None))

    def changed() -> list[str]:
        """Names that differ from the snapshot (empty when nothing was touched)."""
        if state["snapshot"] is None:
            boot(None, import_graders=False)
            return []
        mods, snap = state["modules"], state["snapshot"]
        out = module_changes(mods, snap, is_wrapper, missing)
        if mods.get("torch") is not None:
            out += torch_changes(mods["torch"], snap, state["codes"], missing)
        out += [f"sys.{a}" for a, obj in snap["sys"].items() if getattr(sys, a, missing) is not obj]
        if sys.getprofile() is not None and sys.getprofile() is not state["hooks"]:
            out.append("sys.setprofile hook")
        return out

    def seal(check_name: str, caller_code) -> str:
        """A token for a passed check, or '' without a key. Only grading.core.passed
        may ask for one, called by a grading module's own function running in its
        own module (read from the stack, not from the arguments)."""
        if state["key"] is None:
            return ""
        asker = getframe(1)
        check = asker.f_back
        codes = state["codes"]
        if (asker.f_code is not state["passed"] or check is None or check.f_code is not caller_code
                or codes.get(caller_code) is not check.f_globals or check_name != caller_code.co_name or changed()):
            return ""
        return seal_token(state["key"], check_name)

    def is_grading_code(code) -> bool:
        return code in state["codes"]

    def set_hook(fn):
        state["hooks"] = fn

    return boot, changed, seal, is_grading_code, set_hook


_MISSING = object()


def _library_wrapper(new, old) -> bool:
    """torch wraps some of its own functions when torch._dynamo is imported
    (e.g. torch.manual_seed): a wrapper whose code lives in torch's package
    and that wraps exactly the recorded function is not tampering."""
    import os
    code = getattr(new, "__code__", None)
    if code is None or getattr(new, "__wrapped__", None) is not old:
        return False
    torch = sys.modules.get("torch")
    root = os.path.dirname(getattr(torch, "__file__", "") or "")
    return bool(root) and os.path.abspath(code.co_filename).startswith(root + os.sep)


boot, changed, seal, is_grading_code, _set_hook = _closure()
del _closure

