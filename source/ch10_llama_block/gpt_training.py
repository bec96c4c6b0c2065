"""A complete trainer for a small GPT, handed out (read-only) with the chapters
that need a trained model without teaching how to train one (ch09, ch10).

It holds chapter 7's exercises written out (the learning-rate schedule, the
evaluation, the training loop), so it comes only with those later chapters;
chapter 7's students write their own. ``learning_rate`` here follows a recipe
(step-based as nanoGPT's, or the fraction of a wall-clock budget spent),
``evaluate`` scores every token of a split once, and ``train`` runs until its
seconds or steps are used up, with a progress bar and, in a notebook, a live
loss curve (helpers.training).
"""
from __future__ import annotations

import math
import time

import torch

from helpers.i18n import t
from helpers.training import History, Recipe, choose_threads, cpu_limit, make_optimizer


def learning_rate(recipe: Recipe, step: int, elapsed: float, seconds: float | None,
                  total_steps: int | None = None) -> float:
    """Linear warm-up, then cosine decay to ``min_lr``.

    Step-based when ``recipe.max_steps`` is set (nanoGPT); otherwise the
    progress is the fraction of the wall-clock budget already spent, so the
    decay ends exactly when the time runs out (or, without a time budget, the
    fraction of ``total_steps`` done)."""
    if recipe.max_steps is not None:
        if step < recipe.warmup:
            return recipe.lr * (step + 1) / (recipe.warmup + 1)
        progress = (step - recipe.warmup) / max(1, recipe.max_steps - recipe.warmup)
    else:
        progress = elapsed / seconds if seconds else step / total_steps if total_steps else 0.0
        if progress < recipe.warmup:
            return recipe.lr * max(progress / recipe.warmup, 0.02)
        progress = (progress - recipe.warmup) / (1 - recipe.warmup)
    progress = min(max(progress, 0.0), 1.0)
    return recipe.min_lr + 0.5 * (1 + math.cos(math.pi * progress)) * (recipe.lr - recipe.min_lr)



@torch.no_grad()
def evaluate(model, data: torch.Tensor, block_size: int, batch_size: int = 64,
             max_tokens: int | None = None) -> float:
    """Mean cross-entropy over ``data`` cut into non-overlapping windows of
    ``block_size`` (every token of the split predicted once)."""
    was_training = model.training
    model.eval()
    n = (len(data) - 1) // block_size
    if max_tokens is not None:
        n = min(n, max(1, max_tokens // block_size))
    starts = torch.arange(n) * block_size
    total, count = 0.0, 0
    for i in range(0, n, batch_size):
        s = starts[i:i + batch_size]
        offs = torch.arange(block_size)
        x = data[s[:, None] + offs]
        y = data[s[:, None] + offs + 1]
        logits, _ = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), y.reshape(-1),
                                                 reduction="sum")
        total += loss.item()
        count += y.numel()
    model.train(was_training)
    return total / max(count, 1)



def train(model, get_batch, train_data: torch.Tensor, val_data: torch.Tensor, recipe: Recipe,
          seconds: float | None = None, steps: int | None = None, eval_every: float = 10.0,
          eval_tokens: int = 8_192, seed: int = 0, progress: bool = True, on_eval=None) -> History:
    """Train ``model`` in place until ``seconds`` of wall clock (or ``steps``
    steps, or the recipe's ``max_steps``) are used up.

    Every ``eval_every`` seconds the validation loss is estimated on the first
    ``eval_tokens`` tokens of ``val_data`` (that time counts against the
    budget, as in nanoGPT) and ``on_eval(history)`` is called (the live plot)."""
    # while grading, the grader gives each kernel its share of the cores: taking more would make
    # the kernels graded side by side fight over them (several times slower)
    torch.set_num_threads(recipe.threads and min(recipe.threads, cpu_limit()) or choose_threads())
    gen = torch.Generator().manual_seed(seed)
    opt = make_optimizer(model, recipe)
    hist = History()
    limit_steps = steps if steps is not None else recipe.max_steps
    bar = None
    by_time = limit_steps is None and seconds is not None
    if progress:
        from tqdm.auto import tqdm
        if by_time:      # progress toward the time budget: "37/180 s", the step count in the postfix
            bar = tqdm(total=round(seconds), leave=True, desc=t("训练", "training"),
                       bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}")
        else:
            bar = tqdm(total=limit_steps, unit="step", leave=True, desc=t("训练", "training"))
    model.train()
    start = time.perf_counter()
    last_eval = start
    ema = None
    step = 0
    # the budget is read once per step, after it (`done`): the last step is always evaluated
    done = (limit_steps is not None and limit_steps <= 0) or (seconds is not None and seconds <= 0)
    while not done:
        elapsed = time.perf_counter() - start
        lr = learning_rate(recipe, step, elapsed, seconds, limit_steps)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, recipe.n_ctx, recipe.batch_size, generator=gen)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if recipe.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        opt.step()
        step += 1
        hist.tokens += x.numel()
        value = loss.item()
        ema = value if ema is None else 0.9 * ema + 0.1 * value
        if bar is not None:
            if by_time:
                bar.n = min(time.perf_counter() - start, seconds)
            else:
                bar.update(1)
            if step % 10 == 0 or by_time and step == 1:
                bar.set_postfix(step=step, loss=f"{ema:.3f}", lr=f"{lr:.1e}")
        now = time.perf_counter()
        done = (limit_steps is not None and step >= limit_steps) or (seconds is not None and now - start >= seconds)
        if now - last_eval >= eval_every or done or step == 1:
            hist.steps.append(step)
            hist.train.append(ema)
            hist.val_steps.append(step)
            hist.val.append(evaluate(model, val_data, recipe.n_ctx, max_tokens=eval_tokens))
            last_eval = time.perf_counter()
            if on_eval is not None:
                on_eval(hist)
    hist.seconds = time.perf_counter() - start
    if bar is not None:
        if by_time:
            bar.n = min(hist.seconds, seconds)
            bar.set_postfix(step=step, loss=f"{ema:.3f}" if ema is not None else "-")
        bar.close()
    model.eval()
    return hist
