"""CATALOG.md and the cases' own form: generated, fresh, and every case what a reader can copy."""

import ast
import difflib
import sys

import pytest

from leaklab.cli import main
from leaklab_lab.cases import discover
from leaklab_lab.catalog import CATALOG_PATH, render

CASES = discover()
ALLOWED_IMPORTS = set(sys.stdlib_module_names) | {"torch", "torchvision", "__future__"}


def test_catalog_is_not_stale(capsys):
    assert main(["catalog", "--check"]) == 0, (
        "CATALOG.md is stale: run `leaklab catalog` and commit it\n"
        + "\n".join(list(difflib.unified_diff(CATALOG_PATH.read_text().splitlines(), render().splitlines(), lineterm=""))[:40])
    )


def test_catalog_check_fails_on_a_hand_edit(tmp_path, capsys):
    stale = tmp_path / "CATALOG.md"
    stale.write_text(render().replace("## Symptom index", "## Symptoms (edited by hand)"))
    assert main(["catalog", "--check", "--output", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err


@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_every_case_has_its_entry_diff_and_marks(case):
    text = render()
    assert f"## `{case.slug}`: {case.title}" in text
    assert case.leak_lines(), f"cases/{case.leak.name} has no '# LEAK:' line"
    for fix in case.fixes:
        fix_marks = [line for line in fix.read_text().splitlines() if "# FIX:" in line]
        assert fix_marks, f"{fix} has no '# FIX:' line"
        diff = list(difflib.unified_diff(case.leak.read_text().splitlines(), fix.read_text().splitlines(), lineterm="", n=0))
        hunks = "\n".join(diff).split("\n@@")[1:]
        for hunk in hunks:
            changed = [line[1:].strip() for line in hunk.splitlines()[1:] if line[:1] in "+-"]
            only_imports = all(not line or line.startswith(("import ", "from ")) for line in changed)
            assert "# LEAK:" in hunk or "# FIX:" in hunk or only_imports, f"{fix.name}: a change that is not the fix:\n{hunk}"
    assert case.options("cpu").steps <= 30 and case.options("cuda").steps <= 30, "every verdict within 30 measured steps"


@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_scripts_import_only_torch_torchvision_and_the_standard_library(case):
    allowed = ALLOWED_IMPORTS | set(case.meta.get("extra_imports", []))
    for script in [case.leak, *case.fixes]:
        for node in ast.walk(ast.parse(script.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            for name in names:
                assert name.split(".")[0] in allowed, f"{script.name} imports {name}"
        assert 'if __name__ == "__main__":' in script.read_text(), f"{script.name} does not run by itself"
