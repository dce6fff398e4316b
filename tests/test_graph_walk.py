"""The autograd-graph walk behind attribution's holders and its "autograd history" line."""

import torch

from leaklab.attribution import count_graph_nodes, saved_by_autograd


class _FreshWrapperNode:
    """A node whose ``next_functions`` makes a new wrapper on every access, as torch 2.11's
    autograd nodes do: a wrapper dropped after its visit frees its id for the next one."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    @property
    def next_functions(self):
        return ((_FreshWrapperNode(self.depth - 1), 0),) if self.depth > 1 else ()


class _Chain:
    def __init__(self, depth: int) -> None:
        self.grad_fn = _FreshWrapperNode(depth)


def test_every_node_of_a_chain_of_fresh_wrappers_is_counted():
    # Keyed by id(), this walk counted only the first few of the 50: a freed wrapper's id came back for the next.
    assert count_graph_nodes(_Chain(50)) == 50


def test_softmax_outputs_saved_in_a_running_statistic_are_found():
    torch.manual_seed(0)
    weight = torch.randn(8, 16, requires_grad=True)
    threshold = torch.tensor(0.0)
    for _ in range(5):
        confidence, _ = (torch.randn(32, 8) @ weight).softmax(dim=1).max(dim=1)
        threshold = 0.9 * threshold + 0.1 * confidence.mean()  # never detached: every step's graph is kept
    saved = [(path, t) for path, t in saved_by_autograd([("threshold", threshold)]) if t.shape == (32, 16)]
    assert len({t.untyped_storage().data_ptr() for _, t in saved}) == 5
    assert {path for path, _ in saved} == {"threshold.grad_fn (saved for backward)"}


def _kept_over_steps(update, steps: int = 12) -> torch.Tensor:
    torch.manual_seed(0)
    weight = torch.randn(16, 4, requires_grad=True)
    kept = torch.tensor(0.0)
    for _ in range(steps):
        out = torch.relu(torch.randn(8, 16) @ weight)
        kept = update(kept, out, weight)
    return kept


def test_a_growing_graph_is_read_as_a_running_sum_a_moving_average_or_an_average_of_parameters():
    from leaklab.attribution import graph_shape

    loss_total = _kept_over_steps(lambda kept, out, w: kept + torch.nn.functional.cross_entropy(out, torch.zeros(8, dtype=torch.long)))
    confidence = _kept_over_steps(lambda kept, out, w: 0.9 * kept + 0.1 * out.softmax(1).max(1).values.mean())
    weights = _kept_over_steps(lambda kept, out, w: 0.99 * kept + 0.01 * w)  # an EMA of the weights, outside no_grad
    hidden = _kept_over_steps(lambda kept, out, w: torch.tanh(kept + out.mean()))  # a recurrent state: no sum, no average
    assert (graph_shape(loss_total), graph_shape(confidence), graph_shape(weights), graph_shape(hidden)) == (
        "sum", "average", "parameters", None)
    assert graph_shape(_kept_over_steps(lambda kept, out, w: kept + out.mean(), steps=3)) is None  # too short a spine to read
    assert graph_shape(torch.tensor(1.0)) is None
