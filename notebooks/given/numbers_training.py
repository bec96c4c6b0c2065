"""The training loop chapter 11 trains its encoder–decoder with, given
read-only in that chapter's folder (``from numbers_training import train``).

It is a training step written in chapter 7 (zero the gradients, forward,
backward, clip, step, a warm-up and a decaying learning rate), so it comes
with chapter 11 only, after chapter 7 has been handed in.
"""
from __future__ import annotations

import time

import torch
from torch import nn

from helpers.ch11_encoder_decoder import PAD, SRC_LEN, make_batch, split_numbers
from helpers.i18n import t


def train(model, padding_mask, seconds: float = 60.0, steps: int | None = None, batch_size: int = 128,
          lr: float = 3e-3, seed: int = 0, progress: bool = True) -> dict:
    """Teacher-forced training on the training numbers, for ``seconds`` of wall
    clock (or exactly ``steps`` steps). Returns the loss curve, the timing and
    the numbers drawn, in the order they were drawn (``drawn``)."""
    from tqdm.auto import tqdm

    train_numbers, _ = split_numbers()
    by_length = [[n for n in train_numbers if len(str(n)) == k] for k in range(1, SRC_LEN + 1)]
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    losses, drawn, start, step = [], [], time.perf_counter(), 0
    bar = tqdm(total=steps if steps else int(seconds), disable=not progress,
               unit=t("步", "step") if steps else "s", leave=True)
    model.train()
    while True:
        elapsed = time.perf_counter() - start
        if (steps is not None and step >= steps) or (steps is None and elapsed >= seconds):
            break
        frac = step / steps if steps else elapsed / seconds
        for g in opt.param_groups:
            g["lr"] = lr * min(1.0, (step + 1) / 50) * (0.1 + 0.9 * (1 - frac))
        numbers = _sample(by_length, batch_size, gen)
        drawn += numbers
        batch = make_batch(numbers)
        src_mask = padding_mask(batch["src_lengths"], SRC_LEN)
        logits = model.decode(batch["tgt_in"], model.encode(batch["src"], src_mask), src_mask)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), batch["tgt_out"].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        step += 1
        if steps:
            bar.update(1)
        else:
            bar.n = min(int(time.perf_counter() - start), int(seconds))
            bar.refresh()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    bar.close()
    model.eval()
    return dict(losses=losses, steps=step, seconds=time.perf_counter() - start, drawn=drawn)


def _sample(by_length, batch_size, gen):
    """Numbers with every length (1 to 4 digits) equally likely: there are only
    ten 1-digit numbers, so uniform sampling would hardly ever show them."""
    lengths = torch.randint(len(by_length), (batch_size,), generator=gen).tolist()
    picks = torch.rand(batch_size, generator=gen).tolist()
    return [by_length[k][int(u * len(by_length[k]))] for k, u in zip(lengths, picks)]
