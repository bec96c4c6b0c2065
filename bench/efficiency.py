"""Benchmark chapter 8: the O(n²) price, decode speed with and without the KV
cache, and the peak memory of full vs online-softmax attention.

    python bench/efficiency.py [--tokens 512] [--out bench/results]

The KV cache, the cached step and the online softmax are the chapter's own:
the answer cells of notebooks/ch08_efficiency.md (the model solution) and its
`make_weights` / `full_attention` cell are executed here, not copied. The
measurements and figures come from helpers/ch08_efficiency/attention_cost.py, the module the
notebook uses. Writes efficiency.json and three PNG figures to --out.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CELLS = ("kv_cache", "cached_step", "online_softmax")


def chapter_code() -> dict:
    """Run the chapter's answer cells and its full_attention cell; return their names."""
    import torch

    text = (ROOT / "notebooks" / "ch08_efficiency.md").read_text(encoding="utf-8")
    ns: dict = {"torch": torch, "math": math}
    cells = re.findall(r"```\{code-cell\} ipython3\n(.*?)```", text, re.S)
    for cell in cells:
        gid = re.search(r"grade_id: (\w+)", cell)
        body = re.sub(r"^---\n.*?\n---\n", "", cell, flags=re.S)
        if (gid and gid.group(1) in CELLS) or "def full_attention" in body:
            body = "\n".join(line for line in body.splitlines() if not line.lstrip().startswith("print("))
            exec(compile(body, f"ch08:{gid.group(1) if gid else 'full_attention'}", "exec"), ns)
    return ns


def main(argv=None) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import torch

    from helpers import set_language
    from helpers.ch08_efficiency import attention_cost as cost

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=512, help="tokens generated in the decode benchmark")
    p.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder for the JSON and figures")
    p.add_argument("--lang", default="en", choices=("zh", "en"), help="language of the figure labels")
    args = p.parse_args(argv)
    set_language(args.lang)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ns = chapter_code()
    torch.manual_seed(0)

    t0 = time.time()
    sweep = cost.score_cost_sweep((128, 256, 512, 1024, 2048, 4096), d=64, repeat=3)
    layers = [ns["make_weights"](d=128, n_head=4, n_ctx=args.tokens, generator=torch.Generator().manual_seed(10 + i))
              for i in range(2)]
    speed = cost.decode_speed(layers, args.tokens, ns["full_attention"], ns["cached_attention_step"], ns["KVCache"])
    mem = cost.memory_sweep((256, 512, 1024, 2048, 4096, 8192), ns["online_softmax_attention"], d=64, block_size=128)

    for name, fig in (("efficiency_cost.png", cost.cost_figure(sweep)), ("efficiency_decode.png", cost.decode_figure(speed)),
                      ("efficiency_memory.png", cost.memory_figure(mem))):
        fig.savefig(out / name, dpi=120)
    result = {
        "machine": {"platform": platform.platform(), "processor": platform.processor(), "torch": torch.__version__,
                    "threads": 1},
        "seconds": round(time.time() - t0, 2),
        "score_sweep": sweep,
        "decode": {"n_tokens": speed["n_tokens"], "layers": 2, "d": 128, "n_head": 4,
                   "tokens_per_s_cached": speed["tokens_per_s_cached"], "tokens_per_s_full": speed["tokens_per_s_full"],
                   "speedup": speed["speedup"], "max_diff": speed["max_diff"]},
        "memory": {"d": mem["d"], "block_size": mem["block_size"], "slopes": mem["slopes"],
                   "rows": [{k: (list(v) if isinstance(v, tuple) else v) for k, v in r.items()} for r in mem["rows"]]},
    }
    (out / "efficiency.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"speedup_at_%d_tokens" % args.tokens: round(speed["speedup"], 2),
                      "tokens_per_s_cached": round(speed["tokens_per_s_cached"]),
                      "tokens_per_s_full": round(speed["tokens_per_s_full"]),
                      "slope_scores": round(sweep["slope_scores"], 2), "slope_linear": round(sweep["slope_linear"], 2),
                      "memory_slopes": {k: round(v, 2) for k, v in mem["slopes"].items()},
                      "out": str(out)}))
    return result


if __name__ == "__main__":
    main()
