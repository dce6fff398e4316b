"""generate() with the KV cache on a tiny causal LM (transformers' text-generation idiom).
Mistake: each call's full output (return_dict_in_generate, with past_key_values) kept in a list."""

import torch

LIBRARIES = ("transformers",)


def _build(device):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # its config notices are not the check's output

    big = str(device).startswith("cuda")
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=512 if big else 32,
                        n_layer=4 if big else 2, n_head=8 if big else 2, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = GPT2LMHeadModel(config).to(device).eval()
    prompt = torch.randint(1, 1000, (8 if big else 1, 16 if big else 4), device=device)
    return model, prompt


def make_step(device):
    model, prompt = _build(device)
    texts = []

    def step():
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, use_cache=True)
        texts.append(out[0, -1].item())
        del texts[:-100]

    return step


def make_mistake(device):
    model, prompt = _build(device)
    outputs = []

    def step():
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, use_cache=True,
                                 return_dict_in_generate=True)
        outputs.append(out)  # MISTAKE: keeps out.past_key_values (the whole KV cache) every call

    return step
