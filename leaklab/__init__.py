"""leaklab: PyTorch memory-leak reproductions and their fixes, measured, plus a leak check for your own step."""

from leaklab.report import Report
from leaklab.runner import BadInput, RunOptions, check, run_factory, run_script

__version__ = "0.1.0"
__all__ = ["BadInput", "Report", "RunOptions", "__version__", "check", "run_factory", "run_script"]
