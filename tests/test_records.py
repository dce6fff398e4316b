"""A record of plain data (a loss history of floats) is not a leak of what matters; anything
else that piles up still is (issue 28's anchors), and --strict keeps any growth a leak."""

import pytest
import torch

from leaklab.growth import is_plain
from leaklab.report import EXIT_BOUNDED, EXIT_LEAK
from leaklab.runner import RunOptions, run_factory
from leaklab.verdict import BOUNDED, GROWS


def training(keep):
    """A small training step that keeps ``keep(loss)`` per step in a list."""
    def factory(device):
        torch.manual_seed(0)
        model = torch.nn.Linear(32, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(16, 32), torch.randint(0, 4, (16,))
        history = []

        def step():
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            history.append(keep(loss))

        return step
    return factory


def test_a_loss_history_of_floats_is_bounded_with_a_note_and_strict_calls_it_growth():
    report = run_factory(training(lambda loss: loss.item()), "cpu")
    assert report.verdict == BOUNDED and report.exit_code == EXIT_BOUNDED, report.summary()
    assert report.records["resources"] == ["python_objects"] and "float/step in history" in report.records["what"]
    assert "record of plain data" in report.summary() and report.long_pass_steps == 0
    strict = run_factory(training(lambda loss: loss.item()), "cpu", RunOptions(strict=True))
    assert strict.verdict == GROWS and strict.exit_code == EXIT_LEAK and strict.records is None, strict.summary()


def test_a_record_that_would_pass_its_budget_within_the_horizon_grows():
    report = run_factory(training(lambda loss: loss.item()), "cpu", RunOptions(horizon=10**12))
    assert report.verdict == GROWS and report.records is None, report.summary()


def test_small_dicts_of_numbers_are_records_too():
    report = run_factory(training(lambda loss: {"loss": loss.item(), "lr": 0.1}), "cpu")
    assert report.verdict == BOUNDED and report.records, report.summary()


@pytest.mark.parametrize("keep", [
    pytest.param(lambda loss: loss, id="the loss tensor"),
    pytest.param(lambda loss: loss.detach(), id="a detached tensor"),
    pytest.param(lambda loss: (lambda: None), id="a callable"),
    pytest.param(lambda loss: bytes(256), id="bytes"),
    pytest.param(lambda loss: str(loss.item()) * 400, id="a long string"),
])
def test_anything_but_plain_data_still_grows(keep):
    report = run_factory(training(keep), "cpu")
    assert report.verdict == GROWS and report.records is None, report.summary()


def test_what_counts_as_plain_data():
    assert all(is_plain(v) for v in (1, 1.5, True, None, "loss", (1, 2.0), {"loss": 0.5, "step": 3}))
    assert not any(is_plain(v) for v in (b"x", "x" * 300, torch.ones(1), print, [1.0], {"t": torch.ones(1)},
                                         tuple(range(100)), lambda: None))
