"""A notebook cell whose last line is a tensor: IPython's output history keeps every one.

The seed says a notebook keeps all outputs alive through `_`. Measured: the output cache
`Out` (also reachable as `_oh` and `_<n>`) keeps every displayed value, not only the last
three (`_`, `__`, `___`); each run of the cell pins one more tensor until the kernel restarts
(or the cache passes `cache_size`, 1000 by default). The cell runs in a real IPython shell
(`run_cell(..., store_history=True)`, as a kernel does); its display text is not printed here.

Run it: python cases/notebook_output_cache.py   (needs IPython)
"""

import builtins
import contextlib
import io
import types
import weakref

import torch
from torch import nn

CELL = """\
batch = next_batch()
with torch.no_grad():
    features = model(batch)
"""
LAST_LINE = "features"  # LEAK: IPython displays the cell's last expression and, while cache_size > 0, stores it in Out


def make_step(device: str):
    try:
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config
    except ImportError as exc:
        raise ImportError("notebook_output_cache needs IPython (pip install ipython) to run a notebook cell") from exc
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 256)).to(device)
    model.eval()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # keep the history database off the disk
    config.InteractiveShell.cache_size = 1000  # IPython's default
    added_builtins = {"__IPYTHON__", "display"} - set(vars(builtins))
    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance(config=config, user_module=types.ModuleType("notebook_kernel"))
    shell.push({"torch": torch, "model": model, "next_batch": lambda: torch.randn(256, 512, device=device)})

    def run_cell():
        with contextlib.redirect_stdout(io.StringIO()):  # the notebook's front end would show this
            result = shell.run_cell(CELL + LAST_LINE, store_history=True)
        result.raise_error()
        return {"outputs_cached": len(shell.user_ns["Out"])}

    def restart_kernel(shell=shell):
        """What restarting the kernel does: the shell, its namespace and its history go away."""
        shell.reset(new_session=False)
        InteractiveShell.clear_instance()
        for name in added_builtins:
            vars(builtins).pop(name, None)

    finalizer = weakref.finalize(run_cell, restart_kernel)  # the harness drops the step: restart the kernel
    finalizer.atexit = False  # at exit IPython shuts its shell down itself
    return run_cell


if __name__ == "__main__":
    device = "cuda" if torch.cuda.is_available() else "cpu"
    run_cell = make_step(device)
    for step in range(1, 31):
        outputs = run_cell()["outputs_cached"]
        allocated = f"  device allocated {torch.cuda.memory_allocated() / 2**20:.1f} MiB" if device == "cuda" else ""
        held = outputs * 256 * 256 * 4 / 2**20
        print(f"step {step:2d}  Out holds {outputs:2d} tensors ({held:.1f} MiB){allocated}")
