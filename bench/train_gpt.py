"""Benchmark chapter 7's training recipe against nanoGPT's CPU shakespeare_char
recipe on the same text, for the same wall-clock seconds.

    python bench/train_gpt.py --text PATH --seconds N [--recipe course|nanogpt|both]

The model, tokenizer and get_batch are the chapter's own: the answer cells of
notebooks/ch07_gpt.md (the model solution) are executed here, not copied.
The trainer and both recipes come from helpers/training.py, the module the
notebook trains with. Validation: the last 10% of the characters, evaluated
over the whole split (non-overlapping windows of the recipe's context).

Prints one JSON line per recipe (and appends it to --out when given).
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

CELLS = ("tokenizer", "get_batch", "gpt")


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
    import torch

    from helpers import training

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
    hist = training.train(model, ns["get_batch"], train_data, val_data, recipe, seconds=seconds, seed=seed,
                          progress=False)
    t0 = time.perf_counter()
    val = training.evaluate(model, val_data, recipe.n_ctx)
    return {
        "recipe": recipe.as_dict(),
        "params": sum(p.numel() for p in model.parameters()),
        "steps": hist.steps[-1] if hist.steps else 0,
        "train_seconds": round(hist.seconds, 2),
        "val_loss": round(val, 4),
        "val_tokens": len(val_data),
        "eval_seconds": round(time.perf_counter() - t0, 2),
        "tokens_per_s": round(hist.tokens / hist.seconds),
        "peak_mem_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": torch.get_num_threads(),
        "budget_seconds": seconds,
        "text": os.path.basename(text_path),
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--text", required=True, help="a plain-text file (e.g. tinyshakespeare.txt)")
    ap.add_argument("--seconds", type=float, required=True, help="wall-clock training budget per recipe")
    ap.add_argument("--recipe", choices=("course", "nanogpt", "both"), default="both")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: the recipe's, 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="append the JSON lines to this file")
    args = ap.parse_args(argv)
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
