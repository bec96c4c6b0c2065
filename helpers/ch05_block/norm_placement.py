"""ch05's experiment: where the LayerNorm sits (Pre-LN or Post-LN) in a deep
stack of blocks. Gradient norms per layer at initialisation, and a toy
training run with and without learning-rate warm-up.

Every function takes ``make_block``, a function that returns one new block
(the notebook passes the student's Pre-LN ``Block`` and a Post-LN variant),
so nothing here knows how a block is written."""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from ..plots import figure_function, label, setup


class TinyLM(nn.Module):
    """token + position embedding -> blocks -> LayerNorm -> linear head."""

    def __init__(self, make_block: Callable[[], nn.Module], n_layers: int, d: int, vocab: int, n_ctx: int):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(n_ctx, d)
        self.blocks = nn.ModuleList(make_block() for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        for name, p in self.blocks.named_parameters():   # Xavier uniform, zero biases (the paper names none)
            if p.dim() >= 2:
                nn.init.xavier_uniform_(p)
            elif "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[-1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def toy_batch(batch: int, n: int, vocab: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A task that needs attention: the target at position t is the token at
    t - 1 (the first position repeats itself)."""
    x = torch.randint(vocab, (batch, n), generator=generator)
    y = torch.cat([x[:, :1], x[:, :-1]], dim=1)
    return x, y


def grad_norms(make_block: Callable[[], nn.Module], n_layers: int = 24, d: int = 64, vocab: int = 16,
               n: int = 16, batch: int = 16, seed: int = 0) -> list[float]:
    """The norm of the gradient of the loss with respect to each block's
    parameters, at initialisation, first block first."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _grad_norms(make_block, n_layers, d, vocab, n, batch, seed)
    finally:
        torch.set_num_threads(threads)


def _grad_norms(make_block, n_layers, d, vocab, n, batch, seed):
    torch.manual_seed(seed)
    model = TinyLM(make_block, n_layers, d, vocab, n)
    x, y = toy_batch(batch, n, vocab, torch.Generator().manual_seed(seed))
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    return [math.sqrt(sum(float(p.grad.pow(2).sum()) for p in b.parameters() if p.grad is not None))
            for b in model.blocks]


def train(make_block: Callable[[], nn.Module], n_layers: int = 12, d: int = 64, vocab: int = 16, n: int = 16,
          batch: int = 32, steps: int = 150, lr: float = 1e-3, warmup: int = 0, seed: int = 0) -> list[float]:
    """Adam on the toy task; the learning rate rises linearly over ``warmup``
    steps (0: full rate from step 1). Returns the loss at every step."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)         # tiny tensors: one thread is fastest
    try:
        return _train(make_block, n_layers, d, vocab, n, batch, steps, lr, warmup, seed)
    finally:
        torch.set_num_threads(threads)


def _train(make_block, n_layers, d, vocab, n, batch, steps, lr, warmup, seed):
    torch.manual_seed(seed)
    model = TinyLM(make_block, n_layers, d, vocab, n)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    gen = torch.Generator().manual_seed(seed + 1)
    losses = []
    for _ in range(steps):
        x, y = toy_batch(batch, n, vocab, gen)
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def first_steps(make_block: Callable[[], nn.Module], steps: int = 3, n_layers: int = 8, d: int = 32,
                vocab: int = 16, n: int = 16, batch: int = 16, lr: float = 5e-3, seed: int = 0) -> list[dict]:
    """The first ``steps`` Adam updates of ``train`` (same model, data and
    learning rate), measured: for each step, the gradient norm of the blocks'
    parameters, the mean size |Δθ| of one parameter's update, and how far the
    update moved the model's output (the RMS change of the logits on a fixed
    batch of 64 sequences)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        model = TinyLM(make_block, n_layers, d, vocab, n)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed + 1)           # the batches ``train`` draws
        probe, _ = toy_batch(64, n, vocab, torch.Generator().manual_seed(seed + 99))
        params = list(model.blocks.parameters())
        rows = []
        for step in range(1, steps + 1):
            x, y = toy_batch(batch, n, vocab, gen)
            with torch.no_grad():
                before_out = model(probe)
            before = [p.detach().clone() for p in params]
            loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            grad = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params))
            opt.step()
            update = torch.cat([(p.detach() - b).flatten() for p, b in zip(params, before)])
            with torch.no_grad():
                moved = float((model(probe) - before_out).pow(2).mean().sqrt())
            rows.append({"step": step, "grad_norm": grad, "mean_update": float(update.abs().mean()),
                         "output_change": moved})
        return rows
    finally:
        torch.set_num_threads(threads)


@figure_function
def grad_norm_figure(pre: list[float], post: list[float]):
    """Two panels side by side, same scale: gradient norm per layer."""
    import matplotlib.pyplot as plt

    setup()
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    layers = range(1, len(pre) + 1)
    for ax, norms, color, title in ((axes[0], pre, "C0", label("Pre-LN：x + f(LN(x))", "Pre-LN: x + f(LN(x))")),
                                    (axes[1], post, "C3", label("Post-LN：LN(x + f(x))", "Post-LN: LN(x + f(x))"))):
        ax.bar(layers, norms, color=color, alpha=0.8)
        ax.set_ylim(0, 1.2 * max(max(pre), max(post)))
        ax.set_title(title)
        ax.set_xlabel(label("层（1 = 最靠近输入）", "layer (1 = nearest the input)"))
        ax.text(0.02, 0.95, label(f"最大/最小 = {max(norms) / min(norms):.1f}×",
                                  f"max/min = {max(norms) / min(norms):.1f}×"),
                transform=ax.transAxes, va="top")
    axes[0].set_ylabel(label("该层参数的梯度范数", "gradient norm of the layer's parameters"))
    fig.suptitle(label(f"初始化时，{len(pre)} 层深的堆叠里每一层收到的梯度",
                       f"gradient reaching each layer of a {len(pre)}-block stack at initialisation"))
    fig.tight_layout()
    return fig


@figure_function
def training_figure(curves: dict[str, list[float]], floor: float | None = None):
    """Loss against step, one line per run."""
    import matplotlib.pyplot as plt

    setup()
    fig, ax = plt.subplots(figsize=(8, 3.8))
    for i, (name, losses) in enumerate(curves.items()):
        ax.plot(range(1, len(losses) + 1), losses, label=name, color=f"C{i}")
    if floor is not None:
        ax.axhline(floor, color="gray", ls=":", lw=1,
                   label=label(f"{floor:.2f}：均匀乱猜的损失", f"{floor:.2f}: loss of a uniform guess"))
    ax.set_xlabel(label("训练步数", "training step"))
    ax.set_ylabel(label("交叉熵损失", "cross-entropy loss"))
    ax.legend()
    fig.tight_layout()
    return fig


@figure_function
def placement_diagram():
    """Post-LN and Pre-LN sublayers side by side: where the LayerNorm sits
    relative to the residual path (drawn in blue)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    setup()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    sub = label("子层 F\n（注意力或 FFN）", "sublayer F\n(attention or FFN)")
    layouts = (
        (label("Post-LN（原论文）：x ← LN(x + F(x))", "Post-LN (original paper): x ← LN(x + F(x))"),
         [("F", sub, 1.6), ("+", None, 2.9), ("LN", "LayerNorm", 3.9)]),
        (label("Pre-LN（GPT-2 之后）：x ← x + F(LN(x))", "Pre-LN (GPT-2 onwards): x ← x + F(LN(x))"),
         [("LN", "LayerNorm", 1.4), ("F", sub, 2.6), ("+", None, 3.9)]),
    )
    for ax, (title, parts) in zip(axes, layouts):
        ax.set_xlim(0, 4)
        ax.set_ylim(0, 5)
        ax.axis("off")
        ax.set_title(title, fontsize=11)
        ys = {kind: y for kind, _, y in parts}
        ax.text(2, 0.25, "x", ha="center", fontsize=12)
        ax.text(2, 4.5, label("输出", "out"), ha="center", va="bottom", fontsize=11)
        y_prev = 0.5
        for kind, text, y in parts:
            if kind == "+":
                ax.add_patch(plt.Circle((2, y), 0.22, fc="white", ec="0.3"))
                ax.text(2, y, "+", ha="center", va="center", fontsize=14)
                top, bottom = y + 0.22, y - 0.22
            else:
                color = "#fce5cd" if kind == "LN" else "#cfe2f3"
                ax.add_patch(FancyBboxPatch((1.2, y - 0.35), 1.6, 0.7, boxstyle="round,pad=0.04", fc=color, ec="0.4"))
                ax.text(2, y, text, ha="center", va="center", fontsize=10)
                top, bottom = y + 0.39, y - 0.39
            ax.annotate("", xy=(2, bottom), xytext=(2, y_prev), arrowprops=dict(arrowstyle="->", color="0.3"))
            y_prev = top
        ax.annotate("", xy=(2, 4.45), xytext=(2, y_prev), arrowprops=dict(arrowstyle="->", color="0.3"))
        # the residual path: from below the first box, around the right, into the "+"
        y_plus = ys["+"]
        ax.plot([2, 3.3, 3.3], [0.8, 0.8, y_plus], color="tab:blue", lw=2.2)
        ax.annotate("", xy=(2.22, y_plus), xytext=(3.3, y_plus),
                    arrowprops=dict(arrowstyle="->", color="tab:blue", lw=2.2))
        on_path = label("残差路上有 LayerNorm" if parts[-1][0] == "LN" else "残差路上什么都没有",
                        "a LayerNorm on the residual path" if parts[-1][0] == "LN" else "nothing on the residual path")
        ax.text(3.4, (0.8 + y_plus) / 2, label("残差", "residual"), color="tab:blue", fontsize=10, rotation=90,
                va="center")
        ax.text(2, -0.2, on_path, ha="center", fontsize=10, color="0.25")
    fig.tight_layout()
    return fig
