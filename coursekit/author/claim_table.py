"""Every measured number a chapter's prose cites, per chapter (the claims ledger:
coursekit.author.claims): the record each is read from, how, the value its
sentence was written for, and the conditions its line and cell must state.
"""
from __future__ import annotations

import re
from typing import Callable

from .claim_records import Claim, ClaimError, Words, _claims, _none, header, load, one

# ---- ch07: the recipe sweep and the runs it was checked with

SWEEP_BASE = dict(n_layer=4, n_head=4, d_model=128, n_ctx=64, batch_size=32, lr=3e-3, weight_decay=0.1, beta2=0.99)


def _lr(x: float) -> str:
    return f"{x:.0e}".replace("e-0", "e-")


def _config_words(ch: dict, *, lr: bool = True, extra: bool = True) -> Words:
    """The sweep row's configuration (the base recipe changed by ``ch``) as words."""
    def words(_rows) -> dict:
        c = {**SWEEP_BASE, **ch}
        zh = [f"{c['n_layer']} 层", f"宽 {c['d_model']}", f"批量 {c['batch_size']}"]
        en = [f"{c['n_layer']} layers", f"width {c['d_model']}", f"batch {c['batch_size']}"]
        if lr:
            zh.append(_lr(c["lr"]))
            en.append(_lr(c["lr"]))
        if extra and c["weight_decay"] != SWEEP_BASE["weight_decay"]:
            zh.append(f"权重衰减 {c['weight_decay']:g}")
            en.append(f"weight decay {c['weight_decay']:g}")
        if extra and c["beta2"] != SWEEP_BASE["beta2"]:
            zh.append(f"β2 = {c['beta2']:g}")
            en.append(f"β2 = {c['beta2']:g}")
        return {"zh": tuple(zh), "en": tuple(en)}
    return words


NUMBERS = {2: ("两", "two"), 7: ("七", "seven")}


def _sweep_setup(round_: int) -> dict:
    """The sweep's conditions, read from round 1's header (round 2's says 'same machine and setup as round 1')."""
    if round_ == 2:
        assert "same machine and setup as round 1" in header("recipe_sweep_round2.jsonl")
    head = header("recipe_sweep_round1.jsonl")
    m = re.search(r"(\d+) runs in parallel, each pinned to (\d+) cores .*?, (\d+) s of training each, on (\w+)\.txt",
                  head)
    if m is None:
        raise ClaimError("recipe_sweep_round1.jsonl's header no longer states the runs' conditions")
    runs, cores, seconds, text = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
    if runs not in NUMBERS or cores not in NUMBERS:
        raise ClaimError(f"the sweep ran {runs} runs on {cores} cores each; the sentence states other numbers")
    return {"zh": (text, f"{seconds} 秒", f"{NUMBERS[runs][0]}个运行同时跑", f"各占{NUMBERS[cores][0]}个核",
                   f"第 {round_} 轮"),
            "en": (text, f"{seconds} seconds", f"{NUMBERS[runs][1]} runs side by side",
                   f"{NUMBERS[cores][1]} cores each", f"round {round_}")}


def _sweep_claim(id_: str, round_: int, ch: dict, what: str, fmt: str, written: str, **words) -> Claim:
    path = f"recipe_sweep_round{round_}.jsonl"
    return Claim(id_, path, lambda rows: one(rows, ch=ch)[what], fmt, written,
                 line=_config_words(ch, **words), cell=lambda rows: _sweep_setup(round_))


NANO = {"name": "nano", "batch_size": 12, "lr": 0.001, "min_lr": 0.0001, "warmup": 100, "max_steps": 2000}
SMALL = {"n_layer": 3, "batch_size": 16}


def _nano_runs(_root_rows=None) -> list[dict]:
    """nanoGPT's CPU command on the course's trainer: every run kept in bench/results."""
    runs = []
    for path in ("recipe_sweep_round1.jsonl", "side_by_side_92s.jsonl", "side_by_side_92s_seed1.jsonl",
                 "bench_train.jsonl"):
        for r in load(path):
            name = (r.get("recipe") or r.get("ch") or {}).get("name")
            if name in ("nanogpt_cpu", "nano"):
                runs.append({"loss": r.get("val_loss", r.get("val")), "s": r.get("train_seconds", r.get("train_s")),
                             "steps": r["steps"]})
    return runs


def _course_runs(_rows=None) -> list[dict]:
    """The final recipe, 92 s on tinyshakespeare, two threads: every run kept in bench/results."""
    runs = []
    for path in ("side_by_side_92s.jsonl", "side_by_side_92s_seed1.jsonl", "bench_train.jsonl"):
        for r in load(path):
            if (r.get("recipe") or {}).get("name") == "course" and r.get("budget_seconds") == 92.0:
                runs.append(r)
    return runs


def _nano_words(_rows) -> dict:
    return {"zh": ("4 层", "宽 128", "批量 12", "1e-3", "2000 步", "两个核两个线程", "本课程的模型和训练代码"),
            "en": ("4 layers", "width 128", "batch 12", "1e-3", "2000 steps", "two cores and two threads",
                   "this course's model and trainer")}


def _loaded_threads(rows, asked: int) -> dict:
    """The sitting the README quotes: two busy programs beside a 15 s run, threads fixed at ``asked``."""
    found = [r for r in rows if r.get("condition") == "loaded" and r.get("threads_asked") == asked
             and r.get("busy_elsewhere") and round(sum(r["busy_elsewhere"]) / len(r["busy_elsewhere"])) == 2
             and r.get("budget_seconds") == 15.0]
    if len(found) != 1:
        raise ClaimError(f"{len(found)} loaded 15 s runs with {asked} thread(s) beside two busy programs")
    return found[0]


def _threads_words(rows) -> dict:
    one_ = _loaded_threads(rows, 1)
    busy = round(sum(one_["busy_elsewhere"]) / len(one_["busy_elsewhere"]))
    n = {2: ("两个", "two")}.get(busy)
    if n is None:
        raise ClaimError(f"the sitting had {busy} busy programs, the sentence is written for two")
    return {"zh": (f"{n[0]}忙碌的程序", "双核", "15 秒"), "en": (f"{n[1]} busy programs", "two-core", "15 s")}


def _head_runs(record) -> list[float]:
    return sorted(r["previous_character"][0][1] for r in record["runs"])


def _head_words(record) -> dict:
    seconds = {r["seconds"] // 60 for r in record["runs"]}
    assert seconds == {3}, seconds
    return {"zh": ("3 分钟", "tinyshakespeare", "双核"), "en": ("3 minutes", "tinyshakespeare", "two-core")}


CH07 = _claims(
    # nanoGPT's CPU command, run on this course's model and trainer
    Claim("ch07.nano-runs", "bench_train.jsonl", lambda _: len(_nano_runs()), "{}", "4", line=_nano_words),
    Claim("ch07.nano-s-min", "bench_train.jsonl", lambda _: min(r["s"] for r in _nano_runs()), "{:.0f}", "79",
          line=_nano_words),
    Claim("ch07.nano-s-max", "bench_train.jsonl", lambda _: max(r["s"] for r in _nano_runs()), "{:.0f}", "92",
          line=_nano_words),
    Claim("ch07.nano-val-min", "bench_train.jsonl", lambda _: min(r["loss"] for r in _nano_runs()), "{:.2f}", "1.89",
          line=_nano_words),
    Claim("ch07.nano-val-max", "bench_train.jsonl", lambda _: max(r["loss"] for r in _nano_runs()), "{:.2f}", "1.90",
          line=_nano_words),
    # the final recipe's own result, same text and budget
    Claim("ch07.course-runs", "bench_train.jsonl", lambda _: len(_course_runs()), "{}", "3",
          line=lambda _: {"zh": ("3 层", "宽 96", "批量 16", "4e-3"), "en": ("3 layers", "width 96", "batch 16", "4e-3")}),
    Claim("ch07.course-val-min", "bench_train.jsonl", lambda _: min(r["val_loss"] for r in _course_runs()), "{:.2f}",
          "1.66", line=lambda _: {"zh": ("3 层", "宽 96"), "en": ("3 layers", "width 96")}),
    Claim("ch07.course-val-max", "bench_train.jsonl", lambda _: max(r["val_loss"] for r in _course_runs()), "{:.2f}",
          "1.69", line=lambda _: {"zh": ("3 层", "宽 96"), "en": ("3 layers", "width 96")}),
    Claim("ch07.course-steps-min", "bench_train.jsonl", lambda _: min(r["steps"] for r in _course_runs()), "{:,}",
          "2,982", line=lambda _: {"zh": ("3 层", "宽 96"), "en": ("3 layers", "width 96")}),
    Claim("ch07.course-steps-max", "bench_train.jsonl", lambda _: max(r["steps"] for r in _course_runs()), "{:,}",
          "3,795", line=lambda _: {"zh": ("3 层", "宽 96"), "en": ("3 layers", "width 96")}),
    Claim("ch07.course-params", "side_by_side_92s.jsonl",
          lambda rows: one(rows, recipe=_course_runs()[0]["recipe"])["params"], "{:,}", "348,096",
          line=lambda _: {"zh": ("3 层", "宽 96"), "en": ("3 layers", "width 96")}),
    Claim("ch07.nano-tokens", "recipe_sweep_round1.jsonl",
          lambda rows: one(rows, ch=NANO)["steps"] * NANO["batch_size"] * SWEEP_BASE["n_ctx"] / 1e6, "{:.1f}", "1.5",
          line=lambda _: {"zh": (), "en": ("92 s", "nanoGPT's model")}, langs=("en",)),
    Claim("ch07.nano-tokens-wan", "recipe_sweep_round1.jsonl",
          lambda rows: one(rows, ch=NANO)["steps"] * NANO["batch_size"] * SWEEP_BASE["n_ctx"] / 1e4, "{:.0f}", "154",
          line=lambda _: {"zh": ("92 秒", "nanoGPT 的模型"), "en": ()}, langs=("zh",)),
    # the learning rate
    _sweep_claim("ch07.nano-val", 1, NANO, "val", "{:.2f}", "1.89", lr=False),
    _sweep_claim("ch07.lr3e-3-b12-val", 1, {"batch_size": 12, "lr": 0.003}, "val", "{:.2f}", "1.76"),
    _sweep_claim("ch07.lr3e-3-val", 1, {**SMALL, "lr": 0.003}, "val", "{:.3f}", "1.749"),
    _sweep_claim("ch07.lr3e-3-steps", 1, {**SMALL, "lr": 0.003}, "steps", "{:,}", "1,921"),
    _sweep_claim("ch07.lr4e-3-val", 2, {**SMALL, "lr": 0.004}, "val", "{:.3f}", "1.697"),
    _sweep_claim("ch07.lr4e-3-steps", 2, {**SMALL, "lr": 0.004}, "steps", "{:,}", "2,444"),
    _sweep_claim("ch07.lr3e-3-wd0-val", 2, {**SMALL, "lr": 0.003, "weight_decay": 0.0}, "val", "{:.3f}", "1.684"),
    _sweep_claim("ch07.lr3e-3-b095-val", 2, {**SMALL, "lr": 0.003, "beta2": 0.95}, "val", "{:.3f}", "1.698"),
    # the smaller model
    _sweep_claim("ch07.w96-tok", 2, {"d_model": 96, **SMALL, "lr": 0.004}, "tok_s", "{:,}", "36,951"),
    _sweep_claim("ch07.w96-val", 2, {"d_model": 96, **SMALL, "lr": 0.004}, "val", "{:.3f}", "1.671"),
    _sweep_claim("ch07.w128-tok", 2, {"batch_size": 12, "lr": 0.004}, "tok_s", "{:,}", "18,672"),
    _sweep_claim("ch07.w128-val", 2, {"batch_size": 12, "lr": 0.004}, "val", "{:.3f}", "1.737"),
    # the batch
    _sweep_claim("ch07.b32-steps", 1, {"batch_size": 32, "lr": 0.003}, "steps", "{:,}", "883"),
    _sweep_claim("ch07.b32-val", 1, {"batch_size": 32, "lr": 0.003}, "val", "{:.2f}", "1.81"),
    _sweep_claim("ch07.b16-steps", 1, {"batch_size": 16, "lr": 0.002}, "steps", "{:,}", "1,675"),
    _sweep_claim("ch07.b16-val", 1, {"batch_size": 16, "lr": 0.002}, "val", "{:.2f}", "1.79"),
    Claim("ch07.b32-ratio", "recipe_sweep_round1.jsonl",
          lambda rows: one(rows, ch={"batch_size": 32, "lr": 0.003})["steps"]
          / one(rows, ch={"batch_size": 16, "lr": 0.002})["steps"], "{:.2f}", "0.53",
          line=lambda _: {"zh": ("批量 32", "批量 16", "3e-3", "2e-3"), "en": ("batch 32", "batch 16", "3e-3", "2e-3")}),
    # threads on a busy machine
    Claim("ch07.threads-1", "threads_sitting.jsonl", lambda rows: _loaded_threads(rows, 1)["tokens_per_s"], "{:,}",
          "17,838", line=_threads_words),
    Claim("ch07.threads-2", "threads_sitting.jsonl", lambda rows: _loaded_threads(rows, 2)["tokens_per_s"], "{:,}",
          "11,759", line=_threads_words),
    Claim("ch07.threads-ratio", "threads_sitting.jsonl",
          lambda rows: _loaded_threads(rows, 1)["tokens_per_s"] / _loaded_threads(rows, 2)["tokens_per_s"], "{:.1f}",
          "1.5", line=_threads_words),
    # the heads of the default 3-minute run
    Claim("ch07.head-low", "ch07_head_report.json", lambda r: _head_runs(r)[0], "{:.2f}", "0.41", line=_head_words),
    Claim("ch07.head-high", "ch07_head_report.json", lambda r: _head_runs(r)[-1], "{:.2f}", "0.60", line=_head_words),
    Claim("ch07.head-uniform", "ch07_head_report.json", lambda r: r["runs"][0]["uniform_baseline"], "{:.2f}", "0.06",
          line=_head_words),
)


# ---- the chapters' kept runs: their printed outputs, read by pattern

def _out(record) -> str:
    return "\n".join(record["outputs"])


def _grab(pattern: str, group: int = 1, cast=float) -> Callable[[object], float]:
    return lambda record: cast(re.search(pattern, _out(record), re.M).group(group))


# ---- ch01: the chapter's run kept in bench/results/chapter_outputs (its seeds are fixed)

KEPT1 = "chapter_outputs/ch01_attention.json"


def _weights(record, which: str) -> list[float]:
    return [float(v) for v in re.search(rf"(?<!un){which}:\s+\[(.*?)\]", _out(record)).group(1).split(",")]


def _queries(which: str, group: int) -> Callable[[object], float]:
    return _grab(rf"(\d+) queries, {which}: largest weight ([\d.]+) on average, above 0.9 in (\d+)%", group)


def _one_query(record) -> dict:
    n = len(_weights(record, "unscaled"))
    return {"zh": (f"{n} 个随机 key", "$d_k=128$"), "en": (f"{n} random keys", "$d_k=128$")}


def _many_queries(record) -> dict:
    n = int(_queries("unscaled", 1)(record))
    return {"zh": (f"{n} 个随机 query",), "en": (f"{n} random queries",)}


def _k1(id_: str, read, fmt: str, written: str, line) -> Claim:
    return Claim(f"ch01.{id_}", KEPT1, read, fmt, written, line=line)


CH01 = _claims(
    _k1("top1", lambda r: sorted(_weights(r, "unscaled"))[-1], "{:.2f}", "0.83", _one_query),
    _k1("top2", lambda r: sorted(_weights(r, "unscaled"))[-2], "{:.2f}", "0.17", _one_query),
    _k1("scaled-max", lambda r: max(_weights(r, "scaled")), "{:.2f}", "0.30", _one_query),
    _k1("avg-unscaled", _queries("unscaled", 2), "{:.2f}", "0.91", _many_queries),
    _k1("share-unscaled", _queries("unscaled", 3), "{:.0f}", "75", _many_queries),
    _k1("avg-scaled", _queries("scaled", 2), "{:.2f}", "0.36", _many_queries),
)


# ---- ch04: the extrapolation experiment, seed 0 of bench/extrapolation_seeds.py

def _extra(kind: str, at: int) -> Callable[[object], float]:
    def read(record) -> float:
        run = next(r for r in record["runs"] if r["seed"] == record["setup"]["seed"])
        return run["losses"][kind][run["lengths"].index(at)]
    return read


def _extra_words(record) -> dict:
    s = record["setup"]
    assert s["seed"] == 0
    return {"zh": (f"{s['steps']} 步", f"长度 {s['n_train']}"), "en": (f"{s['steps']} steps", f"length {s['n_train']}")}


def _extra_claim(kind: str, at: int, written: str) -> Claim:
    return Claim(f"ch04.{kind}-{at}", "extrapolation_seeds.json", _extra(kind, at), "{:.2f}", written,
                 cell=_extra_words)


CH04 = _claims(
    _extra_claim("sinusoidal", 32, "0.27"), _extra_claim("sinusoidal", 128, "1.32"),
    _extra_claim("rope", 32, "0.19"), _extra_claim("rope", 128, "0.82"),
    _extra_claim("rope+ntk", 128, "0.57"),
    _extra_claim("alibi", 32, "0.50"), _extra_claim("alibi", 128, "0.44"),
)

# ---- ch09: the chapter's run kept in bench/results/chapter_outputs (its code fingerprinted there)

KEPT9 = "chapter_outputs/ch09_inside_gpt.json"


def _ov_rows(record) -> dict:
    return {(int(l_), int(h)): (int(own), int(rate)) for l_, h, own, rate in
            re.findall(r"^L(\d) H(\d)\s+[\d.]+\s+[\d.]+\s+(\d+)/26\s+(\d+)%$", _out(record), re.M)}


def _phase(step: int, column: int) -> Callable[[object], float]:
    def read(record) -> float:
        out = _out(record)
        table = out[out.index("step  first copy"):out.index("falls fastest")]
        row = re.search(rf"^\s*{step}\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", table, re.M)
        return float(row.group(column))
    return read


def _ablation(layer: int, head: int, which: int) -> Callable[[object], float]:
    def read(record) -> float:
        line = re.search(rf"^L{layer}: (.*)$", _out(record), re.M).group(1)
        return float(re.search(rf"H{head} ([+-][\d.]+) \(([+-][\d.]+)\)", line).group(which))
    return read


def _layer1_first(record) -> list[float]:
    return sorted(-_ablation(1, h, 2)(record) for h in range(4))


def _cut(name: str) -> Callable[[object], float]:
    return _grab(rf"^{name}[^\n]*→ ([\d.]+)$")


def _toy(record) -> dict:
    steps = int(re.search(r"^(\d+) steps in", _out(record), re.M).group(1))
    assert steps == 1000, steps
    return {"zh": ("在我们的运行里",), "en": ("In our run",)}


def _toy_steps(record) -> dict:
    steps = int(re.search(r"^(\d+) steps in", _out(record), re.M).group(1))
    return {"zh": (f"{steps} 步",), "en": (f"{steps} steps",)}


def _char_model(record) -> dict:
    steps = int(re.search(r"trained on \w+ for (\d+) steps", _out(record)).group(1))
    return {"zh": (f"现场训练 {steps} 步",), "en": (f"{steps} steps trained on the spot",)}


def _k9(id_: str, read, fmt: str, written: str, cell=_toy) -> Claim:
    return Claim(f"ch09.{id_}", KEPT9, read, fmt, written, cell=cell)


_LAYER0_PREV = r"previous-character scores of the heads of layer 0: (.*)$"
_BEST = r"^  {name}\s+L\dH\d ([\d.]+)\s+\|\s+([\d.]+)$"

CH09 = _claims(
    _k9("train-s", _grab(r"^\d+ steps in ([\d.]+) s"), "{:.0f}", "142", cell=_toy_steps),
    _k9("repeat-about", _grab(r"the repeat \(positions 16–30\) ([\d.]+)"), "{:.1f}", "0.5", cell=_none),
    # the OV table: layer 1 copies, layer 0 does not
    _k9("copy-min", lambda r: min(v[1] for k, v in _ov_rows(r).items() if k[0] == 1), "{}", "70"),
    _k9("copy-max", lambda r: max(v[1] for k, v in _ov_rows(r).items() if k[0] == 1), "{}", "84"),
    _k9("ov-min", lambda r: min(v[0] for k, v in _ov_rows(r).items() if k[0] == 1), "{}", "13"),
    _k9("ov-max", lambda r: max(v[0] for k, v in _ov_rows(r).items() if k[0] == 1), "{}", "20"),
    _k9("l0-copy-max", lambda r: max(v[1] for k, v in _ov_rows(r).items() if k[0] == 0), "{}", "14"),
    _k9("l0-ov-max", lambda r: max(v[0] for k, v in _ov_rows(r).items() if k[0] == 0), "{}", "5"),
    # the phase change
    _k9("repeat-0", _phase(0, 2), "{:.2f}", "3.26"),
    _k9("repeat-300", _phase(300, 2), "{:.2f}", "3.06"),
    _k9("prev-300", _phase(300, 3), "{:.2f}", "0.11"),
    _k9("ind-300", _phase(300, 4), "{:.2f}", "0.10"),
    _k9("repeat-500", _phase(500, 2), "{:.2f}", "0.69"),
    _k9("prev-500", _phase(500, 3), "{:.2f}", "0.90"),
    _k9("ind-500", _phase(500, 4), "{:.2f}", "0.80"),
    _k9("first-300", _phase(300, 1), "{:.2f}", "3.67"),
    _k9("first-500", _phase(500, 1), "{:.2f}", "4.21"),
    _k9("fastest-from", _grab(r"falls fastest between steps (\d+) and (\d+)", 1, int), "{}", "400"),
    _k9("fastest-to", _grab(r"falls fastest between steps (\d+) and (\d+)", 2, int), "{}", "425"),
    # ablation
    _k9("full-repeat", _grab(r"full model, loss on the repeat: ([\d.]+)"), "{:.2f}", "0.52"),
    _k9("no-prev-head", _cut("drop only the previous-token head"), "{:.2f}", "3.19", cell=_toy_steps),
    _k9("no-self-head", lambda r: _grab(r"full model, loss on the repeat: ([\d.]+)")(r) + _ablation(0, 1, 1)(r),
        "{:.2f}", "2.44", cell=_toy_steps),
    _k9("l1-first-min", lambda r: _layer1_first(r)[0], "{:.2f}", "0.25", cell=_toy_steps),
    _k9("l1-first-max", lambda r: _layer1_first(r)[-1], "{:.2f}", "0.31", cell=_toy_steps),
    _k9("l0h0-first", _ablation(0, 0, 2), "{:.1f}", "1.9", cell=_toy_steps),
    _k9("cheap-cut", _cut("drop the heads that cost"), "{:.2f}", "0.56"),
    _k9("one-induction", _cut("keep only the best induction head"), "{:.2f}", "2.07"),
    # chapter 7's character model (trained on the spot when chapter 7 left none)
    _k9("char-prev-min", lambda r: min(map(float, re.search(_LAYER0_PREV, _out(r), re.M).group(1).split())),
        "{:.2f}", "0.22", cell=_char_model),
    _k9("char-prev-max", lambda r: max(map(float, re.search(_LAYER0_PREV, _out(r), re.M).group(1).split())),
        "{:.2f}", "0.34", cell=_char_model),
    _k9("char-untrained", _grab(_BEST.format(name="previous character"), 2), "{:.2f}", "0.06", cell=_char_model),
    _k9("char-word-start", _grab(_BEST.format(name="word start"), 1), "{:.2f}", "0.24", cell=_char_model),
    _k9("char-induction", _grab(_BEST.format(name="induction"), 1), "{:.2f}", "0.02", cell=_char_model),
    _k9("toy-prev-head", _grab(r"previous-token head of layer 0 is H\d \(([\d.]+)\)"), "{:.2f}", "0.96",
        cell=_char_model),
)

# ---- ch05: the chapter's run kept in bench/results/chapter_outputs (deterministic: its seed is fixed)

KEPT5 = "chapter_outputs/ch05_block.json"


def _grad(layer: int, column: int) -> Callable[[object], float]:
    def read(record) -> float:
        out = _out(record)
        block = out[out.index("layer Pre-LN   Post-LN"):].split("\n\n")[0]
        return float(re.search(rf"^\s*{layer}\s+([\d.]+)\s+([\d.]+)$", block, re.M).group(column))
    return read


def _adam(column: int) -> Callable[[object], float]:
    def read(record) -> float:
        row = re.search(r"^\s*1\s+([\d.]+) /\s+([\d.]+)\s+([\d.]+) / ([\d.]+)\s+([\d.]+) / ([\d.]+)$",
                        _out(record), re.M)
        return float(row.group(column))
    return read


def _seeded(_record) -> dict:
    return {"zh": ("种子固定",), "en": ("the seed is fixed",)}


def _first_step(_record) -> dict:
    return {"zh": ("第一步",), "en": ("At the first step",)}


def _k5(id_: str, read, fmt: str, written: str, cell=_seeded) -> Claim:
    return Claim(f"ch05.{id_}", KEPT5, read, fmt, written, cell=cell)


CH05 = _claims(
    _k5("pre-1", _grad(1, 1), "{:.2f}", "0.48"), _k5("pre-24", _grad(24, 1), "{:.2f}", "0.18"),
    _k5("post-1", _grad(1, 2), "{:.2f}", "0.44"), _k5("post-12", _grad(12, 2), "{:.2f}", "0.88"),
    _k5("post-24", _grad(24, 2), "{:.2f}", "0.83"),
    _k5("top-ratio", lambda r: _grad(24, 2)(r) / _grad(24, 1)(r), "{:.1f}", "4.6", cell=_none),
    _k5("pre-fall", lambda r: _grad(1, 1)(r) / _grad(24, 1)(r), "{:.1f}", "2.7"),
    _k5("step", _adam(3), "{:.5f}", "0.00499", cell=_first_step),
    _k5("g-pre", _adam(1), "{:.2f}", "0.62", cell=_first_step),
    _k5("g-post", _adam(2), "{:.2f}", "1.55", cell=_first_step),
    _k5("o-pre", _adam(5), "{:.2f}", "0.49", cell=_first_step),
    _k5("o-post", _adam(6), "{:.2f}", "0.86", cell=_first_step),
)

# ---- ch11: the chapter's run kept in bench/results/chapter_outputs

KEPT11 = "chapter_outputs/ch11_encoder_decoder.json"
_MISSES = r"(\d+) wrong out of (\d+) numbers, (\d+) of them in the training set"
_DRAWS = (r"training drew (\d+) examples, (\d+) of them four-digit; the training set holds (\d+) four-digit numbers, "
          r"drawn ([\d.]+) times each on average, (\d+) of them never")


def _pattern(name: str, column: int) -> Callable[[object], int]:
    return lambda r: int(re.search(rf"^{name}\s+(\d+)\s+(\d+)\s+(\d+)\s", _out(r), re.M).group(column))


def _steps11(record) -> dict:
    steps = int(re.search(r"^(\d+) steps in", _out(record), re.M).group(1))
    return {"zh": (f"{steps} 步",), "en": (f"{steps} steps",)}


def _all_numbers(_record) -> dict:
    return {"zh": ("在我们的这次训练里",), "en": ("In our run",)}


def _k11(id_: str, read, fmt: str, written: str, cell=_all_numbers) -> Claim:
    return Claim(f"ch11.{id_}", KEPT11, read, fmt, written, cell=cell)


CH11 = _claims(
    _k11("train-s", _grab(r"^\d+ steps in ([\d.]+) s"), "{:.0f}", "1937", cell=_steps11),
    _k11("held-out", _grab(r"(\d+) held out", cast=int), "{:,}", "1,000", cell=_steps11),
    _k11("accuracy", _grab(r"exact-match accuracy on the held-out numbers: ([\d.]+)%", cast=str), "{}", "99.3",
         cell=_steps11),
    _k11("held-out-misses", lambda r: len(re.findall(r"^\s+(\d+): (\S+)\s+\(should be", _out(r), re.M)), "{}", "7",
         cell=_steps11),
    _k11("wrong", _grab(_MISSES, 1, int), "{}", "69"),
    _k11("total", _grab(_MISSES, 2, int), "{:,}", "10,000"),
    _k11("trained", _grab(_MISSES, 3, int), "{}", "62"),
    _k11("x00x-n", _pattern("X00X", 1), "{}", "81"),
    _k11("x00x-wrong", _pattern("X00X", 2), "{}", "55"),
    _k11("others", lambda r: _grab(_MISSES, 1, int)(r) - _pattern("X00X", 2)(r), "{}", "14"),
    # what training drew of the four-digit numbers (a number in the training set is not thereby learned)
    _k11("four-draws", _grab(_DRAWS, 2, int), "{:,}", "5,179"),
    _k11("four-train", _grab(_DRAWS, 3, int), "{:,}", "8,096"),
    _k11("four-per", _grab(_DRAWS, 4), "{:.2f}", "0.64"),
    _k11("four-never", _grab(_DRAWS, 5, int), "{:,}", "4,306"),
    _k11("miss-never", _grab(r"have four digits, and (\d+) of those were never drawn", cast=int), "{}", "46"),
)

# ---- ch08: bench/efficiency.py's run (bench/results/efficiency.json)

def _sweep_words(record) -> dict:
    threads, d = record["machine"]["threads"], record["score_sweep"]["d"]
    n = {1: ("1 个线程", "one thread")}.get(threads)
    if n is None:
        raise ClaimError(f"the sweep ran with {threads} threads; the sentence says one")
    return {"zh": (n[0], f"$d={d}$"), "en": (n[1], f"$d={d}$")}


def _row(record, n: int) -> dict:
    return next(r for r in record["score_sweep"]["rows"] if r["n"] == n)


def _mem_row(record, n: int) -> dict:
    return next(r for r in record["memory"]["rows"] if r["n"] == n)


def _memory_words(record) -> dict:
    d, block = record["memory"]["d"], record["memory"]["block_size"]
    return {"zh": (f"$d={d}$", f"块大小 {block}"), "en": (f"$d={d}$", f"blocks of {block}")}


CH08 = _claims(
    Claim("ch08.slope", "efficiency.json", lambda r: r["score_sweep"]["slope_scores"], "{:.1f}", "2.6",
          line=_sweep_words),
    Claim("ch08.cross", "efficiency.json",
          lambda r: min(x["n"] for x in r["score_sweep"]["rows"] if x["t_scores"] > x["t_linear"]), "{}", "256",
          line=_sweep_words),
    Claim("ch08.peak", "efficiency.json", lambda r: _row(r, 2048)["peak_scores"] / _row(r, 2048)["score_bytes"],
          "{:.1f}", "2.0", line=_sweep_words),
    Claim("ch08.mem-full-256", "efficiency.json", lambda r: _mem_row(r, 256)["full"] / 1024, "{:.0f}", "512",
          cell=_memory_words),
    Claim("ch08.mem-online-256", "efficiency.json", lambda r: _mem_row(r, 256)["online"] / 1024, "{:.0f}", "582",
          cell=_memory_words),
    Claim("ch08.mem-ratio-8192", "efficiency.json", lambda r: _mem_row(r, 8192)["full"] / _mem_row(r, 8192)["online"],
          "{:.0f}", "28", cell=_memory_words),
)

CLAIMS: dict[str, dict[str, Claim]] = {"ch01_attention": CH01, "ch04_positions": CH04, "ch05_block": CH05, "ch07_gpt": CH07,
                                       "ch08_efficiency": CH08, "ch09_inside_gpt": CH09,
                                       "ch11_encoder_decoder": CH11}

# Numbers in a line that reports a measurement which are settings or derived constants, not
# measurements (chapter -> number -> why).
NOT_MEASURED: dict[str, dict[str, str]] = {
    "ch07_gpt": {
        "92": "the time budget, a setting", "2000": "nanoGPT's step count, a setting", "15": "the sitting's budget",
        "10": "the share of text held out, a setting", "0.99": "β2, a setting", "0.95": "β2, a setting",
        "0.1": "the weight decay, a setting", "1.0": "the clipping norm, a setting", "3": "the warm-up share",
        "7,000": "the Tang corpus as read, not a training result", "5,000": "the Tang corpus as read",
        "3,800": "the Tang corpus as read",
        "180": "the training cell's default time budget, a setting", "5.4": "3% of 180 s, computed",
    },
    "ch05_block": {"60": "the training steps, a setting", "1": "a step index", "2.77": "ln 16, computed", "20": "the warm-up steps, a "
                   "setting", "16": "the vocabulary, a setting"},
    "ch11_encoder_decoder": {"160": "the training steps, a setting", "20,480": "160 steps × 128 examples, settings",
                             "9,000": "the training set's size, a setting (10,000 less the 1,000 held out)"},
    "ch06_param_count": {"96": "GPT-3 175B's published layer count", "0.03": "computed from the parameter counts the "
                         "chapter's cell prints, not a run"},
    "ch08_efficiency": {"256": "the tokens generated, a setting", "85.9": "80 GiB in GB, computed",
                        "2048": "a length of the sweep, a setting", "16": "4·2048² bytes, computed",
                        "1024": "32 heads × 32 layers, computed"},
    "ch04_positions": {"3.26": "ln 26, computed", "800": "the training steps, a setting"},
    "ch09_inside_gpt": {"300": "a step of the table, named by the claims around it", "200": "500 − 300",
                        "1000": "the training steps, a setting", "600": "the training steps, a setting",
                        "3.5": "a bound on 0.22/0.06, checked by test_ch09_ablation_and_character_model_text",
                        "6": "a bound on 0.34/0.06, checked by the same test", "0.3": "about the four values "
                        "+0.28 to +0.39, checked by the same test", "3.26": "ln 26 also appears as guessing",
                        "500": "a step of the table, named by the claims around it",
                        "4": "the steps under grading, a setting"},
}
