"""What chapter 7's training needs that is not the lesson.

The loss, the learning-rate schedule, the training step, the evaluation, the
checkpoint and the training loop are the student's (the chapter's exercises):
the loop calls ``Run``, never the other way round. This module keeps the rest:
the recipes, the optimizer's parameter groups, the time budget with its
progress bar and live loss curve (``Run``), a schedule fixed in steps once the
run has timed its steps (kept in the checkpoint, so a resumed run follows it),
the checkpoint saved at every evaluation and when the run is stopped, a thread
count chosen from the CPUs that are actually free and checked again during the
run, and the closing line that says when the machine, not the recipe, was the
limit.

Nothing here trains a model by itself. The chapters that need a trained model
without teaching how (ch09, ch10) get a complete trainer in their own folder.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from .i18n import t
from .plots import figure_function
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
    threads: int | None = None      # None: chosen from the CPUs that are free (``choose_threads``)

    def as_dict(self) -> dict:
        return asdict(self)


# Ours: chosen by measurement on a 2-core CPU (the chapter says how).
COURSE_RECIPE = Recipe(name="course", n_layer=3, n_head=4, d_model=96, n_ctx=64, batch_size=16,
                       lr=4e-3, min_lr=4e-4, warmup=0.03)

# nanoGPT's README CPU command for shakespeare_char (eval and log settings aside).
NANOGPT_RECIPE = Recipe(name="nanogpt_cpu", n_layer=4, n_head=4, d_model=128, n_ctx=64, batch_size=12,
                        lr=1e-3, min_lr=1e-4, warmup=100, max_steps=2000)


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


def scaled(recipe: Recipe, **changes) -> Recipe:
    """A copy of ``recipe`` with some fields changed."""
    return replace(recipe, **changes)


# ------------------------------------------------------------------ live loss curve

@figure_function
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


# ------------------------------------------------------------------ threads: only as many as are free

_TORCH_DEFAULT_THREADS = torch.get_num_threads()    # PyTorch's own choice at import: the physical cores


def _cgroup_quota(root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")) -> float | None:
    """CPUs a container may use by its quota (cgroup v2 ``cpu.max``, or v1's
    ``cfs_quota_us / cfs_period_us``); None when there is no quota."""
    places = [root / "cpu.max"]
    try:
        for line in own.read_text().splitlines():
            if line.startswith("0::"):
                places.append(root / line[3:].lstrip("/") / "cpu.max")
    except OSError:
        pass
    for path in places:
        try:
            quota, period = path.read_text().split()[:2]
        except (OSError, ValueError):
            continue
        return None if quota == "max" else int(quota) / int(period)
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def cpu_limit() -> int:
    """The most threads worth asking for: the CPUs this process may run on
    (``os.sched_getaffinity``), no more than a container's CPU quota, and no
    more than PyTorch's default (the physical cores). Under nbgrader, the
    threads the grader gave this kernel."""
    if under_nbgrader():
        return max(1, torch.get_num_threads())
    n = os.cpu_count() or 1
    try:
        n = min(n, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        pass
    quota = _cgroup_quota()
    if quota is not None:
        n = min(n, max(1, int(quota)))
    return max(1, min(n, _TORCH_DEFAULT_THREADS))


def _own_running() -> int | None:
    """Threads of this process that are running right now (Linux), else None."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    n = 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                n += f.read().rsplit(")", 1)[1].split()[0] == "R"
        except (OSError, IndexError):
            continue
    return n


def busy_elsewhere(samples: int = 8, gap: float = 0.005, own_load: float = 0.0) -> float:
    """How many CPUs other programs keep busy right now.

    On Linux: the runnable tasks of the whole machine (``/proc/loadavg``)
    minus this process's own running threads, averaged over a few samples a
    few milliseconds apart (immediate, unlike the load average). Elsewhere
    (macOS): the one-minute load average less ``own_load``, the CPUs this
    process itself kept busy lately (a training run counts in the load average
    too); 0 where there is no load average, as on Windows."""
    readings = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            break
        own = _own_running()
        if own is None:
            break
        readings.append(max(0, running - max(own, 1)))
        if i + 1 < samples:
            time.sleep(gap)
    if readings:
        return sum(readings) / len(readings)
    try:
        return max(0.0, os.getloadavg()[0] - own_load)
    except (AttributeError, OSError):
        return 0.0


def choose_threads(elsewhere: float | None = None, limit: int | None = None) -> int:
    """Threads for training: the CPUs left free by other programs, at least 1,
    at most ``cpu_limit()``. Asking for more threads than there are free CPUs
    is worse than asking for fewer: PyTorch's threads wait for each other at
    every operation, so one thread that loses its CPU holds all the others up
    (two busy programs on a shared two-core machine: 121 tokens/s with 2
    threads, 3,070 with 1, in one sitting)."""
    limit = cpu_limit() if limit is None else limit
    if under_nbgrader():
        return limit
    elsewhere = busy_elsewhere() if elsewhere is None else elsewhere
    return max(1, min(limit, math.floor(limit - elsewhere + 0.5)))


# ------------------------------------------------------------------ the chapter's training run

@dataclass(frozen=True)
class Plan:
    """What one training step needs to know about the whole run: the
    schedule's length and shape, and the gradient clipping threshold."""
    max_steps: int          # the schedule reaches its floor here
    warmup_steps: int
    lr: float               # the peak
    min_lr: float           # the floor
    grad_clip: float = 1.0


def plan_for(recipe: Recipe, max_steps: int) -> Plan:
    """``recipe``'s schedule stretched over ``max_steps`` steps (its warm-up a
    fraction of them, at least one step)."""
    warmup = max(1, round(recipe.warmup * max_steps)) if recipe.warmup < 1 else int(recipe.warmup)
    return Plan(max_steps=max(int(max_steps), warmup + 1), warmup_steps=warmup, lr=recipe.lr,
                min_lr=recipe.min_lr, grad_clip=recipe.grad_clip)


def step_generator(step: int, seed: int = 0) -> torch.Generator:
    """The random generator of one step's batch. Each step has its own, so a
    run resumed from a checkpoint at step k draws the same batches as a run
    that never stopped."""
    return torch.Generator().manual_seed(seed * 1_000_003 + step)


def seed_step(step: int, seed: int = 0) -> None:
    """Seed PyTorch's own random numbers (dropout's) from the step alone, as
    ``step_generator`` does for the batch: a run resumed at step k drops the
    same units as the run that never stopped, with nothing to keep in the
    checkpoint. The seeds differ from the batches' by 2^31: the CPU generator
    keeps only the low 32 bits of a seed, so an offset of 2^32 would give
    dropout the very numbers the batch was drawn from."""
    torch.manual_seed((1 << 31) + (seed * 1_000_003 + step) % (1 << 31))


def fixed_batches(get_batch, data: torch.Tensor, block_size: int, n: int = 8, batch_size: int = 64,
                  seed: int = 1234) -> list:
    """The same ``n`` batches every time: an evaluation on them costs a fixed,
    small time, and two evaluations differ only because the model did."""
    gen = torch.Generator().manual_seed(seed)
    return [get_batch(data, block_size, batch_size, generator=gen) for _ in range(n)]


def fix_schedule(recipe: Recipe, max_steps: int) -> Recipe:
    """``recipe`` with its schedule fixed in steps: it ends at ``max_steps``,
    and its warm-up is a number of steps (the fraction it had, of
    ``max_steps``, at least one). What a checkpoint keeps, so that a resumed
    run follows the same schedule."""
    plan = plan_for(recipe, max_steps)
    return replace(recipe, max_steps=plan.max_steps, warmup=plan.warmup_steps)


class Run:
    """The time budget of a training loop written in the notebook, and
    everything around it that is not the lesson. The loop (chapter 7's
    exercise 10) asks and tells it, in this order: ``going(step)`` before a
    step; ``plan(step)`` for the step's schedule; ``log(done, loss, tokens)``
    after it, with the number of steps done; ``time_to_evaluate(done)``, and
    ``evaluated(done, val_loss)`` after an evaluation it asked for; finally
    ``finish(done, val_loss)``, which returns the run's ``History``. The cell
    that runs the loop wraps it in ``with run:`` (the stop button).

    The schedule. With ``steps``, or with a recipe whose schedule is already
    fixed in steps (``recipe.max_steps``, as a checkpoint keeps it), it is
    known from the start. With ``seconds`` and a recipe on the wall clock,
    the run first times its steps for a moment (3% of the budget, between 2 s
    and ``eval_every``; the speed is taken from the later half, as the first
    steps are slower); at its first evaluation it fixes the schedule in steps
    from that speed: it ends at the step where the time is expected to run
    out. ``run.recipe`` is then the recipe with that
    schedule (``max_steps`` and ``warmup`` in steps), and ``plan(step)`` never
    changes again. The run stops at ``max_steps`` or when the time runs out,
    whichever comes first; ``going`` keeps time for the final evaluation.

    The checkpoint. With ``checkpoint`` (a path) and ``save(path, step,
    recipe)``, the run saves at every evaluation and at the end, each time
    with the fixed schedule in ``recipe``; never before the schedule is fixed.
    Inside ``with run:``, an interrupt (the notebook's stop button) does not
    break a step or an evaluation in the middle: what is under way finishes
    (an evaluation saves its checkpoint as usual), ``going`` raises
    ``KeyboardInterrupt``, and leaving the ``with`` saves the checkpoint at
    that step, says where, and lets the interrupt go on. A second interrupt
    stops at once (without saving: the model may be half-updated). Each save
    writes a new file and then renames it, so an old checkpoint is never
    half-overwritten.

    A resumed run: ``Run(recipe_from_the_checkpoint, start_step=step, ...)``
    follows the checkpoint's schedule. A time-budgeted recipe whose schedule
    is not fixed cannot be resumed at ``start_step > 0`` (its schedule would
    be a new one: ``ValueError``).

    The thread count is chosen from the free CPUs and checked again at every
    evaluation. Everything runs in the caller's thread: the cell stays busy
    until ``finish``."""

    def __init__(self, recipe: Recipe, seconds: float | None = None, steps: int | None = None,
                 eval_every: float = 10.0, progress: bool = True, plot: bool = True, start_step: int = 0,
                 checkpoint: str | Path | None = None, save=None):
        if seconds is not None and steps is not None:
            raise ValueError("give either seconds or steps")
        if seconds is None and steps is None and recipe.max_steps is None:
            raise ValueError("give seconds or steps, or a recipe whose schedule is fixed in steps (max_steps)")
        if start_step and steps is None and recipe.max_steps is None:
            raise ValueError(t(f"从第 {start_step} 步接着训练，要用检查点里读回的配方：它的学习率计划已经按步数定好"
                               "（max_steps）。按时间安排的配方会从这一步起另排一个新的计划。",
                               f"to go on from step {start_step}, use the recipe read back from the checkpoint: its "
                               "schedule is fixed in steps (max_steps). A recipe on the wall clock would start a new "
                               "schedule from that step."))
        if (checkpoint is None) != (save is None):
            raise ValueError("give both checkpoint and save, or neither")
        self.recipe, self.seconds, self.steps, self.eval_every = recipe, seconds, steps, eval_every
        self.base_recipe = recipe
        if recipe.max_steps is None and steps is not None:
            self.recipe = fix_schedule(recipe, start_step + steps)
        self.schedule_fixed = self.recipe.max_steps is not None
        self.fixed_at = start_step if self.schedule_fixed else None      # the step at which it was fixed
        self.measure_seconds = min(eval_every, max(2.0, 0.03 * seconds)) if seconds else 0.0
        self.checkpoint = Path(checkpoint).resolve() if checkpoint is not None else None
        self.save = save
        self.saved_step = None               # the step of the last checkpoint this run wrote
        self.history = History()
        self.limit = cpu_limit()
        self.fixed = recipe.threads is not None
        self.threads = min(recipe.threads, self.limit) if self.fixed else choose_threads(limit=self.limit)
        torch.set_num_threads(self.threads)
        self.thread_log: list[tuple[float, int, float]] = []     # (seconds into the run, threads, busy elsewhere)
        self.on_eval = live_loss_plot() if plot else None
        self.start_step = self.step = start_step
        self.ema = None
        self.eval_seconds = 0.0              # the last evaluation's pause (with its checkpoint): kept free at the end
        self.step_seconds = None             # moving average of one step's duration
        self._cpu0, self._last_cpu = time.process_time(), None
        self.bar = None
        if progress:
            from tqdm.auto import tqdm
            if seconds is not None:
                self.bar = tqdm(total=round(seconds), leave=True, desc=t("训练", "training"),
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s {postfix}")
            else:
                total = steps if steps is not None else max(0, self.recipe.max_steps - start_step)
                self.bar = tqdm(total=total, unit="step", leave=True, desc=t("训练", "training"))
        self.start = self._last = self._last_eval = time.perf_counter()
        self._eval_started = None
        self._first_step_done = None         # when the first step (which pays for warming PyTorch up) ended
        self._halfway = None                 # (time, step) halfway through the timing: the speed is taken after it
        self._mid_step = False               # between going() saying yes and log(): the model may be half-updated
        self._stop_asked = False
        self._old_handler = None

    # -- the stop button: an interrupt waits for the step under way
    def __enter__(self) -> Run:
        import signal
        import threading
        if threading.current_thread() is threading.main_thread():
            self._old_handler = signal.signal(signal.SIGINT, self._interrupted)
        return self

    def _interrupted(self, signum, frame) -> None:
        if self._stop_asked:                 # a second press: stop right here
            self._restore_handler()
            raise KeyboardInterrupt
        self._stop_asked = True              # the step (or evaluation) under way finishes; then going() raises

    def _restore_handler(self) -> None:
        if self._old_handler is not None:
            import signal
            signal.signal(signal.SIGINT, self._old_handler)
            self._old_handler = None

    def __exit__(self, kind, error, tb) -> bool:
        self._restore_handler()
        if kind is not None and issubclass(kind, KeyboardInterrupt):
            self._stopped()
        return False

    def _stopped(self) -> None:
        """The run was interrupted: save where it stands, if it stands between two steps, and say so."""
        if self.bar is not None:
            self.bar.close()
        lines = [t(f"训练在第 {self.step:,} 步停下了（开始后 {self.elapsed():.0f} 秒）。",
                   f"Training stopped at step {self.step:,} ({self.elapsed():.0f} s into the run).")]
        if self.save is not None:
            if self._mid_step:
                lines.append(t("它停在一步的中途（模型可能只更新了一半），所以这时的状态没有存。",
                               "It stopped in the middle of a step (the model may be half-updated), so that state "
                               "was not saved."))
            elif not self.schedule_fixed:
                lines.append(t("这时还在量每一步的用时、学习率计划还没定下来，所以这次训练还没有存检查点。",
                               "It was still timing its steps and had not fixed its schedule yet, so this run has "
                               "not saved a checkpoint."))
            else:
                self._save(self.step)
            if self.saved_step is not None:
                lines.append(self._where())
                lines.append(t("要从这里接着训练：把训练单元格里的 RESUME 改成 True，再运行它。",
                               "To go on from here: set RESUME = True in the training cell and run it again."))
        print("\n".join(lines))

    def _where(self) -> str:
        return t(f"检查点：{self.checkpoint}（第 {self.saved_step:,} 步；学习率计划在第 {self.recipe.max_steps:,} 步结束）",
                 f"checkpoint: {self.checkpoint} (step {self.saved_step:,}; the schedule ends at step "
                 f"{self.recipe.max_steps:,})")

    def _save(self, step: int) -> None:
        if self.save is None or not self.schedule_fixed or self.saved_step == step:
            return
        part = self.checkpoint.with_name(self.checkpoint.name + ".part")
        self.save(part, step, self.recipe)
        os.replace(part, self.checkpoint)          # a checkpoint is replaced whole, never half-written
        self.saved_step = step

    # -- the loop's questions
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def going(self, step: int) -> bool:
        """Whether to take step ``step``: there are steps left, or time left
        for one more step and the final evaluation. After an interrupt (inside
        ``with run:``), raises ``KeyboardInterrupt`` here, between two steps."""
        if self._stop_asked:
            raise KeyboardInterrupt
        if self.steps is not None:
            go = step < self.start_step + self.steps
        elif self.schedule_fixed and step >= self.recipe.max_steps:
            go = False
        elif self.seconds is None or step == self.start_step:
            go = True
        else:
            go = self.elapsed() + (self.step_seconds or 0.0) + self.eval_seconds < self.seconds
        self._mid_step = go
        return go

    def plan(self, step: int) -> Plan:
        """The schedule for this run as it looks at step ``step``: once fixed,
        the same at every step."""
        if self.schedule_fixed:
            return plan_for(self.recipe, self.recipe.max_steps)
        left = max(0.0, self.seconds - self.elapsed() - self.eval_seconds)
        per_step = self.step_seconds or 0.1
        return plan_for(self.recipe, step + 1 + int(left / per_step))

    def log(self, step: int, loss: float, tokens: int) -> None:
        """After a step: its training loss and the tokens it saw."""
        now = time.perf_counter()
        took = now - self._last
        self._last = now
        if step > self.start_step + 1:      # the first step pays for warming up PyTorch
            self.step_seconds = took if self.step_seconds is None else 0.9 * self.step_seconds + 0.1 * took
        elif self._first_step_done is None:
            self._first_step_done = now
        if (not self.schedule_fixed and self._halfway is None and self._first_step_done is not None
                and now - self._first_step_done >= self.measure_seconds / 2):
            self._halfway = (now, step)
        self.step = step
        self._mid_step = False
        self.history.tokens += tokens
        loss = float(loss)
        self.ema = loss if self.ema is None else 0.9 * self.ema + 0.1 * loss
        if self.bar is not None:
            if self.seconds is not None:
                self.bar.n = min(self.elapsed(), self.seconds)
            else:
                self.bar.update(1)
            if step % 10 == 0 or step == self.start_step + 1:
                self.bar.set_postfix(step=step, loss=f"{self.ema:.3f}")

    def time_to_evaluate(self, step: int) -> bool:
        """Every ``eval_every`` seconds, and after the first step; not when the
        final evaluation is close anyway (it would not fit in the budget too).
        While the schedule is not fixed yet, the first evaluation waits until
        the steps have been timed for ``measure_seconds``."""
        now = time.perf_counter()
        if not self.schedule_fixed:
            due = (self._first_step_done is not None and step >= self.start_step + 3
                   and now - self._first_step_done >= self.measure_seconds)
        else:
            due = step == self.start_step + 1 or now - self._last_eval >= self.eval_every
            if due and self.seconds is not None and step > self.start_step + 1:
                due = self.elapsed() + 2 * self.eval_seconds + (self.step_seconds or 0.0) < self.seconds
        if due:
            self._eval_started = now
        return due

    def evaluated(self, step: int, val_loss: float) -> None:
        """Record an evaluation, redraw the plot, check the threads again, fix
        the schedule if it is not fixed yet, and save the checkpoint."""
        now = time.perf_counter()
        started = self._eval_started if self._eval_started is not None else now
        self.history.steps.append(step)
        self.history.train.append(self.ema)
        self.history.val_steps.append(step)
        self.history.val.append(float(val_loss))
        if self.on_eval is not None:
            self.on_eval(self.history)
        self._recheck_threads()
        if not self.schedule_fixed:
            self._fix(step, started, time.perf_counter() - started)
        self._save(step)
        self._last_eval = self._last = time.perf_counter()
        self.eval_seconds = self._last - started

    def _fix(self, step: int, eval_started: float, pause: float) -> None:
        """Fix the schedule in steps: the steps timed so far say how many more
        fit into the time left, with an evaluation (``pause`` seconds) every
        ``eval_every`` seconds and the final one."""
        since, at = self._halfway or (self._first_step_done, self.start_step + 1)
        if since is not None and step > at:       # the later half of the timing: the first steps are slower
            per_step = (eval_started - since) / (step - at)
        else:
            per_step = self.step_seconds or 0.1
        left = self.seconds - self.elapsed() - pause if self.seconds is not None else 0.0
        stepping = max(0.0, left) / (1 + pause / self.eval_every)
        self.recipe = fix_schedule(self.recipe, step + int(stepping / max(per_step, 1e-9)))
        self.schedule_fixed, self.fixed_at = True, step

    def _recheck_threads(self) -> None:
        if under_nbgrader():
            return
        now, cpu = time.perf_counter(), time.process_time()
        if self._last_cpu is not None:            # the CPUs this run kept busy since the last check
            own = (cpu - self._last_cpu[1]) / max(now - self._last_cpu[0], 1e-9)
        else:
            own = (cpu - self._cpu0) / max(self.elapsed(), 1e-9)
        self._last_cpu = (now, cpu)
        elsewhere = busy_elsewhere(own_load=own)
        self.thread_log.append((self.elapsed(), self.threads, elsewhere))
        if self.fixed:
            return
        wanted = choose_threads(elsewhere, self.limit)
        if wanted != self.threads:
            self.threads = wanted
            torch.set_num_threads(wanted)

    # -- the end
    def finish(self, step: int, val_loss: float) -> History:
        """After the last step and the final evaluation: close the bar at
        100%, save the checkpoint, and print the closing line and where the
        checkpoint is. A run that ended before its schedule was fixed (a very
        short budget) fixes it here: it ends where the run did."""
        self._restore_handler()
        self.history.seconds = self.elapsed()
        if not self.history.val_steps or self.history.val_steps[-1] != step:
            self.history.steps.append(step)
            self.history.train.append(self.ema)
            self.history.val_steps.append(step)
            self.history.val.append(float(val_loss))
            if self.on_eval is not None:
                self.on_eval(self.history)
        else:
            self.history.val[-1] = float(val_loss)
        if not self.schedule_fixed:
            self.recipe = fix_schedule(self.recipe, step)
            self.schedule_fixed, self.fixed_at = True, step
        self.step = step
        self._save(step)
        if self.bar is not None:
            if self.seconds is not None:
                self.bar.n = self.bar.total
            self.bar.set_postfix(step=step, loss=f"{self.ema:.3f}" if self.ema is not None else "-")
            self.bar.refresh()
            self.bar.close()
        print(self.closing_line(step, float(val_loss)))
        if self.saved_step is not None:
            print(self._where())
        return self.history

    def cpu_share(self) -> float:
        """CPU time this process got per thread-second of the run (1.0: every
        thread ran all the time)."""
        wall = max(self.history.seconds or self.elapsed(), 1e-9)
        mean_threads = self._mean_threads()
        return (time.process_time() - self._cpu0) / (wall * mean_threads)

    def _mean_threads(self) -> float:
        if not self.thread_log:
            return float(self.threads)
        return sum(n for _, n, _ in self.thread_log) / len(self.thread_log)

    def busy_note(self) -> str | None:
        """A sentence when the machine, not the recipe, was the limit: other
        programs kept CPUs busy, or this run got much less CPU time than it
        asked for."""
        if under_nbgrader() or self.history.seconds < 5:
            return None
        elsewhere = [e for _, _, e in self.thread_log]
        busy = sum(elsewhere) / len(elsewhere) if elsewhere else 0.0
        share = self.cpu_share()
        if busy < 0.5 and share > 0.7:
            return None
        return t(f"这台机器很忙：别的程序平均约有 {busy:.1f} 个线程同时要用 CPU（这次训练最多能用 {self.limit} 个 CPU），训练得到的 CPU 时间"
                 f"只有它要的 {share:.0%}，所以走的步数少、损失偏高——这不是配方的问题。关掉别的程序（或等它们结束）再运行一次，"
                 "或者把 TRAIN_SECONDS 调大来补上。",
                 f"The machine was busy: other programs had about {busy:.1f} threads wanting a CPU at once (this run "
                 f"could use at most {self.limit} CPUs), and training got {share:.0%} of the CPU time it asked for, so it took fewer steps and "
                 "the loss is higher than the recipe gives on a quiet machine. Close other programs (or wait for them "
                 "to finish) and run this cell again, or raise TRAIN_SECONDS to make up for it.")

    def closing_line(self, step: int, val_loss: float) -> str:
        steps = step - self.start_step
        rate = self.history.tokens / max(self.history.seconds, 1e-9)
        threads = sorted({n for _, n, _ in self.thread_log} | {self.threads})
        shown = "–".join(str(n) for n in (threads[0], threads[-1])) if len(threads) > 1 else str(threads[0])
        line = t(f"{steps:,} 步，{self.history.seconds:.0f} 秒，{rate:,.0f} token/秒，{shown} 个线程；验证损失 {val_loss:.3f}",
                 f"{steps:,} steps in {self.history.seconds:.0f} s, {rate:,.0f} tokens/s, {shown} thread"
                 f"{'s' if shown != '1' else ''}; validation loss {val_loss:.3f}")
        notes = [n for n in (self.busy_note(), self.schedule_note(step)) if n]
        return "\n".join([line, *notes])

    def schedule_note(self, step: int) -> str | None:
        """A sentence when the run and its fixed schedule did not end together:
        the schedule ended well before the time (the steps got faster than when
        they were timed), or the time ran out well before the schedule's end (they
        got slower): the learning rate has not reached its floor."""
        end = self.recipe.max_steps
        if self.seconds is None or not self.schedule_fixed or end is None:
            return None
        left = self.seconds - self.history.seconds
        if step >= end and left > max(2.0, 0.05 * self.seconds):
            return t(f"学习率计划在第 {end:,} 步走完了，这时 {self.seconds:.0f} 秒的预算还剩约 {left:.0f} 秒：后来的步比开头量到的快，"
                     "计划先到了终点，学习率已经降到最低，训练就停了。想练得更久，把 TRAIN_SECONDS 调大再从头运行。",
                     f"The schedule ended at step {end:,} with about {left:.0f} s of the {self.seconds:.0f} s budget "
                     "left: the later steps were faster than the first ones it timed, so the schedule reached its end "
                     "first, the learning rate is at its floor, and the run stopped. To train longer, raise "
                     "TRAIN_SECONDS and start again.")
        if end - step <= max(2, 0.02 * end):
            return None
        return t(f"时间在第 {step:,} 步用完，比学习率计划的终点（第 {end:,} 步）早了 {end - step:,} 步——后来的步比开头量到的慢，"
                 "所以学习率还没降到最低。把训练单元格里的 RESUME 改成 True 再运行，就能把计划走完。",
                 f"The time ran out at step {step:,}, {end - step:,} steps before the schedule's end at step {end:,}: "
                 "the later steps were slower than the first ones it timed, so the learning rate has not reached its "
                 "floor. Set RESUME = True in the training cell and run it again to finish the schedule.")


# ------------------------------------------------------------------ handing the model on to chapter 9

MODEL_FILE = "ch07_model.pt"


def save_model(model, tokenizer, path: str | Path = MODEL_FILE) -> Path:
    """Save a trained chapter 7 GPT where chapter 9 looks for it (next to this
    notebook): its state dict, its sizes and its vocabulary in id order."""
    c = model.config
    config = dict(vocab_size=c.vocab_size, n_ctx=c.n_ctx, n_layer=c.n_layer, n_head=c.n_head, d_model=c.d_model)
    chars = tokenizer.decode(list(range(tokenizer.vocab_size)))
    path = Path(path)
    torch.save({"config": config, "state_dict": model.state_dict(), "chars": chars}, path)
    return path
