"""Chapter 7's training cell keeps its promise: a time-budgeted run stopped and
resumed in a fresh process goes on as if it had never stopped.

Each run is the chapter's own training cell (read from notebooks/ch07_gpt.md,
with the model solution's functions, its training loop ``train`` included),
executed in a fresh Python process on a
tiny GPT with dropout, one thread, and a clock the run reads that advances
10 ms per step and 30 ms per evaluation in every process: the same machine,
with the same speed every time, so that the uninterrupted run and the
interrupted one fix the same schedule. The stop button is a real SIGINT sent
to the process (during an evaluation, or right after an optimizer step, before
the loop's step counter moves on); the resumed process sets ``RESUME = True``
and runs the same cell. The step a run reached is the one it last reported
(``run.step``).
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, os, re, signal, sys, time
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
import torch
from train_gpt import chapter_code
from helpers import set_language, t, training
from helpers.runtime import under_nbgrader

mode, lang, at, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
set_language(lang)
ns = chapter_code(("tokenizer", "get_batch", "cross_entropy", "gpt", "learning_rate", "train_step", "evaluate",
                   "checkpoint", "train"))
text = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 40
tok = ns["CharTokenizer"](text)
data = torch.tensor(tok.encode(text))
n = int(0.9 * len(data))
recipe = training.scaled(training.COURSE_RECIPE, n_layer=2, d_model=32, n_head=2, n_ctx=16, batch_size=4, threads=1,
                         dropout=0.1)
config = ns["GPTConfig"](vocab_size=tok.vocab_size, n_ctx=recipe.n_ctx, n_layer=recipe.n_layer, n_head=recipe.n_head,
                         d_model=recipe.d_model, dropout=recipe.dropout)

clock = [1000.0]                       # the run's clock: 10 ms a step, 30 ms an evaluation, in every process


class Clock:
    perf_counter = staticmethod(lambda: clock[0])
    process_time = staticmethod(time.process_time)
    sleep = staticmethod(time.sleep)


training.time = Clock


class Run(training.Run):               # evaluations every 0.5 s of that clock; no bar, no plot
    def __init__(self, *args, **kwargs):
        super().__init__(*args, eval_every=0.5, progress=False, plot=False, **kwargs)


training.Run = Run
lrs, losses, evals, hooked = {{}}, {{}}, [], []
student_train_step, student_evaluate = ns["train_step"], ns["evaluate"]
now = [0]


def stop_after_update(optimizer, args, kwargs):      # the update is done, the cell's step counter not moved on yet
    if mode == "between" and now[0] == at:
        os.kill(os.getpid(), signal.SIGINT)


def train_step(model, optimizer, x, y, step, plan):
    if not hooked:
        hooked.append(optimizer.register_step_post_hook(stop_after_update))
    if mode == "kill" and evals and step == evals[-1] and len(evals) == at:
        os._exit(3)                                   # the kernel dies in the step after the at-th evaluation
    now[0] = step
    loss = student_train_step(model, optimizer, x, y, step, plan)
    lrs[step], losses[step] = optimizer.param_groups[0]["lr"], loss
    clock[0] += 0.01
    return loss


def evaluate(model, batches):
    clock[0] += 0.03
    evals.append(now[0] + 1)
    if mode == "eval" and len(evals) == at:
        os.kill(os.getpid(), signal.SIGINT)           # the stop button, pressed during the at-th evaluation
    return student_evaluate(model, batches)


ns.update(recipe=recipe, config=config, tok=tok, train_data=data[:n], val_data=data[n:], t=t, training=training,
          under_nbgrader=under_nbgrader, train_step=train_step, evaluate=evaluate)
cell = {cell!r}
cell, k = re.subn(r"^TRAIN_SECONDS = \d+$", f"TRAIN_SECONDS = {{budget}}", cell, flags=re.M)
assert k == 1
cell, k = re.subn(r"^RESUME = False\b", f"RESUME = {{mode == 'resume'}}", cell, flags=re.M)
assert k == 1
stopped = False
try:
    exec(compile(cell, "<ch07 training cell>", "exec"), ns)
except KeyboardInterrupt:
    stopped = True
saved = None
if os.path.exists("ch07_checkpoint.pt"):
    c = torch.load("ch07_checkpoint.pt", weights_only=True)
    saved = {{"step": c["step"], "max_steps": c["recipe"]["max_steps"], "warmup": c["recipe"]["warmup"]}}
schedule = ns["run"].recipe
print(json.dumps({{"lrs": lrs, "losses": losses, "evals": evals, "stopped": stopped, "saved": saved,
                  "max_steps": schedule.max_steps, "warmup": schedule.warmup, "step": ns["run"].step}}))
"""


def _training_cell() -> str:
    text = (ROOT / "notebooks" / "ch07_gpt.md").read_text(encoding="utf-8")
    cells = [m.group(1) for m in re.finditer(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S)
             if "training.Run(" in m.group(1)]
    assert len(cells) == 1, len(cells)
    return cells[0]


def _run(where: Path, mode: str, lang: str = "en", at: int = 0, budget: float = 4.0):
    code = SCRIPT.format(root=str(ROOT), bench=str(ROOT / "bench"), cell=_training_cell())
    out = subprocess.run([sys.executable, "-c", code, mode, lang, str(at), str(budget)], capture_output=True, text=True,
                         cwd=where, timeout=600)
    if mode == "kill":
        assert out.returncode == 3, out.stderr[-3000:]
        return None, out.stdout
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    got = json.loads(lines[-1])
    for key in ("lrs", "losses"):
        got[key] = {int(s): v for s, v in got[key].items()}
    return got, "\n".join(lines[:-1])


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The run that never stopped."""
    got, printed = _run(tmp_path_factory.mktemp("straight"), "straight")
    assert not got["stopped"] and got["saved"]["step"] == got["step"]
    steps = sorted(got["lrs"])
    assert steps == list(range(len(steps))) and len(steps) > 200
    assert len(got["evals"]) >= 6                       # enough evaluations to pick from
    assert got["losses"][steps[-1]] < got["losses"][0]  # and it did train
    return got


def _resume_and_compare(where: Path, straight: dict, stopped: dict, k: int):
    """Resume in a fresh process from the checkpoint at step k; every step from k on has the uninterrupted run's
    learning rate and exactly its loss."""
    resumed, printed = _run(where, "resume")
    assert sorted(resumed["lrs"]) == list(range(k, stopped["max_steps"])), (k, sorted(resumed["lrs"])[:3])
    assert (resumed["max_steps"], resumed["warmup"]) == (straight["max_steps"], straight["warmup"])
    common = [s for s in resumed["lrs"] if s in straight["lrs"]]
    assert len(common) >= 0.9 * (len(straight["lrs"]) - k), (len(common), len(straight["lrs"]), k)
    for s in common:
        assert resumed["lrs"][s] == straight["lrs"][s], (s, resumed["lrs"][s], straight["lrs"][s])
        assert resumed["losses"][s] == straight["losses"][s], (s, resumed["losses"][s], straight["losses"][s])
    before = {s: straight["lrs"][s] for s in range(k)}
    assert {s: stopped["lrs"][s] for s in range(k)} == before  # the stopped run was the same run up to k
    # the steps the uninterrupted run did not get to (the time ran out) follow the same schedule
    from helpers import training
    plan = training.plan_for(training.scaled(training.COURSE_RECIPE, max_steps=resumed["max_steps"],
                                             warmup=resumed["warmup"]), resumed["max_steps"])
    for s in resumed["lrs"]:
        want = _lr(s, plan)
        assert resumed["lrs"][s] == pytest.approx(want, rel=1e-12), (s, resumed["lrs"][s], want)
    return resumed, printed


def _lr(step, plan):
    import math
    if step < plan.warmup_steps:
        return plan.lr * (step + 1) / plan.warmup_steps
    if step >= plan.max_steps:
        return plan.min_lr
    p = (step - plan.warmup_steps) / (plan.max_steps - plan.warmup_steps)
    return plan.min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (plan.lr - plan.min_lr)


def test_stopped_during_a_random_evaluation_and_resumed_in_a_fresh_process(tmp_path, straight):
    periodic = straight["evals"][:-1]                    # the last one is the final evaluation
    at = random.Random().randrange(1, len(periodic) + 1)
    k = periodic[at - 1]
    stopped, printed = _run(tmp_path, "eval", lang="zh", at=at)
    assert stopped["stopped"] and stopped["step"] == k, (at, k, stopped["step"])
    assert stopped["saved"] == {"step": k, "max_steps": straight["max_steps"], "warmup": straight["warmup"]}, at
    path = str((tmp_path / "ch07_checkpoint.pt").resolve())
    assert path in printed and "RESUME 改成 True" in printed and f"第 {k:,} 步" in printed, printed
    _resume_and_compare(tmp_path, straight, stopped, k)


def test_stopped_between_evaluations_resumes_from_the_checkpoint_written_at_the_stop(tmp_path, straight):
    evals = set(straight["evals"])
    fixed = straight["evals"][0]                         # before its first evaluation the run has nothing to save
    between = [s for s in range(fixed + 1, max(straight["lrs"]) - 1) if s + 1 not in evals and s not in evals]
    s = random.Random().choice(between)
    stopped, printed = _run(tmp_path, "between", lang="en", at=s)
    k = s + 1                                            # the step under way finished; then the run stopped
    assert stopped["stopped"] and stopped["step"] == k, (s, stopped["step"])
    assert stopped["saved"]["step"] == k, (s, stopped["saved"])        # written at the stop, not at an evaluation
    path = str((tmp_path / "ch07_checkpoint.pt").resolve())
    assert path in printed and "RESUME = True" in printed and f"step {k:,}" in printed, printed
    _resume_and_compare(tmp_path, straight, stopped, k)


def test_a_kernel_that_dies_resumes_from_the_last_evaluation(tmp_path, straight):
    periodic = straight["evals"][:-1]
    at = random.Random().randrange(1, len(periodic) + 1)
    _run(tmp_path, "kill", at=at)
    saved = torch.load(tmp_path / "ch07_checkpoint.pt", weights_only=True)
    k = periodic[at - 1]
    assert saved["step"] == k, (at, saved["step"])
    assert not (tmp_path / "ch07_checkpoint.pt.part").exists()
    stopped = {"lrs": {s: straight["lrs"][s] for s in range(k)}, "max_steps": saved["recipe"]["max_steps"]}
    _resume_and_compare(tmp_path, straight, stopped, k)


def test_stopped_before_the_schedule_is_fixed_saves_nothing_and_says_so(tmp_path, straight):
    stopped, printed = _run(tmp_path, "between", lang="zh", at=3)
    assert stopped["stopped"] and stopped["saved"] is None and not (tmp_path / "ch07_checkpoint.pt").exists()
    assert "计划还没定下来" in printed and "RESUME" not in printed, printed


def test_under_grading_the_cell_trains_four_steps_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    got, _ = _run(tmp_path, "straight")
    assert sorted(got["lrs"]) == [0, 1, 2, 3] and got["saved"] is None
    assert not list(tmp_path.iterdir())


def test_a_wall_clock_recipe_cannot_be_resumed_without_the_schedule_it_fixed():
    """The old resume, ``Run(recipe, seconds=..., start_step=step)`` with the recipe on the wall clock, built a new
    schedule from that step (the rate jumped from 4.0e-4 to about 2.3e-3 with no warm-up); now it is refused, and the
    recipe the checkpoint keeps resumes on its own schedule."""
    from helpers import set_language, training
    set_language("en")
    try:
        with pytest.raises(ValueError, match="max_steps"):
            training.Run(training.COURSE_RECIPE, seconds=60, start_step=3_000, progress=False, plot=False)
        fixed = training.fix_schedule(training.COURSE_RECIPE, 6_000)
        assert (fixed.max_steps, fixed.warmup) == (6_000, 180)
        run = training.Run(fixed, seconds=60, start_step=3_000, progress=False, plot=False)
        assert run.plan(3_000) == run.plan(5_999) == training.plan_for(fixed, 6_000)
        assert run.going(3_000) and not run.going(6_000)
    finally:
        set_language("zh")
