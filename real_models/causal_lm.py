"""A tiny causal LM (transformers, from a config) trained with AdamW and gradient clipping, as in
transformers' run_clm_no_trainer.py. Mistake: the loss tensor (and its graph) kept for logging."""

import torch

LIBRARIES = ("transformers",)


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
    losses = []

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        del losses[:-100]

    return step


def make_mistake(device):
    model, optimizer, ids = _build(device)
    losses = []

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss)  # MISTAKE: the tensor, not loss.item()

    return step
