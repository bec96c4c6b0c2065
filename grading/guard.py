"""Keep the hidden checks honest inside a student's kernel.

The grading pipeline starts each kernel through ``coursekit.kernel_boot``,
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

_WATCHED_MODULES = ("builtins", "math", "torch", "torch.nn.functional", "torch.testing", "torch.overrides",
                    "numpy", "numpy.testing", "hmac", "hashlib", "helpers.checks", "helpers.ch12_quiz", "grading.core",
                    "grading.guard")
# names that IPython / ipykernel legitimately rebind while a cell runs
_ALLOWED_CHANGES = {
    "builtins": {"_", "__", "___", "exit", "quit", "get_ipython", "display", "input", "raw_input", "getpass",
                 "__IPYTHON__", "help", "copyright", "credits", "license", "__builtins__"},
}
_TENSOR_TYPES = ("Tensor", "TensorBase")
_SEAL_MARK = "⟦seal:"


def _closure():
    """Build verify/seal/boot around private state (not module globals)."""
    import hmac as _hmac
    import hashlib as _hashlib

    state = {"snapshot": None, "modules": None, "key": None, "codes": frozenset(), "hooks": None}

    def _collect():
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

    def _snap(mods):
        snap = {name: dict(vars(mod)) for name, mod in mods.items()}
        torch = mods.get("torch")
        if torch is not None:
            snap["torch.Tensor"] = dict(vars(torch.Tensor))
            snap["torch._C.TensorBase"] = dict(vars(torch._C.TensorBase))
        snap["sys"] = {k: getattr(sys, k) for k in ("setprofile", "settrace", "_getframe", "modules")}
        return snap

    def boot(key: bytes | None = None, import_graders: bool = True) -> None:
        if import_graders:
            import importlib
            import pkgutil

            import grading
            for info in pkgutil.iter_modules(grading.__path__):
                if info.name.startswith("ch"):
                    importlib.import_module(f"grading.{info.name}")
        mods = _collect()
        state["modules"] = mods
        state["snapshot"] = _snap(mods)
        state["key"] = key
        codes = set()
        import os
        here = os.path.dirname(os.path.abspath(__file__))
        for name, mod in mods.items():
            if name.startswith("grading."):
                for obj in vars(mod).values():
                    members = vars(obj).values() if isinstance(obj, type) and obj.__module__ == name else (obj,)
                    for member in members:
                        code = getattr(member, "__code__", None)
                        if code is not None and os.path.dirname(os.path.abspath(code.co_filename)) == here:
                            codes.add(code)
        state["codes"] = frozenset(codes)

    def changed() -> list[str]:
        """Names that differ from the snapshot (empty when nothing was touched)."""
        if state["snapshot"] is None:
            boot(None, import_graders=False)
            return []
        out = []
        mods, snap = state["modules"], state["snapshot"]
        for name, mod in mods.items():
            if sys.modules.get(name) is not mod:
                out.append(f"sys.modules[{name!r}]")
                continue
            allowed = _ALLOWED_CHANGES.get(name, ())
            now = vars(mod)
            for attr, obj in snap[name].items():
                if attr in allowed or (name == "helpers.i18n"):
                    continue
                new = now.get(attr, _MISSING)
                if new is not obj and not _library_wrapper(new, obj):
                    out.append(f"{name}.{attr}")
        torch = mods.get("torch")
        if torch is not None:
            for label, typ in (("torch.Tensor", torch.Tensor), ("torch._C.TensorBase", torch._C.TensorBase)):
                now = vars(typ)
                for attr, obj in snap[label].items():
                    if now.get(attr, _MISSING) is not obj:
                        out.append(f"{label}.{attr}")
            try:
                for i in range(torch._C._len_torch_function_stack()):
                    mode = torch._C._get_function_stack_at(i)
                    code = getattr(type(mode).__torch_function__, "__code__", None)
                    if code not in state["codes"]:
                        out.append("torch function mode left active")
                if torch._C._len_torch_dispatch_stack() > 0:
                    out.append("torch dispatch mode left active")
            except AttributeError:
                pass
        for attr, obj in snap["sys"].items():
            if getattr(sys, attr, _MISSING) is not obj:
                out.append(f"sys.{attr}")
        if sys.getprofile() is not None and sys.getprofile() is not state["hooks"]:
            out.append("sys.setprofile hook")
        return out

    def seal(check_name: str, caller_code) -> str:
        """A token for a passed check, or '' without a key. Only a grading
        module's own function may ask for one."""
        if state["key"] is None or caller_code not in state["codes"] or changed():
            return ""
        mac = _hmac.new(state["key"], check_name.encode(), _hashlib.sha256).hexdigest()[:32]
        return f"{_SEAL_MARK}{check_name}:{mac}⟧"

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


def expected_seal(key: bytes, check_name: str) -> str:
    """What :func:`seal` prints for ``check_name`` under ``key`` (used by the
    pipeline outside the kernel)."""
    import hashlib
    import hmac
    mac = hmac.new(key, check_name.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{_SEAL_MARK}{check_name}:{mac}⟧"
