"""Scripts put under the check: a factory loaded from a file, fresh each time, and run in this
process or in a fresh one."""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from leaklab.report import Report
from leaklab.runner import BadInput, Factory, Interrupted, RunOptions, describe_failure, run_factory


def load_script(path: str | os.PathLike[str]) -> types.ModuleType:
    """Import a script by path as a fresh module (a new copy each call: no state is shared)."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"no such file: {path}")
    name = f"leaklab_script_{path.stem}_{time.monotonic_ns()}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise BadInput(f"cannot import {path} as a Python script")
    module = importlib.util.module_from_spec(spec)
    _EXIT_HANDLERS_AT_LOAD[name] = _exit_handlers()
    # Registered while it runs so that pickling (spawned workers) and dataclasses can find it.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt as exc:  # Ctrl-C is exit 3 wherever it comes, never bad input
        sys.modules.pop(name, None)
        _EXIT_HANDLERS_AT_LOAD.pop(name, None)
        raise Interrupted(describe_failure(exc, "the script")) from None
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        _EXIT_HANDLERS_AT_LOAD.pop(name, None)
        raise BadInput(f"importing {path} failed: {describe_failure(exc, 'the script')}") from None
    return module


_EXIT_HANDLERS_AT_LOAD: dict[str, int | None] = {}


def _exit_handlers() -> int | None:
    count = getattr(atexit, "_ncallbacks", None)  # CPython's; elsewhere unknown, and a namespace is kept
    return count() if count is not None else None


def forget_script(module: types.ModuleType) -> None:
    """Drop a loaded script. Clearing its namespace breaks the cycle between its functions and
    their globals, so reference counting frees its models and caches at once, without a full
    garbage collection (~0.14 s in a pytest session, once per run). Not where exit handlers were
    registered since it was loaded: a script's own (a cleanup that unlinks its shared memory)
    reads its globals at exit, and cleared they failed ("name 'os' is not defined") and left
    its files behind."""
    sys.modules.pop(module.__name__, None)
    at_load = _EXIT_HANDLERS_AT_LOAD.pop(module.__name__, None)
    now = _exit_handlers()
    if at_load is not None and now is not None and now <= at_load:
        module.__dict__.clear()


def parse_target(target: str) -> tuple[str, str]:
    """``path.py:factory`` -> (path, factory); the factory defaults to ``make_step``."""
    path, sep, factory = target.rpartition(":")
    if not sep or not path:
        return target, "make_step"
    if not factory.isidentifier():
        raise BadInput(f"{factory!r} is not a Python name; expected PATH.py:FACTORY")
    return path, factory


def factory_from_script(module: types.ModuleType, factory_name: str) -> Factory:
    factory = getattr(module, factory_name, None)
    if factory is None:
        raise BadInput(f"{module.__file__} has no {factory_name!r}")
    if not callable(factory):
        raise BadInput(f"{factory_name!r} in {module.__file__} is a {type(factory).__name__}, not a callable")
    return factory


def run_script(path: str | os.PathLike[str], factory_name: str = "make_step", device: str = "cpu",
               options: RunOptions | None = None) -> Report:
    """Load a script fresh, run its factory under the check, and drop the module again."""
    module = load_script(path)
    try:
        return run_factory(factory_from_script(module, factory_name), device, options)
    finally:
        forget_script(module)


class IsolatedCheck:
    """A script's check started now in a fresh Python process (for settings that must precede
    torch's import, such as ``PYTORCH_CUDA_ALLOC_CONF``); :meth:`result` waits for its report. With
    ``nproc`` over 1, ``nproc`` ranks under torch's elastic launcher (``leaklab check --nproc``):
    the merged answer, with every rank's report under ``ranks``. Several may run side by side,
    each its own process with its own counters."""

    def __init__(self, path: str | os.PathLike[str], factory_name: str, device: str, options: RunOptions,
                 env: Mapping[str, str] | None = None, timeout: float = 300.0, nproc: int = 1) -> None:
        command = [
            sys.executable, "-m", "leaklab", "check", f"{path}:{factory_name}", "--device", device,
            "--steps", str(options.steps), "--warmup", str(options.warmup), "--json",
            *(["--nproc", str(nproc)] if nproc > 1 else []),
        ]
        if options.resources:
            command += ["--resource", ",".join(options.resources)]
        if options.attribute:
            command.append("--attribute")
        if options.timeout:
            command += ["--timeout", str(options.timeout)]
        root = str(Path(__file__).resolve().parent.parent)
        child_env = {**os.environ, **(env or {})}
        child_env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, child_env.get("PYTHONPATH")]))
        self.path, self.deadline = path, time.monotonic() + timeout
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env)

    def result(self) -> dict[str, Any]:
        """The report, as JSON, once the process ends (it is killed past its time)."""
        try:
            out, err = self.process.communicate(timeout=max(self.deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            self.stop()
            raise
        if self.process.returncode not in (0, 1, 3, 4):
            raise RuntimeError(f"isolated run of {self.path} failed (exit {self.process.returncode}):\n{err[-4000:]}")
        return json.loads(out)

    def stop(self) -> None:
        """Kill it, if it still runs (a run nobody waited for, at the end of a session)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


def run_isolated(path: str | os.PathLike[str], factory_name: str, device: str, options: RunOptions,
                 env: Mapping[str, str] | None = None, timeout: float = 300.0, nproc: int = 1) -> dict[str, Any]:
    """:class:`IsolatedCheck`, waited for: the report as JSON."""
    return IsolatedCheck(path, factory_name, device, options, env, timeout, nproc).result()
