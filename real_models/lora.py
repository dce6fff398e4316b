"""PEFT LoRA on a tiny causal LM (transformers, from a config): get_peft_model with a LoraConfig on
the attention projection, AdamW over the adapter's parameters only, gradient clipping, as in PEFT's
causal-LM examples. Mistake: the gradient norm that clip_grad_norm_ returns kept for logging as the
tensor, one per step."""

import warnings

import torch

LIBRARIES = ("transformers", "peft")


def _build(device):
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # its config notices are not the check's output
    big = str(device).startswith("cuda")
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=512 if big else 32,
                        n_layer=4 if big else 2, n_head=8 if big else 2, bos_token_id=1, eos_token_id=2)
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["c_attn"], fan_in_fan_out=True,
                      task_type="CAUSAL_LM")
    with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5 (a FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        model = get_peft_model(GPT2LMHeadModel(config), lora)
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    ids = torch.randint(0, 1000, (16 if big else 2, 128 if big else 16), device=device)
    return model, trainable, optimizer, ids


def make_step(device):
    model, trainable, optimizer, ids = _build(device)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def make_mistake(device):
    model, trainable, optimizer, ids = _build(device)
    grad_norms = []

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        grad_norms.append(torch.nn.utils.clip_grad_norm_(trainable, 1.0))  # MISTAKE: the tensor, not .item()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step
