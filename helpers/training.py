"""Chapter 7's trainer: a recipe, a training loop with a progress bar and a
live loss curve, and a validation loss measured over a whole split.

The model, the tokenizer and ``get_batch`` are the student's (the notebook's
exercises); this module only drives them, so the same loop serves the
notebook and ``bench/train_gpt.py``.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field, replace

import torch

from .i18n import t
from .runtime import under_nbgrader


@dataclass(frozen=True)
class Recipe:
    """Everything that decides how fast a small GPT learns on a CPU."""
    name: str
    n_layer: int
    n_head: int
    d_model: int
    n_ctx: int              # block size: characters of context
    batch_size: int
    lr: float               # peak learning rate (AdamW)
    min_lr: float           # at the end of the cosine decay
    warmup: float           # warm-up: fraction of the run (time-based) or steps (step-based)
    max_steps: int | None = None   # None: the schedule follows the wall clock
    weight_decay: float = 0.1
    beta2: float = 0.99
    grad_clip: float = 1.0
    dropout: float = 0.0
    threads: int = 2

    def as_dict(self) -> dict:
        return asdict(self)


# Ours: chosen by measurement on a 2-core CPU (see bench/results/ and the chapter text).
COURSE_RECIPE = Recipe(name="course", n_layer=3, n_head=4, d_model=96, n_ctx=64, batch_size=16,
                       lr=4e-3, min_lr=4e-4, warmup=0.03)

# nanoGPT's README CPU command for shakespeare_char (eval and log settings aside).
NANOGPT_RECIPE = Recipe(name="nanogpt_cpu", n_layer=4, n_head=4, d_model=128, n_ctx=64, batch_size=12,
                        lr=1e-3, min_lr=1e-4, warmup=100, max_steps=2000)


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


@dataclass
class History:
    steps: list[int] = field(default_factory=list)
    train: list[float] = field(default_factory=list)       # smoothed training loss at each eval
    val_steps: list[int] = field(default_factory=list)
    val: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0


def make_optimizer(model, recipe: Recipe) -> torch.optim.Optimizer:
    """AdamW; matrices get weight decay, biases, LayerNorm and embeddings do not."""
    decay, no_decay = [], []
    seen = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (decay if p.dim() >= 2 and "wte" not in name and "wpe" not in name else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": recipe.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, recipe.beta2))


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
    torch.set_num_threads(min(recipe.threads, torch.get_num_threads()) if under_nbgrader() else recipe.threads)
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
    while True:
        elapsed = time.perf_counter() - start
        if limit_steps is not None and step >= limit_steps:
            break
        if seconds is not None and elapsed >= seconds:
            break
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



def scaled(recipe: Recipe, **changes) -> Recipe:
    """A copy of ``recipe`` with some fields changed."""
    return replace(recipe, **changes)


# ------------------------------------------------------------------ live loss curve

def loss_figure(history: History, fig=None):
    """Training (smoothed) and validation loss against steps."""
    import matplotlib.pyplot as plt

    from . import plots

    plots.setup()
    if fig is None:
        fig = plt.figure(figsize=(7, 3.6))
    fig.clear()
    ax = fig.subplots()
    ax.plot(history.steps, history.train, "o-", ms=3, label=plots.label("训练（平滑）", "train (smoothed)"))
    ax.plot(history.val_steps, history.val, "s-", ms=3, label=plots.label("验证", "validation"))
    ax.set_xlabel(plots.label("步数", "step"))
    ax.set_ylabel(plots.label("交叉熵损失", "cross-entropy loss"))
    if history.val:
        ax.set_title(plots.label(f"验证损失 {history.val[-1]:.3f}（第 {history.val_steps[-1]} 步）",
                                 f"validation loss {history.val[-1]:.3f} (step {history.val_steps[-1]})"))
    ax.legend()
    fig.tight_layout()
    return fig


def live_loss_plot():
    """A callback for ``train(on_eval=...)`` that redraws the loss curve in
    place in a notebook; None under grading or outside IPython."""
    if under_nbgrader():
        return None
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        return None
    if get_ipython() is None:
        return None
    import matplotlib.pyplot as plt

    state: dict = {}

    def on_eval(history: History):
        fig = state.get("fig")
        fig = loss_figure(history, fig)
        state["fig"] = fig
        if "handle" not in state:
            state["handle"] = display(fig, display_id=True)
            plt.close(fig)          # shown through the handle only, not again at the end of the cell
        else:
            state["handle"].update(fig)

    return on_eval
