#!/usr/bin/env bash
# Issue 31: the README's two commands timed from a fresh clone, as a newcomer runs them on this
# CPU machine: clone main into a temporary folder, make a fresh venv, put the CPU build of torch in
# it (tools/cpu_torch.sh: its index first, the plain install where the index cannot be reached),
# then `pip install -e . && leaklab run`, then `pip install -e '.[test]' && python3 -m pytest -n 2`,
# each in the clone, with the venv first on PATH (as `source venv/bin/activate` leaves it).
# Writes results/fresh-clone/cpu-torch<version>.json (docs/harness.md renders it): each command's
# wall time, its parts and exit code, the commit, the date, the machine, and `uptime`'s load
# before and after, so that a run on a busy machine says so ("idle": the 1-minute load was under
# a quarter of the cores when it started).
#   tools/fresh_clone_timing.sh [REPOSITORY] [BRANCH]   (default: this checkout's repository, main)
# OUT_DIR=... puts the results file elsewhere.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
source_repo=${1:-$here}
branch=${2:-main}
out_dir=${OUT_DIR:-$here/results/fresh-clone}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/log
seconds_since() { awk -v from="$1" -v to="$EPOCHREALTIME" 'BEGIN { printf "%.1f", to - from }'; }

uptime_before=$(uptime)
started_at=$(date -u +%Y-%m-%dT%H:%MZ)
git clone -q --branch "$branch" "$source_repo" "$work/leaklab" || exit 2
cd "$work/leaklab" || exit 2
commit=$(git rev-parse --short HEAD)
python3 -m venv "$work/venv" || exit 2
export VIRTUAL_ENV=$work/venv PATH=$work/venv/bin:$PATH

echo "fresh clone of $branch at $commit in $work/leaklab; load: $uptime_before" >&2
# The README's first command, on a machine without a GPU: the CPU build of torch, then the line.
first=$EPOCHREALTIME
torch_from=$(bash "$here/tools/cpu_torch.sh" "$work/venv/bin/pip")
torch_seconds=$(seconds_since "$first")
echo "$torch_from ($torch_seconds s)" >&2
install=$EPOCHREALTIME
pip install -q -e . >>"$log" 2>&1
install_status=$?
install_seconds=$(seconds_since "$install")
run=$EPOCHREALTIME
run_status=skipped
if [ "$install_status" = 0 ]; then
  leaklab run >"$work/run.out" 2>"$work/run.err"
  run_status=$?
fi
run_seconds=$(seconds_since "$run")
first_seconds=$(seconds_since "$first")
echo "first command: $first_seconds s (torch $torch_seconds s, pip install -e . $install_seconds s, leaklab run $run_seconds s, exit $run_status)" >&2
tail -n 1 "$work/run.out" >&2

# The README's test command.
second=$EPOCHREALTIME
pip install -q -e '.[test]' >>"$log" 2>&1
test_install_status=$?
test_install_seconds=$(seconds_since "$second")
suite=$EPOCHREALTIME
pytest_status=skipped
if [ "$test_install_status" = 0 ]; then
  python3 -m pytest -n 2 -p no:cacheprovider >"$work/pytest.out" 2>&1
  pytest_status=$?
fi
pytest_seconds=$(seconds_since "$suite")
second_seconds=$(seconds_since "$second")
echo "test command: $second_seconds s (pip install -e '.[test]' $test_install_seconds s, pytest -n 2 $pytest_seconds s, exit $pytest_status)" >&2
tail -n 1 "$work/pytest.out" >&2
grep "^FAILED" "$work/pytest.out" >&2  # which tests failed, not only how many
uptime_after=$(uptime)

torch_version=$(python3 -c "import torch; print(torch.__version__)" 2>/dev/null || echo unknown)
mkdir -p "$out_dir"
out=$out_dir/cpu-torch${torch_version%%+*}.json
export commit branch started_at torch_version torch_from uptime_before uptime_after work \
  torch_seconds install_seconds install_status run_seconds run_status first_seconds \
  test_install_seconds test_install_status pytest_seconds pytest_status second_seconds
python3 - "$out" <<'PY'
import json, os, platform, re, sys

env = os.environ


def load(line: str) -> list[float]:  # uptime's three load averages
    return [float(x) for x in re.findall(r"\d+[.,]\d+", line.split("load average")[-1])][:3]


def exit_code(install: str, command: str) -> int | None:
    return int(install) if install != "0" else None if command == "skipped" else int(command)


def last_line(name: str) -> str:
    path = os.path.join(env["work"], name)
    lines = open(path).read().strip().splitlines() if os.path.exists(path) else []
    return lines[-1].strip("= ") if lines else ""  # pytest's closing line without its rule


def failed(name: str) -> list[str]:
    """pytest's FAILED lines: which tests failed, not only how many."""
    path = os.path.join(env["work"], name)
    return [line.strip() for line in open(path) if line.startswith("FAILED")] if os.path.exists(path) else []


cores = len(os.sched_getaffinity(0))
before = load(env["uptime_before"])
model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "")
result = {
    "commit": env["commit"], "branch": env["branch"], "date": env["started_at"],
    "machine": {"cpu": model, "cores": cores, "python": platform.python_version()},
    "torch": env["torch_version"], "torch_from": env["torch_from"].removeprefix("torch: "),
    "load_before": before, "load_after": load(env["uptime_after"]),
    "uptime_before": env["uptime_before"].strip(), "uptime_after": env["uptime_after"].strip(),
    "idle": before[0] < 0.25 * cores,  # the 1-minute load when it started
    "commands": [
        {"command": "pip install -e . && leaklab run", "seconds": float(env["first_seconds"]),
         "parts": {"torch from the CPU index": float(env["torch_seconds"]), "pip install -e .": float(env["install_seconds"]),
                   "leaklab run": float(env["run_seconds"])},
         "exit": exit_code(env["install_status"], env["run_status"]), "last_line": last_line("run.out")},
        {"command": "pip install -e '.[test]' && python3 -m pytest -n 2", "seconds": float(env["second_seconds"]),
         "parts": {"pip install -e '.[test]'": float(env["test_install_seconds"]),
                   "python3 -m pytest -n 2": float(env["pytest_seconds"])},
         "exit": exit_code(env["test_install_status"], env["pytest_status"]), "last_line": last_line("pytest.out"),
         "failed": failed("pytest.out")},
    ],
}
with open(sys.argv[1], "w") as handle:
    json.dump(result, handle, indent=1)
    handle.write("\n")
print(f"wrote {sys.argv[1]}")
PY
