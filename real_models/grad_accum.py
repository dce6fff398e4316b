"""Gradient accumulation on a tiny causal LM (transformers, from a config), as in transformers'
run_clm_no_trainer.py: each micro-batch's loss divided by the accumulation steps and backpropagated,
the optimizer stepped every ACCUMULATION micro-batches, and ``total_loss += loss.detach().float()``
for the epoch's mean. One call of the step is one micro-batch. Mistake: ``total_loss += loss``,
which chains every micro-batch's graph onto the running total."""

import torch

LIBRARIES = ("transformers",)
ACCUMULATION = 4


def _build(device):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # its config notices are not the check's output
    big = str(device).startswith("cuda")
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=512 if big else 32,
                        n_layer=4 if big else 2, n_head=8 if big else 2, bos_token_id=1, eos_token_id=2)
    model = GPT2LMHeadModel(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 1000, (16 if big else 2, 128 if big else 16), device=device)
    return model, optimizer, ids


def make_step(device):
    model, optimizer, ids = _build(device)
    state = {"micro": 0, "total_loss": 0}

    def step():
        loss = model(input_ids=ids, labels=ids).loss / ACCUMULATION
        loss.backward()
        state["total_loss"] += loss.detach().float()
        state["micro"] += 1
        if state["micro"] % ACCUMULATION == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step


def make_mistake(device):
    model, optimizer, ids = _build(device)
    state = {"micro": 0, "total_loss": 0}

    def step():
        loss = model(input_ids=ids, labels=ids).loss / ACCUMULATION
        loss.backward()
        state["total_loss"] += loss  # MISTAKE: not loss.detach().float(): every graph stays linked
        state["micro"] += 1
        if state["micro"] % ACCUMULATION == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step
