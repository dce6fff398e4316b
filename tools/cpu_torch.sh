#!/usr/bin/env bash
# The CPU build of torch into a venv, as the README says for a machine without a GPU: from
# torch's CPU wheel index first (pip otherwise brings the CUDA build and its nvidia-* wheels).
# Where that index cannot be reached within a few seconds (an offline machine, one that reaches
# a mirror only), or its install fails, nothing is installed here and the package's own install
# brings torch, as the README's plain line does. Never hangs: the reach is time-boxed, and pip's
# own socket timeout bounds a stalled download. Prints one line: where torch came from.
#   tools/cpu_torch.sh VENV_PIP
set -uo pipefail
pip=$1
index=${LEAKLAB_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
if ! timeout 15 python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + '/torch/', timeout=10)" \
    "$index" >/dev/null 2>&1; then
  echo "torch: the CPU index ($index) could not be reached within 15 s: the plain install brings torch"
elif "$pip" install -q --timeout 30 --retries 1 --index-url "$index" torch; then
  echo "torch: from the CPU index ($index)"
else
  echo "torch: the install from the CPU index ($index) failed: the plain install brings torch"
fi
