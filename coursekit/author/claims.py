"""The claims ledger: every measured number in a chapter's prose comes from a record.

A number a chapter reports from a measurement (a loss, a speed, a ratio, a step
count, a row of an experiment's table) is not typed into the prose. The prose
holds a placeholder, in both languages::

    ... ended at a validation loss of {{claim: ch07.lr4e-3-val}} ...

and the build (``coursekit.author.build.resolve_claims``) fills in the value,
read at build time from the record named here (a file under ``bench/results/``,
or a chapter's fingerprinted outputs in ``bench/results/chapter_outputs/``).

Each ``Claim`` keeps, next to where its value is read:

- ``written``: the value, as printed, that the sentence around it was written
  for. When a record changes, the value in the prose changes with it, but the
  words around it ("about twice", "no difference") may no longer hold:
  ``check`` fails until someone rereads the sentence and updates ``written``.
- ``line`` and ``cell``: the record's conditions (config, text, machine, load,
  seed) as words, per language, derived from the record itself. The line of
  markdown that cites the claim must contain each of ``line``'s words (what
  differs from claim to claim: the model, the batch, the learning rate), and
  the markdown cell around it each of ``cell``'s (what a whole section shares:
  the text trained on, the time budget, the machine). Change the record's
  conditions, or the conditions the sentence states, and ``check`` fails.

``unrecorded`` finds the other half: a number in a line that reports a
measurement which is not a placeholder (nor a setting or a derived constant
listed in ``NOT_MEASURED`` with its reason). ``tests/test_claims.py`` runs both
for every chapter in ``CLAIMS``.
"""
from __future__ import annotations

import json
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "bench" / "results"
PLACEHOLDER = re.compile(r"\{\{\s*claim:\s*([a-z0-9][a-z0-9_.+-]*)\s*\}\}")


class ClaimError(ValueError):
    """A placeholder names no claim, or a claim cannot be read from its record."""


# ----------------------------------------------------------------- records

@lru_cache(maxsize=None)
def _load(path: str, root: str, stamp: int = 0) -> object:
    file = Path(root) / path
    text = file.read_text(encoding="utf-8")
    if file.suffix == ".jsonl":
        return tuple(json.loads(line) for line in text.splitlines() if line.startswith("{"))
    return json.loads(text)


_OVERRIDE: list[Path] = []


def load(path: str, root: Path | None = None) -> object:
    """A record: a JSON file, or a JSON-lines file as a tuple of its rows (comment lines dropped)."""
    root = Path(root or (_OVERRIDE[-1] if _OVERRIDE else RESULTS))
    try:
        stamp = (root / path).stat().st_mtime_ns
    except FileNotFoundError:
        stamp = 0
    return _load(path, str(root), stamp)


@contextmanager
def records_from(root: Path):
    """Read every record from ``root`` instead of bench/results (the tests change a copy)."""
    _OVERRIDE.append(Path(root))
    try:
        yield
    finally:
        _OVERRIDE.pop()
        _load.cache_clear()


def one(rows, **where) -> dict:
    """The single row whose fields equal ``where`` (a nested dict compares whole)."""
    found = [r for r in rows if all(r.get(k) == v for k, v in where.items())]
    if len(found) != 1:
        raise ClaimError(f"{len(found)} rows match {where} (want exactly one)")
    return found[0]


# ----------------------------------------------------------------- claims

Words = Callable[[object], dict]          # record -> {"zh": (...), "en": (...)}


def _none(_record) -> dict:
    return {"zh": (), "en": ()}


@dataclass(frozen=True)
class Claim:
    id: str
    record: str                            # path under bench/results/
    read: Callable[[object], float]        # the value, from the loaded record
    fmt: str                               # how the prose prints it, e.g. "{:.2f}"
    written: str                           # the value the sentence was written for
    line: Words = field(default=_none)     # conditions the citing line must state
    cell: Words = field(default=_none)     # conditions the citing cell must state
    langs: tuple[str, ...] = ("zh", "en")  # where it is cited (a number one language writes in other units)

    def value(self, root: Path | None = None) -> str:
        try:
            return self.fmt.format(self.read(load(self.record, root)))
        except (KeyError, IndexError, TypeError, FileNotFoundError) as e:
            raise ClaimError(f"claim {self.id}: cannot read it from {self.record}: {e!r}") from e

    def conditions(self, root: Path | None = None) -> tuple[dict, dict]:
        record = load(self.record, root)
        return self.line(record), self.cell(record)


def _claims(*claims: Claim) -> dict[str, Claim]:
    out = {}
    for c in claims:
        if c.id in out:
            raise ClaimError(f"claim {c.id} registered twice")
        out[c.id] = c
    return out


# ---- ch07: the recipe sweep and the runs it was checked with

SWEEP_BASE = dict(n_layer=4, n_head=4, d_model=128, n_ctx=64, batch_size=32, lr=3e-3, weight_decay=0.1, beta2=0.99)
TEXT = {"zh": ("tinyshakespeare", "92 秒"), "en": ("tinyshakespeare", "92 seconds")}


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


def _sweep_claim(id_: str, round_: int, ch: dict, what: str, fmt: str, written: str, **words) -> Claim:
    path = f"recipe_sweep_round{round_}.jsonl"
    return Claim(id_, path, lambda rows: one(rows, ch=ch)[what], fmt, written,
                 line=_config_words(ch, **words),
                 cell=lambda rows: {"zh": TEXT["zh"] + (f"第 {round_} 轮",), "en": TEXT["en"] + (f"round {round_}",)})


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

CLAIMS: dict[str, dict[str, Claim]] = {"ch04_positions": CH04, "ch07_gpt": CH07}

# Numbers in a line that reports a measurement which are settings or derived constants, not
# measurements (chapter -> number -> why).
NOT_MEASURED: dict[str, dict[str, str]] = {
    "ch07_gpt": {
        "92": "the time budget, a setting", "2000": "nanoGPT's step count, a setting", "15": "the sitting's budget",
        "10": "the share of text held out, a setting", "0.99": "β2, a setting", "0.95": "β2, a setting",
        "0.1": "the weight decay, a setting", "1.0": "the clipping norm, a setting", "3": "the warm-up share",
        "7,000": "the Tang corpus as read, not a training result", "5,000": "the Tang corpus as read",
        "3,800": "the Tang corpus as read",
    },
    "ch04_positions": {"3.26": "ln 26, computed", "800": "the training steps, a setting"},
}

# Lines that report a measurement: numbers in them must be claims (per language).
REPORTS = {
    "en": re.compile(r"\b(?:we ran|we measured|measured|records?|recorded|in our run|runs? (?:on|at)|ended at|"
                     r"validation loss|tokens per second|tokens/s|went from|gave)\b"),
    "zh": re.compile(r"跑了|量出|量到|测得|记下|记录|我们的(?:这次)?运行|验证损失|每秒|降到|结束时"),
}
# a number that can be a measurement: a decimal, a number with thousands separators, or a count
# with a unit (seconds, steps, tokens, a ratio, a share)
NUMBER = re.compile(r"(?<![\w.$\\{-])(?:\d+\.\d+|\d{1,3}(?:,\d{3})+|\d+(?=\s*(?:seconds|s\b|秒|steps|步|tokens|个 token|"
                    r"×|times|倍|%)))(?![\w}]|e-)")


def resolve(text: str, chapter: str, root: Path | None = None) -> str:
    """``text`` with each placeholder replaced by its claim's value, read from the record."""
    table = CLAIMS.get(chapter, {})

    def sub(m: re.Match) -> str:
        claim = table.get(m.group(1))
        if claim is None:
            raise ClaimError(f"{chapter}: no claim {m.group(1)!r} in coursekit/author/claims.py")
        return claim.value(root)
    return PLACEHOLDER.sub(sub, text)


@dataclass(frozen=True)
class Use:
    """A placeholder where the chapter cites a claim."""
    claim: str
    lang: str
    line: str          # the markdown line holding it
    cell: str          # the markdown cell holding it


def uses(chapter: str, lang: str, notebooks: Path | None = None) -> list[Use]:
    from coursekit.author import build
    nb, _ = build.read_chapter(Path(notebooks or build.NOTEBOOKS) / f"{chapter}.md")
    out = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or cell.metadata.get("lang") != lang:
            continue
        for line in cell.source.splitlines():
            for m in PLACEHOLDER.finditer(line):
                out.append(Use(m.group(1), lang, line, cell.source))
    return out


def check(chapter: str, notebooks: Path | None = None, root: Path | None = None) -> list[str]:
    """Every problem of the chapter's claims: a placeholder with no claim, a claim cited in one
    language only or not at all, a record that no longer gives the value the sentence was written
    for, a condition of the record its citing line or cell does not state."""
    problems = []
    table = CLAIMS.get(chapter, {})
    cited = {lang: uses(chapter, lang, notebooks) for lang in ("zh", "en")}
    for lang, found in cited.items():
        for use in found:
            claim = table.get(use.claim)
            if claim is None:
                problems.append(f"{chapter} [{lang}]: placeholder {use.claim!r} names no claim")
                continue
            try:
                line, cell = claim.conditions(root)
            except (ClaimError, KeyError, IndexError, AssertionError) as e:
                problems.append(f"{chapter} [{lang}] {use.claim}: the record's conditions are not those the "
                                f"claim states: {e!r}")
                continue
            for word in line[lang]:
                if word not in PLACEHOLDER.sub("", use.line):
                    problems.append(f"{chapter} [{lang}] {use.claim}: the line does not state {word!r}: {use.line}")
            for word in cell[lang]:
                if word not in use.cell:
                    problems.append(f"{chapter} [{lang}] {use.claim}: the cell does not state {word!r}")
    for cid, claim in table.items():
        for lang in claim.langs:
            if not any(u.claim == cid for u in cited[lang]):
                problems.append(f"{chapter} [{lang}]: claim {cid} is never cited")
        try:
            got = claim.value(root)
        except ClaimError as e:
            problems.append(str(e))
            continue
        if got != claim.written:
            problems.append(f"{chapter}: claim {cid}: its record now gives {got}, the prose was written for "
                            f"{claim.written}: reread the sentence, then update `written`")
    return problems


def unrecorded(chapter: str, lang: str, notebooks: Path | None = None) -> list[str]:
    """Numbers in lines of the chapter's prose that report a measurement and are not claims."""
    from coursekit.author import build, ledger
    nb, _ = build.read_chapter(Path(notebooks or build.NOTEBOOKS) / f"{chapter}.md")
    allowed = NOT_MEASURED.get(chapter, {})
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown" or cell.metadata.get("lang") != lang:
            continue
        for line in ledger.strip(cell.source).splitlines():
            if not REPORTS[lang].search(line):
                continue
            bare = re.sub(r"`[^`]*`|\$[^$]*\$|https?://\S+|\(?[\w/.-]+\.(?:py|json|jsonl|txt|md)\)?", " ",
                          PLACEHOLDER.sub(" ", line))
            for m in NUMBER.finditer(bare):
                if m.group(0) not in allowed:
                    found.append(f"{chapter} [{lang}]: {m.group(0)!r} has no record: {line.strip()[:160]}")
    return found
