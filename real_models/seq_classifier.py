"""A tiny BERT sequence classifier with transformers.get_linear_schedule_with_warmup, as in
transformers' run_glue_no_trainer.py. Mistake: every step's logits kept in a list (with their graph)."""

import torch

LIBRARIES = ("transformers",)


def _build(device):
    from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup
    from transformers.utils import logging

    logging.set_verbosity_error()  # its config notices are not the check's output

    big = str(device).startswith("cuda")
    config = BertConfig(vocab_size=1000, hidden_size=256 if big else 32, num_hidden_layers=4 if big else 2,
                        num_attention_heads=4 if big else 2, intermediate_size=1024 if big else 64, num_labels=3)
    model = BertForSequenceClassification(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=10, num_training_steps=100_000)
    ids = torch.randint(0, 1000, (32 if big else 4, 64 if big else 16), device=device)
    labels = torch.randint(0, 3, (ids.shape[0],), device=device)
    return model, optimizer, scheduler, ids, labels


def make_step(device):
    model, optimizer, scheduler, ids, labels = _build(device)

    def step():
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def make_mistake(device):
    model, optimizer, scheduler, ids, labels = _build(device)
    all_logits = []

    def step():
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        all_logits.append(out.logits)  # MISTAKE: not out.logits.detach().cpu(), and never cleared

    return step
