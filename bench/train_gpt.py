"""Benchmark chapter 7's training recipe against nanoGPT's CPU shakespeare_char
recipe on the same text, for the same wall-clock seconds; and the recipe's own
thread choice on a loaded and a quiet machine.

    python bench/train_gpt.py --text PATH --seconds N [--recipe course|nanogpt|both] [--threads K]
    python bench/train_gpt.py --text PATH --sitting [--seconds 15] [--long 180] [--out FILE]

The model, tokenizer, get_batch and the whole training loop (cross_entropy,
learning_rate, train_step, evaluate, train) are the chapter's own: the answer
cells of notebooks/ch07_gpt.md (the model solution) are executed here, not
copied, and the course recipe runs the chapter's ``train`` under
``training.Run`` exactly as the chapter's training cell does. nanoGPT's recipe
runs under the trainer later chapters are given (notebooks/given/gpt_training.py,
its step-based schedule). Validation: the last 10% of the characters, evaluated
over the whole split (non-overlapping windows of the recipe's context).

``--sitting`` measures, in one sitting, the course recipe's tokens/s for
``--seconds`` each with the recipe's own thread choice and with 1 and 2 fixed
threads, first with the machine loaded by two busy processes that it starts
itself, then quiet; then one ``--long`` run with the machine loaded. Each
line records the load average and what ``training.busy_elsewhere`` saw.

Prints one JSON line per run (and appends it to --out when given).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "notebooks" / "given"))          # gpt_training: the trainer later chapters get

CELLS = ("tokenizer", "get_batch", "cross_entropy", "gpt", "learning_rate", "train_step", "evaluate", "train")


def chapter_code(names=CELLS) -> dict:
    """Run the chapter's answer cells (model solution) and return their names."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    text = (ROOT / "notebooks" / "ch07_gpt.md").read_text(encoding="utf-8")
    cells = {}
    for m in re.finditer(r"```\{code-cell\}[^\n]*\n(.*?)```", text, re.S):
        body = m.group(1)
        gid = re.search(r"grade_id:\s*(\w+)", body.split("---\n", 2)[1]) if body.startswith("---\n") else None
        if gid:
            cells[gid.group(1)] = body.split("---\n", 2)[2]
    ns = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "ch07_gpt"}
    sys.modules.setdefault("ch07_gpt", type(sys)("ch07_gpt"))
    for name in names:
        src = "\n".join(l for l in cells[name].splitlines() if l.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION"))
        exec(compile(src, f"<ch07_gpt:{name}>", "exec", dont_inherit=True), ns)
    return ns


def run_one(text_path: str, seconds: float, recipe_name: str, threads: int | None, seed: int) -> dict:
    import gpt_training
    import torch

    from helpers import set_language, training

    set_language("en")
    recipe = {"course": training.COURSE_RECIPE, "nanogpt": training.NANOGPT_RECIPE}[recipe_name]
    if threads:
        recipe = training.scaled(recipe, threads=threads)
    ns = chapter_code()
    text = Path(text_path).read_text(encoding="utf-8")
    tok = ns["CharTokenizer"](text)
    data = torch.tensor(tok.encode(text), dtype=torch.long)
    n = int(0.9 * len(data))
    train_data, val_data = data[:n], data[n:]
    torch.manual_seed(seed)
    config = ns["GPTConfig"](vocab_size=tok.vocab_size, n_ctx=recipe.n_ctx, n_layer=recipe.n_layer,
                             n_head=recipe.n_head, d_model=recipe.d_model, dropout=recipe.dropout)
    model = ns["GPT"](config)
    extra = {}
    if recipe_name == "course":
        hist, run = chapter_loop(ns, model, train_data, val_data, recipe, seconds, seed)
        extra = {"threads_used": sorted({k for _, k, _ in run.thread_log} | {run.threads}),
                 "busy_elsewhere": [round(e, 2) for _, _, e in run.thread_log], "cpu_share": round(run.cpu_share(), 3),
                 "closing_line": run.closing_line(hist.steps[-1], hist.val[-1])}
    else:
        hist = gpt_training.train(model, ns["get_batch"], train_data, val_data, recipe, seconds=seconds, seed=seed,
                                  progress=False)
    t0 = time.perf_counter()
    val = gpt_training.evaluate(model, val_data, recipe.n_ctx)
    return {**extra, 
        "recipe": recipe.as_dict(),
        "params": sum(p.numel() for p in model.parameters()),
        "steps": hist.steps[-1] if hist.steps else 0,
        "train_seconds": round(hist.seconds, 2),
        "val_loss": round(val, 4),
        "val_tokens": len(val_data),
        "eval_seconds": round(time.perf_counter() - t0, 2),
        "tokens_per_s": round(hist.tokens / hist.seconds),
        "peak_mem_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": recipe.threads or "chosen",
        "budget_seconds": seconds,
        "text": os.path.basename(text_path),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def chapter_loop(ns, model, train_data, val_data, recipe, seconds, seed=0):
    """The chapter's training cell, with the model solution's functions (its ``train`` draws each step's batch
    with ``training.step_generator(step)``: the batches of seed 0; ``seed`` still seeds the weights)."""
    from helpers import training
    optimizer = training.make_optimizer(model, recipe)
    val_batches = training.fixed_batches(ns["get_batch"], val_data, recipe.n_ctx, n=4)
    run = training.Run(recipe, seconds=seconds, progress=False, plot=False)
    return ns["train"](model, optimizer, train_data, val_batches, run), run


def _busy_loops(n: int):
    """Start n processes that keep one CPU each busy."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _stop(procs) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait()


def sitting(text: str, seconds: float, long: float, out: str | None) -> None:
    """Loaded (two busy processes) and quiet: the recipe's own thread choice against 1 and 2 fixed threads;
    then one long run, loaded. Each run in its own process."""
    def one(threads, budget, condition):
        cmd = [sys.executable, __file__, "--text", text, "--seconds", str(budget), "--recipe", "course"]
        if threads:
            cmd += ["--threads", str(threads)]
        line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        r = json.loads(line)
        r.update(condition=condition, threads_asked=threads or "chosen", uptime=_uptime())
        line = json.dumps(r)
        print(line, flush=True)
        if out:
            with open(out, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        return r

    for condition in ("loaded", "quiet"):
        procs = _busy_loops(2) if condition == "loaded" else []
        try:
            time.sleep(2 if procs else 0)
            got = {th: one(th, seconds, condition)["tokens_per_s"] for th in (None, 1, 2)}
        finally:
            _stop(procs)
        best = max(got[1], got[2])
        summary = {"summary": condition, "chosen": got[None], "fixed_1": got[1], "fixed_2": got[2],
                   "ratio_to_best_fixed": round(got[None] / best, 3), "uptime": _uptime()}
        print(json.dumps(summary), flush=True)
        if out:
            with open(out, "a", encoding="utf-8") as f:
                f.write(json.dumps(summary) + "\n")
    if long:
        procs = _busy_loops(2)
        try:
            time.sleep(2)
            one(None, long, "loaded")
        finally:
            _stop(procs)


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True, help="a plain-text file (e.g. tinyshakespeare.txt)")
    ap.add_argument("--seconds", type=float, required=True, help="wall-clock training budget per recipe")
    ap.add_argument("--recipe", choices=("course", "nanogpt", "both"), default="both")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: chosen from the free CPUs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    ap.add_argument("--sitting", action="store_true", help="loaded and quiet, chosen against 1 and 2 threads")
    ap.add_argument("--long", type=float, default=180.0, help="with --sitting: one loaded run of this many seconds")
    args = ap.parse_args(argv)
    if args.sitting:
        sitting(args.text, args.seconds, args.long, args.out)
        return 0
    names = ("course", "nanogpt") if args.recipe == "both" else (args.recipe,)
    for name in names:
        if len(names) > 1:     # each recipe in its own process: clean peak memory, no shared state
            cmd = [sys.executable, __file__, "--text", args.text, "--seconds", str(args.seconds), "--recipe", name,
                   "--seed", str(args.seed)] + (["--threads", str(args.threads)] if args.threads else [])
            line = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        else:
            line = json.dumps(run_one(args.text, args.seconds, name, args.threads, args.seed))
        print(line, flush=True)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
