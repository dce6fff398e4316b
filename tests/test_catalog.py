"""CATALOG.md and the cases' own form: generated, fresh, and every case what a reader can copy."""

import ast
import dataclasses
import difflib
import re
import shutil
import sys

import pytest

from leaklab.cli import main
from leaklab.verdict import format_bytes
from leaklab_lab.cases import FAMILIES_PATH, ROOT, CaseError, discover, families, load_case
from leaklab_lab.catalog import (
    CATALOG_PATH,
    HARNESS_PATH,
    _figure,
    load_all_results,
    pages,
    render,
    render_harness,
    stale,
    write_pages,
)
from leaklab_lab.figures import FIGURE_SOURCES, NOT_MEASURED, TEXT_FIELDS, FigureError, Figures, hand_typed, one_line
from leaklab_lab.seeds import SeedClaimError, case_sections, claim_map

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


def test_harness_page_is_not_stale():
    assert stale() == [], (
        "docs/harness.md (or CATALOG.md) is stale: regenerate both with `leaklab catalog`\n"
        + "\n".join(list(difflib.unified_diff(HARNESS_PATH.read_text().splitlines() if HARNESS_PATH.is_file() else [],
                                               render_harness().splitlines(), lineterm=""))[:40])
    )


def test_a_hand_edit_of_either_generated_page_is_found_stale(tmp_path):
    for name in ("cases", "fixes", "results"):
        shutil.copytree(ROOT / name, tmp_path / name)
    catalog, harness, signatures, *entries = write_pages(tmp_path)
    assert (catalog, harness, signatures) == (tmp_path / "CATALOG.md", tmp_path / "docs" / "harness.md",
                                              tmp_path / "leaklab" / "catalog_signatures.json")
    assert sorted(path.stem for path in entries) == sorted(case.slug for case in CASES)
    assert all(path.parent == tmp_path / "docs" / "entries" for path in entries)
    assert stale(tmp_path) == []
    page = tmp_path / "docs" / "entries" / "retain_graph.md"
    page.write_text(page.read_text().replace("### Use instead", "### Do this (edited by hand)"))
    assert stale(tmp_path) == [page], "every entry's page is checked like the index"
    write_pages(tmp_path)
    signatures.write_text(signatures.read_text().replace('"holder": "hook_dict"', '"holder": "cache"'))
    assert stale(tmp_path) == [signatures], "the signatures the tool reads are checked like the pages"
    write_pages(tmp_path)
    harness.write_text(harness.read_text().replace("## Resources watched", "## Resources (edited by hand)"))
    assert stale(tmp_path) == [harness]
    harness.unlink()
    catalog.write_text(catalog.read_text().replace("## Families", "## Groups"))
    assert stale(tmp_path) == [catalog, harness]


def test_an_edited_input_is_rendered_again(tmp_path):
    """The pages are rendered once per state of their inputs: an edited case, fix or results file
    is a new state, never answered from the last rendering."""
    for name in ("cases", "fixes", "results"):
        shutil.copytree(ROOT / name, tmp_path / name)
    write_pages(tmp_path)
    toml = tmp_path / "cases" / "retain_graph.toml"
    toml.write_text(toml.read_text().replace('title = "', 'title = "Edited: ', 1))
    page = tmp_path / "docs" / "entries" / "retain_graph.md"
    assert {tmp_path / "CATALOG.md", page} <= set(stale(tmp_path))
    write_pages(tmp_path)
    assert "Edited: " in page.read_text() and stale(tmp_path) == []
    results = sorted((tmp_path / "results").glob("cpu-torch*.json"))[-1]
    results.write_text(results.read_text().replace('"python": "', '"python": "x', 1))
    assert stale(tmp_path) != [], "an edited results file renders the environment it names"


def test_the_catalog_opens_with_what_a_reader_with_a_symptom_needs():
    text, harness = render(), render_harness()
    top = text[:text.index("## Symptom index")]
    assert "How the harness was validated: [docs/harness.md](docs/harness.md)" in top
    order = [text.index(mark) for mark in ("## Symptom index", "## All cases", "## Families", '<a id="adam_state_memory">')]
    assert order == sorted(order)
    assert "| case | family |" in text
    for moved in ("## What the suite measured", "Flake gates", "## Across torch versions", "## Resources watched",
                  "## Timings and overheads", "### Sensitivity", "## Measured on"):
        assert moved not in text and moved in harness, moved


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """Explicit ``<a id>`` anchors and GitHub's heading anchors of a Markdown page."""
    found = set(re.findall(r'<a id="([^"]+)"', text))
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def test_every_link_in_both_generated_pages_resolves():
    generated = pages()
    for page, text in generated.items():
        prose = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
        for target in _LINK.findall(prose):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            assert where.exists(), f"{page.name}: link to {target} does not resolve ({where})"
            if anchor:
                assert where.suffix == ".md", f"{page.name}: an anchor on a file that is not a page: {target}"
                assert anchor in _anchors(generated.get(where, where.read_text())), f"{page.name}: no anchor {target}"


# --------------------------------------------------------------------------- families
# Families whose first case is being written; each must have a case once that case's TOML exists.
AWAITED = {"registered_callbacks": "hook_registered_every_forward", "threads_not_joined": "threads_never_joined",
           "mapped_files_kept": "mmap_checkpoints_kept", "descriptors_not_closed": "files_opened_in_getitem"}


def test_every_case_has_a_known_family_and_every_family_a_case():
    known = families()
    assert known and all(f.description and f.fix for f in known.values())
    for case in CASES:
        assert case.meta["family"] in known, f"{case.slug}: unknown family {case.meta['family']!r}"
        assert case.family.name == case.meta["family"]
    for name in known:
        if any(case.family.name == name for case in CASES):
            continue
        assert name in AWAITED, f"family {name!r} in {FAMILIES_PATH.name} has no case"
        assert not (ROOT / "cases" / f"{AWAITED[name]}.toml").is_file(), (
            f"cases/{AWAITED[name]}.toml exists but is not in family {name!r}")
    text = render()
    for family in known.values():
        assert f'<a id="family-{family.name}"></a>`{family.name}` | {family.description} | {family.fix} |' in text


@pytest.mark.parametrize("line, message", [("", "missing family"),
                                           ('family = "no_such_family"', "family 'no_such_family' is not in")])
def test_an_unknown_or_missing_family_is_an_error(tmp_path, line, message):
    for name in ("cases/loss_accumulation.py", "fixes/loss_accumulation.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    toml = tmp_path / "cases" / "loss_accumulation.toml"
    original = (ROOT / "cases" / "loss_accumulation.toml").read_text()
    assert 'family = "autograd_history"\n' in original
    toml.write_text(original.replace('family = "autograd_history"\n', line + "\n" if line else ""))
    with pytest.raises(CaseError, match=message):
        load_case(toml)


@pytest.fixture(scope="module")
def catalog_text() -> str:
    """The catalog as rendered from this checkout, once for the tests that only read it."""
    return render()


@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_every_case_has_its_entry_diff_and_marks(case, catalog_text):
    text = catalog_text
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
            # `# NO EFFECT:` marks a line a twin adds to show that it changes nothing (the seed's remedy
            # next to the real fix); it is not a fix, and the catalog shows it as such.
            marked = any(mark in hunk for mark in ("# LEAK:", "# FIX:", "# NO EFFECT:"))
            assert marked or only_imports, f"{fix.name}: a change that is not the fix:\n{hunk}"
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


# --------------------------------------------------------------------------- figures from results
@pytest.mark.parametrize("case", CASES, ids=[c.slug for c in CASES])
def test_no_figure_is_typed_by_hand(case):
    """Bytes and ratios in a case's text come from the results files, through placeholders."""
    for key in TEXT_FIELDS:
        found = hand_typed(case.meta.get(key, ""))
        assert not found, (f"cases/{case.slug}.toml: {key} has figures typed by hand {found}: write them as "
                           "placeholders {DEVICE:RUN:QUANTITY} (see cases/README.md)")


def test_hand_typed_figures_are_found_and_placeholders_and_shapes_are_not():
    assert hand_typed("grows 2.0 MiB/step, 4 MB vs 4 KB, 1.80 to 2.03x, 2× slower, 2,117,640 B") == [
        "2.0 MiB", "4 MB", "4 KB", "2.03x", "2×", "2,117,640 B"]
    assert hand_typed("grows {cpu:leak:cpu_tensors.per_step}/step; a 3x32x32 image, a 256×100 output") == []



def test_placeholders_render_the_committed_figures():
    case = next(c for c in CASES if c.slug == "hook_caching")
    results = load_all_results()
    runs = dict(results)[FIGURE_SOURCES["cpu"]]["runs"]
    leak, fix = runs["cpu/hook_caching:leak"], runs["cpu/hook_caching:fix"]
    text = Figures.from_results(results).render(case, "{cpu:leak:cpu_tensors.per_step}/step, {cpu:leak:verdict}, "
                                                      "{cpu:fix:cpu_tensors.level}, {cpu:leak:metric.held_tensors.last}")
    assert text == (f"{format_bytes(leak.resources['cpu_tensors'].per_step_bytes)}/step, {leak.verdict}, "
                    f"{format_bytes(fix.resources['cpu_tensors'].level_bytes)}, {int(leak.metrics['held_tensors'][-1]):,}")


@pytest.mark.parametrize("placeholder", [
    "{gpu:leak:verdict}",                      # no such device
    "{cpu:fixed:verdict}",                     # no such run
    "{cpu:hook_caching_other:verdict}",        # not one of the case's fix scripts
    "{cpu:leak:cpu_tensor.per_step}",          # no such resource
    "{cpu:leak:cpu_tensors.slope}",            # no such quantity
    "{cpu:leak:metric.held_tensors.median}",   # no such statistic
    "{cpu:leak:metric.not_returned.last}",     # no script returns that metric
])
def test_a_bad_placeholder_is_an_error_naming_the_case(placeholder):
    case = next(c for c in CASES if c.slug == "hook_caching")
    with pytest.raises(FigureError, match="case hook_caching"):
        Figures.from_results(load_all_results()).render(case, f"grows {placeholder}")


def test_a_device_the_case_does_not_run_on_is_an_error():
    case = next(c for c in CASES if c.devices == ["cuda"])
    with pytest.raises(FigureError, match=f"case {case.slug}.*does not run on cpu"):
        Figures.from_results(load_all_results()).render(case, "{cpu:leak:verdict}")


def test_a_figure_not_in_the_results_renders_as_not_measured_and_is_listed():
    case = next(c for c in CASES if c.slug == "hook_caching")
    figures = Figures.from_results([])  # no results file committed
    assert figures.render(case, "grows {cpu:leak:cpu_tensors.per_step}/step") == f"grows {NOT_MEASURED}/step"
    assert [(u.case, u.placeholder) for u in figures.unmeasured] == [("hook_caching", "{cpu:leak:cpu_tensors.per_step}")]


def test_strict_rendering_fails_on_a_figure_not_in_the_results(tmp_path):
    for name in ("cases", "fixes"):
        shutil.copytree(CATALOG_PATH.parent / name, tmp_path / name)
    (tmp_path / "results").mkdir()
    text = render(tmp_path)
    if NOT_MEASURED in text:  # placeholders exist, and no results file: strict must refuse
        with pytest.raises(FigureError):
            render(tmp_path, strict=True)
    assert "## Figures not measured yet" in text


def test_a_multi_line_error_stays_on_one_table_line():
    from leaklab.report import Report

    run = Report(device="cpu", steps=2, warmup=0, device_name="CPU",
                 error="RuntimeError: Caught RuntimeError in worker 0.\nOriginal Traceback:\n"
                       "  File 'x.py', line 3\nRuntimeError: a | b")
    cell = _figure(run)
    assert "\n" not in cell and "a \\| b" in cell and "Caught RuntimeError" in cell
    assert "\n" not in one_line("first\nsecond | third")


# --------------------------------------------------------------------------- the seeds' claims
def test_every_seed_claim_is_in_the_map_with_its_cases_or_no_case_yet():
    claims = claim_map(CASES)
    text = render()
    assert "## Seed claims → cases" in text
    for claim in claims:
        assert claim.claim.replace("|", "\\|") in text
    mapped = {slug for claim in claims for slug in claim.cases}
    naming = {c.slug for c in CASES if case_sections(c.meta["seed"])}
    assert mapped == naming, f"cases naming a seed section but not in the map: {naming - mapped}"


def test_seed_sections_are_parsed_from_the_seed_field():
    assert case_sections("000 §2.3, §6.1") == ["000 §2.3", "000 §6.1"]
    assert case_sections("000 §6.2, 001 §3.1") == ["000 §6.2", "001 §3.1"]
    assert case_sections("PyTorch FAQ") == [] and case_sections("none") == []


def test_a_case_naming_an_unlisted_section_or_missing_from_its_claims_fails(tmp_path):
    case = CASES[0]
    stray = dataclasses.replace(case, meta={**case.meta, "seed": "000 §9.9"})
    with pytest.raises(SeedClaimError, match="000 §9.9"):
        claim_map([stray])
    claims = tmp_path / "claims.toml"
    claims.write_text('[[claim]]\nsection = "000 §3.1"\nclaim = "x"\ncases = []\n')
    with pytest.raises(SeedClaimError, match="no claim of that section"):
        claim_map([c for c in CASES if case_sections(c.meta["seed"]) == ["000 §3.1"]], claims)


def test_a_gpu_suite_log_is_rendered_with_the_arguments_it_ran_with(tmp_path):
    from leaklab_lab.catalog import _suite_logs

    (tmp_path / "results").mkdir()
    tail = "=== 9 passed, 1 skipped in 80.50s (0:01:20) ===\n"
    (tmp_path / "results" / "h200-suite-torch9.log").write_text(tail + "cuda suite wall time: 85s (workers: 8)\n")
    (tmp_path / "results" / "h200-suite-part-torch9.log").write_text(
        tail + "cuda suite wall time: 70s (workers: none) with: -k not\\ slow_case \n")
    (tmp_path / "results" / "h200-suite-cut-torch9.log").write_text(tail)  # no wall time: a run cut short
    (tmp_path / "results" / "h200-serial-suite-torch9.log").write_text(tail + "serial cuda suite: exit 0 in 84s\n")
    lines = _suite_logs(tmp_path)
    assert lines[1:] == [
        "  - [h200-serial-suite-torch9.log](results/h200-serial-suite-torch9.log): `python3 -m pytest -m cuda`: "
        "9 passed, 1 skipped in 80.50s; wall time 84 s",
        "  - [h200-suite-part-torch9.log](results/h200-suite-part-torch9.log): `python3 -m pytest -m cuda` "
        "(arguments added: `-k not\\ slow_case`): 9 passed, 1 skipped in 80.50s; wall time 70 s",
        "  - [h200-suite-torch9.log](results/h200-suite-torch9.log): `python3 -m pytest -m cuda -n 8`: "
        "9 passed, 1 skipped in 80.50s; wall time 85 s",
    ]


def test_every_example_is_whole_code_to_paste():
    """An entry's Example is the leak's whole function (or statements), not lines cut from the
    middle of a closure: each part parses as Python on its own and holds its ``# LEAK:`` line."""
    import ast

    from leaklab_lab.cases import discover
    from leaklab_lab.catalog import _example

    for case in discover():
        example = _example(case)
        assert "# LEAK:" in example, case.slug
        for part in example.split("\n    ...\n"):
            ast.parse(part)  # a fragment cut from a closure does not parse (unexpected indent)


def test_a_results_file_is_labelled_with_the_card_that_ran_it():
    """An H100's matching rows once read "CPU" in docs/harness.md: only "H200" was known."""
    from leaklab_lab.catalog import _short_where

    def where(name: str, device: str) -> str:
        return _short_where({"environment": {"device_name": name, "device": device, "torch": "2.11.0+cu130"}})

    assert where("NVIDIA H100 80GB HBM3", "cuda") == "H100 (torch 2.11.0)"
    assert where("NVIDIA H200", "cuda") == "H200 (torch 2.11.0)"
    assert where("NVIDIA A100-SXM4-80GB", "cuda") == "GPU (torch 2.11.0)"
    assert where("Intel(R) Xeon(R) Processor", "cpu") == "CPU (torch 2.11.0)"


def test_a_case_answers_only_specific_rules_of_its_own_family(tmp_path):
    for folder in ("cases", "fixes"):
        (tmp_path / folder).mkdir()
        shutil.copy(ROOT / folder / "cyclic_garbage.py", tmp_path / folder)
    toml = (ROOT / "cases" / "cyclic_garbage.toml").read_text()
    assert 'answers = ["_collector_off"]' in toml
    for wrong in ("_lru", "_no_such_rule", "_graph"):
        (tmp_path / "cases" / "cyclic_garbage.toml").write_text(toml.replace('"_collector_off"', f'"{wrong}"'))
        with pytest.raises(CaseError, match="answers names"):
            load_case(tmp_path / "cases" / "cyclic_garbage.toml")
    (tmp_path / "cases" / "cyclic_garbage.toml").write_text(toml)
    assert load_case(tmp_path / "cases" / "cyclic_garbage.toml").meta["answers"] == ["_collector_off"]
