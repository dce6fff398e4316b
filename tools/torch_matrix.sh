#!/usr/bin/env bash
# The CPU version matrix: for each torch version, a virtual environment of its own with that torch,
# its torchvision and this checkout installed editable with its `test` extra, then
# `leaklab run --device cpu --results <results-dir>/cpu-torch<version>.json` in it.
#
#   bash tools/torch_matrix.sh                      # default versions, results into results/matrix/
#   bash tools/torch_matrix.sh 2.15.0 2.11.0        # only these
#   bash tools/torch_matrix.sh --install-only       # build the environments, run nothing
#   bash tools/torch_matrix.sh --results-dir /tmp/trial --pytest
#
# Options (and the environment variables they override):
#   --venvs DIR        LEAKLAB_VENVS      environments DIR/torch-<version>, wheelhouse DIR/wheels
#                                         (default /work/venvs; keep it outside the checkout)
#   --logs DIR         LEAKLAB_LOGS       timings.tsv, and each invocation's logs in DIR/<UTC time>/
#                                         (default <venvs>/logs)
#   --results-dir DIR  LEAKLAB_RESULTS    where cpu-torch<version>.json goes (default results/matrix/)
#   --python EXE       LEAKLAB_PYTHON     the interpreter the environments are made from (python3)
#   --install-only     build or refresh the environments, run nothing
#   --pytest           also run the CPU test suite in each environment (log only)
#   --rebuild          delete and rebuild an environment that already exists
#
# Default versions: 2.15.0 2.14.1 2.11.0 and the floor that pyproject.toml claims (torch>=X).
# Every version's wheels are fetched once into a wheelhouse shared by all environments
# (PyPI's Linux torch wheels are CUDA builds of several GB); the install is then offline from it.
# The machine's pip configuration may cap torch (a global `constraint`): it is lifted for these
# pip calls only, by PIP_CONSTRAINT=/dev/null; nothing outside the environments is changed.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VENVS=${LEAKLAB_VENVS:-/work/venvs}
LOGS=${LEAKLAB_LOGS:-}
RESULTS=${LEAKLAB_RESULTS:-$REPO/results/matrix}
PYTHON=${LEAKLAB_PYTHON:-python3}
INSTALL_ONLY=0 PYTEST=0 REBUILD=0
VERSIONS=()
while (($#)); do
  case $1 in
    --venvs) VENVS=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --results-dir) RESULTS=$2; shift 2 ;;
    --python) PYTHON=$2; shift 2 ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    --pytest) PYTEST=1; shift ;;
    --rebuild) REBUILD=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "torch_matrix: unknown option $1" >&2; exit 2 ;;
    *) VERSIONS+=("$1"); shift ;;
  esac
done
LOGS=${LOGS:-$VENVS/logs}
WHEELS=$VENVS/wheels
TIMINGS=$LOGS/timings.tsv
LOGS=$LOGS/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$VENVS" "$LOGS" "$WHEELS" "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)

if ((${#VERSIONS[@]} == 0)); then
  FLOOR=$(sed -n 's/^ *"torch>=\([0-9.]*\)".*/\1/p' "$REPO/pyproject.toml")
  [[ $FLOOR =~ ^[0-9]+\.[0-9]+$ ]] && FLOOR=$FLOOR.0
  VERSIONS=(2.15.0 2.14.1 2.11.0 ${FLOOR:+"$FLOOR"})
fi
# Lift the machine's torch cap for these pip calls only; keep its indexes and certificates.
export PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
# Everything else comes from pyproject.toml: this checkout with its `test` extra (the lab's and the
# suite's dependencies, IPython for the notebook case); setuptools/wheel build the editable install
# offline.
PROJECT=("$REPO[test]")
DEPS=("setuptools>=64" wheel)

torchvision_for() {
  # torch 2.N ships with torchvision 0.(N+15); where that series is not on the index (a torch
  # newer than the last torchvision), let the resolver pick one that accepts this torch.
  local minor series
  minor=$(cut -d. -f2 <<<"$1")
  series=0.$((minor + 15))
  if "$PYTHON" -m pip index versions torchvision 2>/dev/null | grep -q "Available versions:.*\b${series//./\\.}\."; then
    echo "torchvision==$series.*"
  else
    echo torchvision
  fi
}

[[ -s $TIMINGS ]] || printf 'when\tversion\tstep\tseconds\tstatus\n' >"$TIMINGS"
timing() { printf '%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$1" "$2" "$3" "$4" | tee -a "$TIMINGS"; }

FAILED=()
for V in "${VERSIONS[@]}"; do
  ENV=$VENVS/torch-$V
  PY=$ENV/bin/python
  echo "=== torch $V -> $ENV"
  if ((REBUILD)) && [[ -d $ENV ]]; then rm -rf "$ENV"; fi
  have=$([[ -x $PY ]] && "$PY" -c "import torch; print(torch.__version__.split('+')[0])" 2>/dev/null)
  [[ $have == "$V" ]] || rm -rf "$ENV"
  TV=$(torchvision_for "$V")
  # The harness comes from this checkout: an editable install (the `leaklab` command, the pytest
  # plugin and the lab's subcommands are entry points), refreshed every time so that it follows
  # the checkout's package layout and dependencies. Installs are offline from the shared
  # wheelhouse; what it lacks is fetched into it first (wheels already there are not fetched again).
  install() {
    { [[ -x $PY ]] || "$PYTHON" -m venv "$ENV"; } &&
      "$PY" -m pip install -q --no-index --find-links "$WHEELS" "torch==$V" "$TV" "${DEPS[@]}" -e "${PROJECT[@]}"
  }
  SECONDS=0
  if ! install >"$LOGS/torch-$V.install.log" 2>&1; then
    SECONDS=0
    "$PYTHON" -m pip download -q -d "$WHEELS" "torch==$V" "$TV" "${DEPS[@]}" "${PROJECT[@]}" >"$LOGS/torch-$V.download.log" 2>&1
    rc=$?; timing "$V" download "$SECONDS" "$rc"
    if ((rc)); then FAILED+=("$V:download"); tail -5 "$LOGS/torch-$V.download.log"; continue; fi
    SECONDS=0
    install >>"$LOGS/torch-$V.install.log" 2>&1
    rc=$?
  else
    rc=0
  fi
  timing "$V" install "$SECONDS" "$rc"
  if ((rc)); then FAILED+=("$V:install"); tail -5 "$LOGS/torch-$V.install.log"; continue; fi
  (cd / && "$PY" -c "import sys, torch, torchvision, leaklab
print('python', sys.version.split()[0], '| torch', torch.__version__, '| torchvision', torchvision.__version__)
print('leaklab from', leaklab.__file__)") 2>&1 | tee "$LOGS/torch-$V.env.txt"
  ((INSTALL_ONLY)) && continue

  TORCH=$("$PY" -c "import torch; print(torch.__version__.split('+')[0])")
  TVV=$("$PY" -c "import torchvision; print(torchvision.__version__.split('+')[0])")
  NOTE="leaklab run --device cpu --slow in its own environment (tools/torch_matrix.sh): torch $TORCH, torchvision $TVV, \
python $("$PY" -c 'import platform; print(platform.python_version())'), $(nproc) cores, $(git -C "$REPO" describe --always --dirty), $(date -u +%FT%H:%MZ)"
  SECONDS=0
  (cd "$REPO" && "$PY" -m leaklab run --device cpu --slow --results "$RESULTS/cpu-torch$TORCH.json" --note "$NOTE") \
    >"$LOGS/torch-$V.run.log" 2>&1
  rc=$?; timing "$V" "leaklab run" "$SECONDS" "$rc"
  ((rc)) && FAILED+=("$V:run=$rc")
  tail -3 "$LOGS/torch-$V.run.log"
  if ((PYTEST)); then
    SECONDS=0
    (cd "$REPO" && "$PY" -m pytest -q -p no:cacheprovider) >"$LOGS/torch-$V.pytest.log" 2>&1
    rc=$?; timing "$V" pytest "$SECONDS" "$rc"
    ((rc)) && FAILED+=("$V:pytest=$rc")
    tail -1 "$LOGS/torch-$V.pytest.log"
  fi
done
echo "logs: $LOGS  results: $RESULTS"
if ((${#FAILED[@]})); then echo "failed: ${FAILED[*]}"; exit 1; fi
