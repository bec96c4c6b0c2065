"""Hidden tests of ch08_efficiency: KVCache, cached_attention_step,
kv_cache_bytes, online_softmax_attention."""
from __future__ import annotations

import math

import torch
import torch.utils._pytree as pytree

from helpers.i18n import t

from .cases import EXACT, F32, LOOSE, Case, Check, Earlier, on_its_own, passes, same
from .core import (
    ATTENTION_FAMILY,
    SOFTMAX_FAMILY,
    Bug,
    GradingFailure,
    Raises,
    call,
    failure,
    forbidden,
    passed,
    seeded,
    show,
)
from .probes import Probe

FORBIDDEN = SOFTMAX_FAMILY | ATTENTION_FAMILY
F64 = torch.float64


# ---------------------------------------------------------------- references (float64)

def _softmax(s):
    m = s.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(s - m)
    return e / e.sum(dim=-1, keepdim=True)


def _weights(d, n_head, n_ctx, gen, dtype=torch.float32):
    def r(*shape):
        return torch.randn(*shape, generator=gen, dtype=dtype)
    return {"wpe": r(n_ctx, d) * 0.5, "w_q": r(d, d) / d ** 0.5, "w_k": r(d, d) / d ** 0.5,
            "w_v": r(d, d) / d ** 0.5, "w_o": r(d, d) / d ** 0.5, "n_head": n_head}


def _layer(x, W, allowed=lambda i, j: j <= i, positions=lambda n: torch.arange(n), scale=True,
           k_proj=True, v_proj=True, out_proj=True, one_head=False, scale_by_d=False, q_position=True,
           q_weight="w_q", interleaved=False, w_o_transposed=False):
    """Causal multi-head attention over a whole sequence in float64, with the
    knobs that the known bugs turn."""
    x = x.to(torch.float64)
    W = {key: (val.to(torch.float64) if isinstance(val, torch.Tensor) else val) for key, val in W.items()}
    B, n, d = x.shape
    H = 1 if one_head else W["n_head"]
    dk = d // H
    h = x + W["wpe"][positions(n)]
    def split(a):       # (B, n, d) -> (B, n, H, dk); interleaved: head i holds the channels i, i + H, i + 2H, ...
        return a.reshape(B, n, dk, H).transpose(-1, -2) if interleaved else a.reshape(B, n, H, dk)
    q = split(torch.einsum("bnd,de->bne", h if q_position else x, W[q_weight]))
    k = split(torch.einsum("bnd,de->bne", h, W["w_k"]) if k_proj else h)
    v = split(torch.einsum("bnd,de->bne", h, W["w_v"]) if v_proj else h)
    s = torch.einsum("bihc,bjhc->bhij", q, k)
    if scale:
        s = s / math.sqrt(d if scale_by_d else dk)
    i, j = torch.arange(n).unsqueeze(1), torch.arange(n).unsqueeze(0)
    s = s.masked_fill(~allowed(i, j), float("-inf"))
    a = torch.einsum("bhij,bjhc->bihc", _softmax(s), v).reshape(B, n, d)
    w_o = W["w_o"].T if w_o_transposed else W["w_o"]
    return torch.einsum("bnd,de->bne", a, w_o) if out_proj else a


def ref_layer(x, W):
    return _layer(x, W)


# ---------------------------------------------------------------- KVCache

CACHE_BUGS = {
    "overwrite": Bug("cache_overwrites",
                     "append 把这一层原来的内容覆盖了，而不是接在后面：缓存里永远只有最新的一个 token。"
                     "要用 torch.cat([旧的, 新的], dim=-2)。",
                     "append overwrites what the layer held instead of appending to it: the cache only ever holds "
                     "the newest token. Use torch.cat([old, new], dim=-2)."),
    "wrong_dim": Bug("cache_wrong_dim",
                     "沿错误的维度拼接：token 维是倒数第二维（dim=-2），形状 (B, n_head, t, d_k)。",
                     "you concatenate along the wrong dimension: tokens are the second-to-last axis (dim=-2) of "
                     "(B, n_head, t, d_k)."),
    "returns_new": Bug("cache_returns_new_only",
                       "append 把新的 k、v 存进去了（length 对），但只返回了新的那一个 token：要返回这一层到目前为止的"
                       "全部 (K, V)，也就是拼接之后的 self.keys[layer]、self.values[layer]。",
                       "append stores the new k, v (the length is right) but returns only the new token: return "
                       "all of this layer's (K, V) so far, the concatenated self.keys[layer], self.values[layer]."),
    "class_storage": Bug("cache_storage_shared_by_instances",
                         "新建的 KVCache 不是空的：存储放在了类属性上（或可变的默认参数里），所有实例共用一份，"
                         "上一个缓存的 token 还在。每一层一开始都要是空的：存储要在 __init__ 里为这个实例新建。",
                         "a new KVCache is not empty: the storage is a class attribute (or a mutable default "
                         "argument) that every instance shares, so the tokens of an earlier cache are still there. "
                         "Every layer starts empty: build the storage in __init__, new for this instance."),
    "no_default": Bug("cache_n_layer_no_default",
                      "KVCache() 不带参数时用不了（建不出来，或者一层也没有）：签名是 KVCache(n_layer=1)，不给参数时就是一层"
                      "（练习 2 和后面的单元格都会写 KVCache()）。",
                      "KVCache() without an argument cannot be used (it cannot be built, or it has no layer at all): "
                      "the signature is KVCache(n_layer=1), one layer when no argument is given (exercise 2 and the "
                      "cells after it write KVCache())."),
    "length_no_default": Bug("cache_length_no_default",
                             "length() 不带参数时没有回答第 0 层（出错了，或者数的是别的层，例如 layer=-1 的最后一层）："
                             "签名是 length(layer=0)，不给层号时问的是第 0 层。",
                             "length() without an argument does not answer for layer 0 (it fails, or it counts another "
                             "layer, such as the last one with layer=-1): the signature is length(layer=0), so without "
                             "a layer number it asks about layer 0."),
    "empty_length": Bug("cache_length_fails_when_empty",
                        "这一层还是空的时候，length 没有返回 0（出错了，例如 None 没有 .shape；或者只在有内容时才 return，"
                        "空的时候就返回了 None）：空的时候 length 要返回 0。",
                        "while the layer is still empty, length does not return 0 (it fails, None having no .shape, "
                        "say; or it returns only when the layer holds something, and None otherwise): an empty layer "
                        "has length 0."),
    "prepend": Bug("cache_prepends",
                   "新的 k、v 接在了已有内容的前面：缓存里的 token 顺序反了，最新的在最前。新的要接在后面："
                   "torch.cat([旧的, 新的], dim=-2)。",
                   "the new k, v go before what the layer held: the tokens in the cache are in reverse order, the "
                   "newest first. The new ones go after: torch.cat([old, new], dim=-2)."),
    "keys_as_values": Bug("cache_returns_keys_as_values",
                          "append 返回的 V 其实是 K：第二个返回值也用了 keys（抄写时的笔误？）。返回 (这一层的全部 K, 这一层的全部 V)。",
                          "the V that append returns is K: the second value returned is the keys too (a copy-and-paste "
                          "slip?). Return (all of this layer's K, all of this layer's V)."),
    "prompt": Bug("cache_single_token_only",
                  "一次追加多个 token（5 个 token 的提示词，t_new = 5）时出错或结果不对：append 只处理了 t_new = 1 的情形"
                  "（例如 squeeze 之后再 torch.stack 单个 token）。沿 dim=-2 用 torch.cat 拼接，t_new 是几都可以。",
                  "appending several tokens at once (a 5-token prompt, t_new = 5) fails or goes wrong: append only "
                  "handles t_new = 1 (squeezing, then torch.stack of single tokens, for instance). Concatenate "
                  "along dim=-2 with torch.cat, which works for any t_new."),
    "len_batch": Bug("cache_length_is_len_of_tensor",
                     "length 返回的是 len(张量)：len 数的是第一维，也就是 batch B，而不是 token 数。token 在倒数第二维："
                     "self.keys[layer].shape[-2]。",
                     "length returns len(tensor): len counts the first axis, the batch B, not the tokens. Tokens "
                     "are the second-to-last axis: self.keys[layer].shape[-2]."),
    "length_calls": Bug("cache_length_counts_appends",
                        "length 数的是调用 append 的次数，而不是 token 数：一次追加 5 个 token 的提示词之后，length "
                        "要加 5。length 数的是 token（dim=-2 的大小）。",
                        "length counts calls to append, not tokens: after a 5-token prompt is appended at once, "
                        "length goes up by 5. length counts tokens (the size of dim=-2)."),
    "shared": Bug("cache_layers_shared",
                  "不同的层共用了同一份存储（例如 [[]] * n_layer 或者忘了用 layer 下标）：往一层追加，另一层也变了。",
                  "the layers share one storage (for example [[]] * n_layer, or the layer index is not used): "
                  "appending to one layer changes another."),
}


class _Cache:
    """The student's KVCache behind safe calls: each method must exist and return the right kind of thing."""

    def __init__(self, KVCache, n_layer=None):
        self.label = "KVCache()" if n_layer is None else f"KVCache({n_layer})"
        args = () if n_layer is None else (n_layer,)
        self.obj = call(KVCache, *args, what=self.label,
                        hints=[(lambda exc, line: isinstance(exc, TypeError), CACHE_BUGS["no_default"])] if n_layer is None
                        else [])
        for name, sig in (("length", "length(layer)"), ("append", "append(layer, k, v)")):
            if not callable(getattr(self.obj, name, None)):
                raise GradingFailure(t(f"KVCache：没有 {sig} 方法。", f"KVCache: there is no {sig} method."))

    def length(self, layer, hints=()):
        return call(self.obj.length, layer, what=f"{self.label}.length({layer})", hints=hints)

    def append(self, layer, k, v, hints=()):
        res = call(self.obj.append, layer, k, v, what=f"{self.label}.append({layer}, k, v)", hints=hints)
        if not (isinstance(res, tuple) and len(res) == 2 and all(isinstance(z, torch.Tensor) for z in res)):
            raise GradingFailure(t(f"{self.label}.append 应返回 (K, V) 两个张量组成的元组，实际得到 {type(res).__name__}。",
                                   f"{self.label}.append must return a tuple (K, V) of two tensors, got "
                                   f"{type(res).__name__}."))
        return res


ANY_ERROR = lambda exc, line: True      # noqa: E731 - a hint predicate that matches every error


def _expect_length(cache, layer, want, label, bug=None, hint=None, empty=False, hints=()) -> None:
    """``empty``: the layer is new, so an error from length, or a None, is one that an empty layer makes."""
    got = cache.length(layer, hints=list(hints) + ([(ANY_ERROR, CACHE_BUGS["empty_length"])] if empty else []))
    if got != want:
        raise failure(label, str(want), repr(got), CACHE_BUGS["empty_length"] if empty and got is None else bug, hint)


def _kv_token_by_token(cache, ks, vs) -> None:
    """Layer 0 receives one token at a time: K and V grow along dim=-2."""
    for step in range(len(ks)):
        K, V = cache.append(0, ks[step], vs[step])
        expected = torch.cat(ks[:step + 1], dim=-2)
        if not same(K, expected, EXACT):
            on_other = step > 0 and any(same(K, torch.cat(ks[:step + 1], dim=dd), EXACT) for dd in (0, 1, -1))
            newest = same(K, ks[step], EXACT)
            reversed_ = step > 0 and same(K, torch.cat(ks[step::-1], dim=-2), EXACT)
            if newest and cache.length(0) == step + 1:
                bug = CACHE_BUGS["returns_new"]
            else:
                bug = CACHE_BUGS["overwrite"] if newest else CACHE_BUGS["wrong_dim"] if on_other \
                    else CACHE_BUGS["prepend"] if reversed_ else None
            raise failure(t(f"第 0 层第 {step + 1} 次 append 之后返回的 K", f"K returned by the append number {step + 1} to layer 0"),
                          show(expected), show(K), bug)
        if not same(V, torch.cat(vs[:step + 1], dim=-2), EXACT):
            raise failure(t(f"第 0 层第 {step + 1} 次 append 之后返回的 V", f"V returned by the append number {step + 1} to layer 0"),
                          show(torch.cat(vs[:step + 1], dim=-2)), show(V),
                          CACHE_BUGS["keys_as_values"] if same(V, expected, EXACT) else None,
                          hint=t("K 对了，V 没对：两者要用同样的方法保存。", "K is right but V is not: store both the same way."))
        _expect_length(cache, 0, step + 1, t(f"第 0 层 append {step + 1} 次之后的 length(0)",
                                             f"length(0) after {step + 1} appends to layer 0"),
                       CACHE_BUGS["overwrite"] if step and cache.length(0) == 1
                       else CACHE_BUGS["len_batch"] if cache.length(0) == K.shape[0] != step + 1 else None)


def _kv_prompt_then_token(cache, prompt_k, prompt_v, k, v) -> None:
    """Layer 2 receives a 5-token prompt, then one token; layers 0 and 1 stay as they were."""
    several = [(ANY_ERROR, CACHE_BUGS["prompt"])]
    K, V = cache.append(2, prompt_k, prompt_v, hints=several)
    K, V = cache.append(2, k, v, hints=several)
    expected = torch.cat([prompt_k, k], dim=-2)
    if not same(K, expected, EXACT) or not same(V, torch.cat([prompt_v, v], dim=-2), EXACT):
        bug = CACHE_BUGS["shared"] if K.dim() == 4 and K.shape[-2] > 6 else None
        if bug is None and tuple(K.shape) != tuple(expected.shape):
            bug = CACHE_BUGS["prompt"]
        raise failure(t("第 2 层：先追加 5 个 token 的提示词，再追加 1 个之后的 K",
                        "layer 2: K after appending a 5-token prompt, then 1 token"), show(expected), show(K), bug)
    _expect_length(cache, 2, 6, t("第 2 层先追加 5 个再追加 1 个之后的 length(2)",
                                  "length(2) after appending 5 then 1 tokens to layer 2"),
                   CACHE_BUGS["length_calls"] if cache.length(2) == 2 else None,
                   hint=t("length 数的是 token（dim=-2 的大小），不是调用 append 的次数。",
                          "length counts tokens (the size of dim=-2), not calls to append."))
    for layer, want in ((0, 4), (1, 0)):
        _expect_length(cache, layer, want, t(f"往第 2 层追加后，第 {layer} 层的 length", f"length of layer {layer} after "
                                             "appending to layer 2"), CACHE_BUGS["shared"])


def _verify_kv_cache(KVCache) -> int:
    """All checks of KVCache; raises GradingFailure, returns how many ran."""
    gen = seeded(801)
    cache = _Cache(KVCache, 3)
    for layer in range(3):
        _expect_length(cache, layer, 0, t(f"新建的 KVCache(3).length({layer})", f"a new KVCache(3).length({layer})"),
                       CACHE_BUGS["class_storage"], empty=True)
    B, H, dk = 2, 3, 4
    ks = [torch.randn(B, H, 1, dk, generator=gen) for _ in range(4)]
    vs = [torch.randn(B, H, 1, dk, generator=gen) for _ in range(4)]
    prompt_k, prompt_v = torch.randn(B, H, 5, dk, generator=gen), torch.randn(B, H, 5, dk, generator=gen)
    _kv_token_by_token(cache, ks, vs)
    for layer in (1, 2):
        _expect_length(cache, layer, 0, t(f"只往第 0 层追加后，length({layer})",
                                          f"length({layer}) after appending to layer 0 only"), CACHE_BUGS["shared"])
    _kv_prompt_then_token(cache, prompt_k, prompt_v, ks[0], vs[0])
    _expect_length(_Cache(KVCache, 1), 0, 0, t("另建一个 KVCache(1) 的 length(0)", "length(0) of a second, new KVCache(1)"),
                   CACHE_BUGS["class_storage"], empty=True)
    # KVCache(n_layer=1): without an argument, one empty layer that works
    default = _Cache(KVCache)
    _expect_length(default, 0, 0, t("KVCache()（不带参数）的 length(0)", "length(0) of KVCache() (no argument)"),
                   CACHE_BUGS["class_storage"], empty=True,
                   hints=[(Raises(types=("IndexError", "KeyError")), CACHE_BUGS["no_default"])])
    K, _ = default.append(0, ks[0], vs[0])
    if not same(K, ks[0], EXACT):
        raise failure(t("KVCache()（不带参数）：append(0, k, v) 返回的 K", "KVCache() (no argument): K returned by "
                        "append(0, k, v)"), show(ks[0]), show(K))
    # length(layer=0): without an argument, the length of layer 0
    missing = [(lambda exc, line: isinstance(exc, TypeError) and "required positional argument" in str(exc),
                CACHE_BUGS["length_no_default"])]
    got = call(default.obj.length, what=t("KVCache().length()（不给 layer）", "KVCache().length() (layer left out)"),
               hints=missing)
    if got != 1:
        raise failure(t("追加 1 个 token 之后的 KVCache().length()（不给 layer）", "KVCache().length() (layer left out) "
                        "after appending 1 token"), "1", repr(got), CACHE_BUGS["length_no_default"])
    # ... and in a cache of two layers, still layer 0
    two = _Cache(KVCache, 2)
    two.append(0, ks[0], vs[0])
    got = call(two.obj.length, what=t("KVCache(2).length()（不给 layer）", "KVCache(2).length() (layer left out)"),
               hints=missing)
    if got != 1:
        raise failure(t("KVCache(2) 的第 0 层追加 1 个 token 之后，length()（不给 layer）",
                        "KVCache(2).length() (layer left out) after appending 1 token to layer 0"), "1", repr(got),
                      CACHE_BUGS["length_no_default"])
    return 9


def check_kv_cache(KVCache) -> None:
    passed("KVCache", _verify_kv_cache(KVCache))


class KVCacheStandIn:
    """A correct KVCache for a student's cached_attention_step to use."""

    def __init__(self, n_layer=1):
        self.keys = [None] * n_layer
        self.values = [None] * n_layer

    def length(self, layer=0):
        return 0 if self.keys[layer] is None else self.keys[layer].shape[-2]

    def append(self, layer, k, v):
        if self.keys[layer] is None:
            self.keys[layer], self.values[layer] = k, v
        else:
            self.keys[layer] = torch.cat([self.keys[layer], k], dim=-2)
            self.values[layer] = torch.cat([self.values[layer], v], dim=-2)
        return self.keys[layer], self.values[layer]


# the probe is exercise 1's own hidden check: the stand-in comes in exactly when KVCache lost its points
EARLIER = (Earlier("KVCache", 1, passes(_verify_kv_cache), KVCacheStandIn),)


# ---------------------------------------------------------------- cached_attention_step

def _only_past(i, j):
    return (j < i) | ((i == 0) & (j == 0))


STEP_BUGS = [
    Bug("step_attends_only_to_itself",
        "新 token 只看见了它自己：缓存被覆盖了（检查 KVCache.append），或者没有用 append 返回的全部 K、V。",
        "the new token attends only to itself: the cache is overwritten (check KVCache.append), or the step does "
        "not use all of the K, V that append returns.",
        lambda x, W: _layer(x, W, allowed=lambda i, j: j == i)),
    Bug("step_attends_only_to_cache",
        "新 token 只看了缓存里过去的 token，没有看它自己：要先把新的 k、v 追加进缓存，再做注意力。",
        "the new token attends only to the past tokens in the cache, not to itself: append the new k and v "
        "first, then attend.",
        lambda x, W: _layer(x, W, allowed=_only_past)),
    Bug("step_position_not_advanced",
        "位置没有前进：每个新 token 都加了 wpe[0]。新 token 的位置是缓存里已有的 token 数 cache.length(layer)。",
        "the position does not advance: every new token gets wpe[0]. The new token's position is the number of "
        "tokens already in the cache, cache.length(layer).",
        lambda x, W: _layer(x, W, positions=lambda n: torch.zeros(n, dtype=torch.long))),
    Bug("step_position_off_by_one",
        "位置错了一位：在 append 之后才读 cache.length(layer)，第一个 token 用了 wpe[1]。位置要在追加之前读。",
        "the position is off by one: cache.length(layer) is read after append, so the first token gets wpe[1]. "
        "Read the position before appending.",
        lambda x, W: _layer(x, W, positions=lambda n: torch.arange(1, n + 1))),
    Bug("step_query_without_position",
        "q 是从没加位置的 x_t 算出来的：位置只加给了 k、v。先 h = x_t + weights[\"wpe\"][pos]，q、k、v 三个都从 h 算。",
        "q is computed from x_t without the position: only k and v got it. First h = x_t + weights[\"wpe\"][pos], "
        "then q, k and v all come from h.",
        lambda x, W: _layer(x, W, q_position=False)),
    Bug("step_no_position",
        "没有加位置表 weights[\"wpe\"][pos]。",
        "the position table weights[\"wpe\"][pos] is not added.",
        lambda x, W: _layer(x, {**W, "wpe": torch.zeros_like(W["wpe"])})),
    Bug("step_caches_values_before_projection",
        "缓存里存的 V 是投影之前的向量 h，而不是 h @ W_V：缓存要存投影之后的 k、v。",
        "the cache holds the vectors h before the projection instead of h @ W_V: store k and v after projection.",
        lambda x, W: _layer(x, W, v_proj=False)),
    Bug("step_caches_inputs_before_projection",
        "缓存里存的 K、V 都是投影之前的向量 h，而不是 h @ W_K 和 h @ W_V：缓存要存投影之后的 k、v。",
        "the cache holds the vectors h before projection for both K and V, instead of h @ W_K and h @ W_V: store "
        "k and v after projection.",
        lambda x, W: _layer(x, W, k_proj=False, v_proj=False)),
    Bug("step_one_head",
        "没有分成 n_head 个头：你把整个 d 维向量当成了一个头来做注意力。要把 q、k、v 变形成 (B, n_head, 1, d_k)，"
        "每个头各自做 softmax，最后再合并。",
        "the vectors are not split into n_head heads: attention runs on the whole d-wide vector as one head. "
        "Reshape q, k, v to (B, n_head, 1, d_k), let every head take its own softmax, then merge them.",
        lambda x, W: _layer(x, W, one_head=True)),
    Bug("step_scaled_by_sqrt_d",
        "分数除以的是 √d，而每个头的宽度是 d_k = d / n_head：要除以 √d_k。",
        "the scores are divided by √d, but a head is d_k = d / n_head wide: divide by √d_k.",
        lambda x, W: _layer(x, W, scale_by_d=True)),
    Bug("step_attends_to_first_token_only",
        "新 token 只看见了第一个 token：多半是加了一个 (1, t) 的因果掩码 tril(ones(1, t))，它只留下第 0 列。"
        "缓存里只有过去和现在，用不着掩码。",
        "the new token sees the first token only: most likely a causal mask tril(ones(1, t)) of shape (1, t), "
        "which keeps column 0 alone. The cache holds only the past and the present: nothing needs masking.",
        lambda x, W: _layer(x, W, allowed=lambda i, j: j == 0)),
    Bug("step_query_from_w_k",
        "q 是用 w_k 投影的：三个投影各用自己的矩阵，q 要乘 weights[\"w_q\"]。",
        "q is projected with w_k: each of the three projections has its own matrix, and q uses weights[\"w_q\"].",
        lambda x, W: _layer(x, W, q_weight="w_k")),
    Bug("step_heads_interleaved",
        "头的切法和 full_attention 不一样：第 i 个头拿到的是第 i、i + n_head、i + 2·n_head……个通道（先按 (d_k, n_head) "
        "变形再换轴）。第 i 个头是连续的 d_k 个通道 i·d_k … (i+1)·d_k − 1：先变形成 (B, 1, n_head, d_k)，再交换 1、2 两维。",
        "the heads are cut differently from full_attention: head i gets channels i, i + n_head, i + 2·n_head, ... "
        "(reshaped to (d_k, n_head), then permuted). Head i is the d_k consecutive channels i·d_k ... (i+1)·d_k − 1: "
        "reshape to (B, 1, n_head, d_k), then swap dimensions 1 and 2.",
        lambda x, W: _layer(x, W, interleaved=True)),
    Bug("step_w_o_transposed",
        "输出矩阵用成了转置：weights[\"w_o\"].T。这一层的矩阵都按 h @ W 的方式用（和 full_attention 一样），合并之后乘 weights[\"w_o\"]。",
        "the output matrix is used transposed, weights[\"w_o\"].T. This layer uses every matrix as h @ W (as "
        "full_attention does): after merging, multiply by weights[\"w_o\"].",
        lambda x, W: _layer(x, W, w_o_transposed=True)),
    Bug("step_no_scaling", "分数没有除以 √d_k（d_k = d / n_head）。",
        "the scores are not divided by √d_k (d_k = d / n_head).", lambda x, W: _layer(x, W, scale=False)),
    Bug("step_no_output_projection", "合并各头之后没有乘 weights[\"w_o\"]。",
        "after merging the heads the result is not multiplied by weights[\"w_o\"].",
        lambda x, W: _layer(x, W, out_proj=False)),
]


def _step_cases(gen):
    """(label, B, d, n_head, steps, dtype): the step's outputs, one token at a time, must equal full attention."""
    return [
        (t("B=2, d=16, 4 个头，9 步", "B=2, d=16, 4 heads, 9 steps"), 2, 16, 4, 9, torch.float32),
        (t("B=1, d=12, 3 个头，14 步", "B=1, d=12, 3 heads, 14 steps"), 1, 12, 3, 14, torch.float32),
        (t("B=3, d=8, 1 个头，5 步", "B=3, d=8, 1 head, 5 steps"), 3, 8, 1, 5, torch.float32),
        (t("float64，B=2, d=24, 6 个头，10 步，与独立参考实现比较",
           "float64, B=2, d=24, 6 heads, 10 steps, compared with an independent reference"), 2, 24, 6, 10, torch.float64),
    ]


STEP_SHAPE_BUGS = {
    "squeezed": Bug("step_token_axis_dropped",
                    "返回的是 (B, d)：token 那一维被去掉了（squeeze 或 reshape(B, d)）。返回值要和 x_t 一样是 (B, 1, d)。",
                    "the result is (B, d): the token axis was dropped (squeeze, or reshape(B, d)). The result is "
                    "(B, 1, d), like x_t."),
    "heads": Bug("step_heads_not_merged",
                 "返回的还是分开的各头 (B, n_head, 1, d_k)：要先 transpose(1, 2) 再 reshape(B, 1, d) 把各头合并，"
                 "然后乘 weights[\"w_o\"]。",
                 "the result still has separate heads (B, n_head, 1, d_k): merge them with transpose(1, 2) and "
                 "reshape(B, 1, d), then multiply by weights[\"w_o\"]."),
}
STEP_DTYPE = Bug("step_dtype_not_kept",
                 "x_t 是 float64，返回值却不是：结果要和 x_t 的 dtype 相同（例如中间转成了 float32 却没有转回来）。",
                 "x_t is float64 but the result is not: the result has x_t's dtype (computed in float32, say, and "
                 "not cast back).")
STEP_OTHER_LAYER = Bug("step_other_layer",
                       "位置超出了位置表：缓存里这一层的长度比已经生成的 token 还多。多半是读长度或追加时没有用参数 layer："
                       "cache.length()（总是第 0 层）或 cache.append(0, ...)。两处都要写 layer：cache.length(layer)、"
                       "cache.append(layer, k, v)。",
                       "the position ran past the position table: this layer's length in the cache is larger than the "
                       "number of tokens so far. Most likely the length or the append does not use the argument "
                       "layer: cache.length() (always layer 0) or cache.append(0, ...). Both need layer: "
                       "cache.length(layer), cache.append(layer, k, v).")
STEP_NO_DEFAULT = Bug("step_layer_no_default",
                      "不给 layer 时用的不是第 0 层（出错了，或者用了别的层，例如 layer=-1 的最后一层）："
                      "签名是 cached_attention_step(x_t, weights, cache, layer=0)，layer 的默认值是 0。",
                      "leaving out layer does not use layer 0 (it fails, or it uses another layer, such as the last "
                      "one with layer=-1): the signature is cached_attention_step(x_t, weights, cache, layer=0), "
                      "layer defaults to 0.")
STEP_ERRORS = [(Raises(types=("IndexError",), line=("wpe",)), STEP_OTHER_LAYER),
               (Raises(types=("TypeError",), contains=("required positional argument",)), STEP_NO_DEFAULT)]


def _step_shape_bug(y, B, d, H):
    shape = tuple(y.shape) if isinstance(y, torch.Tensor) else None
    if shape == (B, d):
        return STEP_SHAPE_BUGS["squeezed"]
    if shape == (B, H, 1, d // H) and H > 1:
        return STEP_SHAPE_BUGS["heads"]
    return None


def _run_steps(check, x, Ws, cache, label):
    """Feed x token by token; layer l uses Ws[l] and the same cache. Returns one (B, steps, d) output per layer."""
    B, steps, d = x.shape
    outs = [[] for _ in Ws]
    for i in range(steps):
        for layer, W in enumerate(Ws):
            y = check.call(x[:, i:i + 1], W, cache, layer, label=t(f"{label}，第 {i} 步", f"{label}, step {i}"))
            outs[layer].append(check.tensor(t(f"{label}，第 {i} 步的输出", f"{label}, output of step {i}"),
                                            y, (B, 1, d), bug=_step_shape_bug(y, B, d, W["n_head"])).detach())
    return [torch.cat(o, dim=1) for o in outs]


def check_cached_step(cached_attention_step, KVCache) -> None:
    """The step runs on the student's KVCache; when that is wrong, on a correct one (and the
    rest of the cell, the visible test included, sees the same)."""
    with on_its_own(cached_attention_step, EARLIER) as swapped:
        if swapped:
            KVCache = getattr(cached_attention_step, "__globals__", {}).get("KVCache", KVCache)
        passed("cached_attention_step", _step_checks(cached_attention_step, KVCache))


def _step_checks(cached_attention_step, KVCache) -> int:
    what = "cached_attention_step"
    gen = seeded(802)
    check = Check(what, cached_attention_step, hints=STEP_ERRORS[:1])
    for label, B, d, H, steps, dtype in _step_cases(gen):
        W = _weights(d, H, steps + 3, gen, dtype)
        x = torch.randn(B, steps, d, generator=gen, dtype=dtype)
        got, = _run_steps(check, x, [W], call(KVCache, 1, what="KVCache(1)"), label)
        check.expect(t(f"{label}：逐个 token 的输出（应等于完整重算 full_attention(x)）",
                       f"{label}: token-by-token outputs (must equal the full recomputation full_attention(x))"),
                     got, ref_layer(x, W), bugs=STEP_BUGS, bug_args=(x, W))
        if got.dtype != dtype:
            raise check.fail(t(f"{label}：输出的 dtype", f"{label}: dtype of the output"), str(dtype), str(got.dtype),
                             STEP_DTYPE)
    d, H, steps = 8, 2, 4              # two layers in one cache, interleaved as a model would call them
    Ws = [_weights(d, H, steps, gen), _weights(d, H, steps, gen)]
    x = torch.randn(1, steps, d, generator=gen)
    # layer=0 is the default: the call without it is the call on layer 0, in a cache of two layers too
    W0, x0 = _weights(d, H, 2, gen), torch.randn(1, 2, d, generator=gen)
    cache0 = call(KVCache, 2, what="KVCache(2)")
    label = t("cached_attention_step(x_t, weights, cache)，不给 layer，cache = KVCache(2)",
              "cached_attention_step(x_t, weights, cache), layer left out, cache = KVCache(2)")
    ys = [call(cached_attention_step, x0[:, i:i + 1], W0, cache0, what=f"{what}: {label}", hints=STEP_ERRORS)
          for i in range(2)]
    check.expect(label, torch.cat([check.tensor(label, y, (1, 1, d)).detach() for y in ys], dim=1), ref_layer(x0, W0))
    held = call(cache0.length, 0, what="KVCache(2).length(0)")
    if held != 2:
        raise check.fail(t(f"{label}：两步之后 cache.length(0)", f"{label}: cache.length(0) after two steps"), "2",
                         repr(held), STEP_NO_DEFAULT)
    label = t("两层共用一个 KVCache(2)，交替调用 layer=0 和 layer=1", "two layers sharing one KVCache(2), called "
              "alternately with layer=0 and layer=1")
    for layer, got in enumerate(_run_steps(check, x, Ws, call(KVCache, 2, what="KVCache(2)"), label)):
        check.expect(t(f"{label}：第 {layer} 层的输出", f"{label}: the outputs of layer {layer}"), got, ref_layer(x, Ws[layer]),
                     hint=t("位置和追加都要用参数 layer 指定的那一层：cache.length(layer)、cache.append(layer, ...)。",
                            "use the layer given by the argument for both the position and the append: "
                            "cache.length(layer), cache.append(layer, ...)."))
    return check.n


# ---------------------------------------------------------------- kv_cache_bytes

def ref_kv_cache_bytes(n_layer, n_tokens, d_model, n_head, n_kv_head, bytes_per_value=2, batch=1):
    return 2 * n_layer * n_tokens * n_kv_head * (d_model // n_head) * bytes_per_value * batch


KV_BUGS = [
    Bug("kv_bytes_ignores_kv_heads",
        "GQA/MQA 算出来和 MHA 一样大：要么按 n_head 个 KV 头算了，要么 KV 头的宽度用了 d_model / n_kv_head（两者乘起来都是 "
        "d_model）。缓存里只有 n_kv_head 个 K/V 头，每个和查询头一样宽，是 d_model / n_head。",
        "GQA/MQA come out as large as MHA: either n_head KV heads are counted, or a KV head is taken as "
        "d_model / n_kv_head wide (both multiply to d_model). The cache holds only n_kv_head K/V heads, each as "
        "wide as a query head, d_model / n_head.",
        lambda L, T, d, h, kv, b=2, B=1: 2 * L * T * d * b * B),
    Bug("kv_bytes_no_factor_2", "少了因子 2：每个 token 要存 K 和 V 两个向量。",
        "the factor 2 is missing: every token stores two vectors, K and V.",
        lambda L, T, d, h, kv, b=2, B=1: L * T * kv * (d // h) * b * B),
    Bug("kv_bytes_ignores_bytes", "没有乘每个数的字节数 bytes_per_value：你算的是数的个数，不是字节数。",
        "bytes_per_value is ignored: you counted numbers, not bytes.",
        lambda L, T, d, h, kv, b=2, B=1: 2 * L * T * kv * (d // h) * B),
    Bug("kv_bytes_ignores_batch", "没有乘 batch：每条序列都有自己的缓存。",
        "batch is ignored: every sequence in the batch has its own cache.",
        lambda L, T, d, h, kv, b=2, B=1: 2 * L * T * kv * (d // h) * b),
    Bug("kv_bytes_full_width_per_kv_head",
        "每个 KV 头按 d_model 宽算了：一个头只有 d_k = d_model / n_head 宽。",
        "each KV head is counted as d_model wide: one head is only d_k = d_model / n_head wide.",
        lambda L, T, d, h, kv, b=2, B=1: 2 * L * T * kv * d * b * B),
]


KV_DEFAULTS = Bug("kv_bytes_defaults",
                  "默认值不对（或者不给时用不了，例如 batch=None）：签名是 kv_cache_bytes(..., bytes_per_value=2, batch=1)，"
                  "不给这两个参数时按 fp16（每个数 2 字节）、batch 1 算。",
                  "the defaults are wrong (or unusable, batch=None, say): the signature is "
                  "kv_cache_bytes(..., bytes_per_value=2, batch=1), so leaving them out means fp16 (2 bytes per "
                  "number) and batch 1.")
KV_ERRORS = [(Raises(types=("TypeError",), contains=("required positional argument", "NoneType")), KV_DEFAULTS)]
KV_TYPE = {
    "float": Bug("kv_bytes_returns_float",
                 "返回的是 float（多半是 d_model / n_head 用了 /，或者乘了一个浮点数）：字节数是 Python int，"
                 "用 // 整除，或者最后 int(...)。",
                 "the result is a float (most likely d_model / n_head with /, or a float factor): a number of "
                 "bytes is a Python int; divide with //, or int(...) at the end."),
    "numpy": Bug("kv_bytes_returns_numpy",
                 "返回的是 numpy 的整数（多半用了 np.prod）：字节数是 Python int，用 math.prod、直接相乘，或者最后 int(...)。",
                 "the result is a numpy integer (most likely from np.prod): a number of bytes is a Python int; use "
                 "math.prod, plain multiplication, or int(...) at the end."),
    "tensor": Bug("kv_bytes_returns_tensor",
                  "返回的是张量：字节数是 Python int，用 int(...) 或 .item() 转成整数。",
                  "the result is a tensor: a number of bytes is a Python int; convert it with int(...) or .item()."),
}


def _kv_type_bug(got):
    if isinstance(got, float):
        return KV_TYPE["float"]
    if isinstance(got, torch.Tensor):
        return KV_TYPE["tensor"]
    if type(got).__module__ == "numpy":
        return KV_TYPE["numpy"]
    return None


def _kv_defaults(kv_cache_bytes, what) -> None:
    """bytes_per_value=2 and batch=1 when left out: the call without them equals the call that gives them."""
    args = (2, 16, 64, 8, 2)
    bare = call(kv_cache_bytes, *args, what=f"{what}{args}", hints=KV_ERRORS)
    given = call(kv_cache_bytes, *args, bytes_per_value=2, batch=1,
                 what=f"{what}({', '.join(map(str, args))}, bytes_per_value=2, batch=1)")
    try:
        equal = bare == given
        equal = bool(equal.all()) if isinstance(equal, torch.Tensor) else bool(equal)
    except Exception:  # noqa: BLE001 - something that cannot be compared is not the same number
        equal = False
    if not equal:
        raise failure(t(f"{what}{args}（不给 bytes_per_value 和 batch）", f"{what}{args} (bytes_per_value and batch "
                        "left out)"), t(f"和给出 bytes_per_value=2, batch=1 时一样：{given!r}",
                                        f"the same as with bytes_per_value=2, batch=1: {given!r}"), repr(bare), KV_DEFAULTS)


def check_kv_cache_bytes(kv_cache_bytes) -> None:
    what = "kv_cache_bytes"
    _kv_defaults(kv_cache_bytes, what)
    n = 1
    cases = [
        (t("LLaMA-2 7B（MHA），4096 个 token，fp16", "LLaMA-2 7B (MHA), 4096 tokens, fp16"), (32, 4096, 4096, 32, 32), {}),
        (t("LLaMA-2 70B（GQA，64 个查询头、8 个 KV 头），4096 个 token，fp16",
           "LLaMA-2 70B (GQA, 64 query heads, 8 KV heads), 4096 tokens, fp16"), (80, 4096, 8192, 64, 8), {}),
        (t("LLaMA-2 70B 按 MHA 算，32768 个 token", "LLaMA-2 70B as if MHA, 32768 tokens"), (80, 32768, 8192, 64, 64), {}),
        (t("MQA：12 层，d=768，12 个头，1 个 KV 头，1024 个 token", "MQA: 12 layers, d=768, 12 heads, 1 KV head, 1024 tokens"),
         (12, 1024, 768, 12, 1), {}),
        (t("GQA，float32（4 字节），batch 8", "GQA, float32 (4 bytes), batch 8"), (24, 2048, 2048, 16, 4),
         {"bytes_per_value": 4, "batch": 8}),
        (t("int8 量化（1 字节），batch 3", "int8 quantised (1 byte), batch 3"), (40, 8192, 5120, 40, 8),
         {"bytes_per_value": 1, "batch": 3}),
        (t("1 层、1 个 token 的最小例子", "the smallest case: 1 layer, 1 token"), (1, 1, 64, 8, 2), {}),
    ]
    def same(a, b):
        try:
            return a is not None and not isinstance(a, bool) and float(a) == b and int(a) == b
        except Exception:
            return False

    def fingerprint(bug, args, kw):
        try:
            return bug.impl(*args, kw.get("bytes_per_value", 2), kw.get("batch", 1))
        except Exception:
            return None

    results = []
    for label, args, kw in cases:
        full = f"{what}{args + tuple(kw.values())}: {label}"
        results.append((full, args, kw, call(kv_cache_bytes, *args, what=full, **kw)))
    for full, args, kw, got in results:
        expected = ref_kv_cache_bytes(*args, **kw)
        n += 1
        if not same(got, expected):
            # the known bug that explains this case and the most of the others
            best, best_hits = None, 0
            for b in KV_BUGS:
                fp = fingerprint(b, args, kw)
                if fp is None or fp == expected or not same(got, fp):
                    continue
                hits = sum(same(g, fingerprint(b, a, k)) for _, a, k, g in results)
                if hits > best_hits:
                    best, best_hits = b, hits
            raise failure(full, f"{expected:,}", f"{got:,}" if isinstance(got, int) else repr(got), best,
                          hint=t("字节数 = 2 × 层数 × token 数 × n_kv_head × (d_model / n_head) × 每个数的字节数 × batch。",
                                 "bytes = 2 × layers × tokens × n_kv_head × (d_model / n_head) × bytes per value × batch."))
    got = call(kv_cache_bytes, 32, 4096, 4096, 32, 8, what=f"{what}(32, 4096, 4096, 32, 8)")
    n += 1
    if not isinstance(got, int) or isinstance(got, bool):
        raise failure(t(f"{what} 返回值的类型", f"type of what {what} returns"), "int", type(got).__name__,
                      _kv_type_bug(got), hint=t("字节数是整数：用 // 而不是 /，或者最后 int(...)。",
                             "a number of bytes is an integer: use // rather than /, or int(...) at the end."))
    passed(what, n)


# ---------------------------------------------------------------- online softmax

def ref_attention(q, k, v, causal=False):
    q, k, v = (a.to(torch.float64) for a in (q, k, v))
    s = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = s.shape[-2:]
        s = s.masked_fill(torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None], float("-inf"))
    return torch.einsum("...qk,...kd->...qd", _softmax(s), v)


def ref_attention_blocked(q, k, v, block_size, causal=False):
    """The reference with the student's signature (block_size changes nothing in the result)."""
    return ref_attention(q, k, v, causal)


def _online(q, k, v, block_size, causal=False, rescale_o=True, rescale_l=True, scale=True, divide=True,
            block_causal=False, drop_tail=False, strict=False):
    """A blocked online softmax in float64 with the knobs the known bugs turn."""
    q, k, v = (a.to(torch.float64) for a in (q, k, v))
    n_q, n_k = q.shape[-2], k.shape[-2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf"), dtype=torch.float64)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=torch.float64)
    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=torch.float64)
    rows = torch.arange(n_q)[:, None]
    stop = (n_k // block_size) * block_size if drop_tail else n_k
    for start in range(0, stop, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = torch.einsum("...qd,...kd->...qk", q, kb)
        if scale:
            s = s / math.sqrt(q.shape[-1])
        if causal:
            cols = torch.arange(start, start + kb.shape[-2])[None, :]
            if block_causal:
                blocked = (cols // block_size) > (rows // block_size)
            elif strict:
                blocked = cols >= rows
            else:
                blocked = cols > rows
            s = s.masked_fill(blocked, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.exp(m - safe)
        p = torch.exp(s - safe)
        l = (alpha * l if rescale_l else l) + p.sum(-1, keepdim=True)
        o = (alpha * o if rescale_o else o) + p @ vb
        m = m_new
    return o / l if divide else o


def _bug(key, zh, en, **knobs):
    return Bug(key, zh, en, lambda q, k, v, block_size, causal=False: _online(q, k, v, block_size, causal, **knobs))


ONLINE_BUGS = [
    _bug("online_output_not_rescaled",
         "最大值变大时没有重新缩放累积的输出 o：旧的 o 是以旧的最大值为基准的，要先乘 α = exp(m - m_new) 再加上新块。",
         "the accumulated output o is not rescaled when the max grows: the old o is relative to the old max; "
         "multiply it by α = exp(m - m_new) before adding the new block.", rescale_o=False),
    _bug("online_sum_not_rescaled",
         "最大值变大时没有重新缩放运行中的指数和 ℓ：旧的 ℓ 也要先乘 α = exp(m - m_new)。",
         "the running sum ℓ is not rescaled when the max grows: the old ℓ must also be multiplied by "
         "α = exp(m - m_new).", rescale_l=False),
    _bug("online_nothing_rescaled",
         "最大值变大时 ℓ 和 o 都没有重新缩放：两者都要乘 α = exp(m - m_new)。",
         "neither ℓ nor o is rescaled when the max grows: multiply both by α = exp(m - m_new).",
         rescale_o=False, rescale_l=False),
    _bug("online_block_level_causal",
         "因果掩码只按块来做：查询 i 看到了它自己那一块里位置在 i 之后的键。块内也要屏蔽 j > i。",
         "the causal mask works per block only: query i sees the keys after i inside its own block. Mask j > i "
         "inside the block too.", block_causal=True),
    _bug("online_causal_strict",
         "因果掩码把对角线也屏蔽了（j >= i）：查询 i 应当能看见键 i 自己。",
         "the causal mask also hides the diagonal (j >= i): query i must see key i itself.", strict=True),
    _bug("online_last_block_dropped",
         "n 不能被 block_size 整除时丢掉了最后那一块不满的键：range(0, n_k, block_size) 会包含它。",
         "when n is not a multiple of block_size the last, shorter block of keys is dropped: "
         "range(0, n_k, block_size) includes it.", drop_tail=True),
    _bug("online_no_scaling", "分数没有除以 √d_k。", "the scores are not divided by √d_k.", scale=False),
    Bug("online_scaled_by_sqrt_d_v",
        "分数除以的是 √d_v（v 的宽度）：缩放用的是 q、k 的宽度 d_k = q.shape[-1]，它可以和 d_v 不同。",
        "the scores are divided by √d_v (the width of v): the scale uses the width of q and k, d_k = q.shape[-1], "
        "which may differ from d_v.",
        lambda q, k, v, block_size, causal=False: _online(q * math.sqrt(q.shape[-1] / v.shape[-1]), k, v, block_size,
                                                          causal)),
    _bug("online_no_final_division", "最后没有除以 ℓ：输出要等于 o / ℓ。",
         "the output is not divided by ℓ at the end: it must be o / ℓ.", divide=False),
    Bug("online_causal_ignored", "causal=True 时没有屏蔽未来的键：查询 i 只能看键 j ≤ i。",
        "with causal=True the future keys are not masked: query i may only see keys j ≤ i.",
        lambda q, k, v, block_size, causal=False: _online(q, k, v, block_size, False)),
    Bug("online_keys_counted_by_queries",
        "键块的循环只走到了 n_q（查询的个数）：键的个数是 n_k = k.shape[-2]，它可以和 n_q 不同，"
        "n_q 之后的键都被漏掉了。用 range(0, n_k, block_size)。",
        "the loop over key blocks stops at n_q (the number of queries): there are n_k = k.shape[-2] keys, which "
        "may differ from n_q, and the keys after n_q are left out. Use range(0, n_k, block_size).",
        lambda q, k, v, block_size, causal=False: _online(
            q, k[..., :-(-q.shape[-2] // block_size) * block_size, :], v[..., :-(-q.shape[-2] // block_size) * block_size, :],
            block_size, causal)),
]


def _online_native(q, k, v, block_size, causal=False, m0=None, running=True):
    """The same online softmax in the inputs' own dtype (where exp under- or overflows as the student's does),
    with a first m of ``m0`` instead of -inf, or (``running=False``) m = the block's own max instead of the
    running max."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    m = torch.full(q.shape[:-1] + (1,), float("-inf") if m0 is None else m0, dtype=q.dtype)
    l = torch.zeros(q.shape[:-1] + (1,), dtype=q.dtype)
    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    rows = torch.arange(n_q)[:, None]
    for start in range(0, n_k, block_size):
        kb, vb = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = q @ kb.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.arange(start, start + kb.shape[-2])[None, :] > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(-1, keepdim=True)) if running else s.amax(-1, keepdim=True)
        alpha, p = torch.exp(m - m_new), torch.exp(s - m_new)
        l = alpha * l + p.sum(-1, keepdim=True)
        o = alpha * o + p @ vb
        m = m_new
    return o / l


ONLINE_BUGS += [
    Bug("online_max_starts_at_zero",
        "m 一开始是 0，而不是 -inf：当所有分数都远小于 0（这里约为 -400）时，exp(s - 0) 下溢成 0，ℓ = 0，o / ℓ 得到 nan。"
        "m 是“到目前为止见过的最大分数”：一开始用 -inf（第一块之后就是第一块的最大值），每个 exp(s - m) 都不超过 1，"
        "也不会全部下溢。",
        "m starts at 0 instead of -inf: when every score is far below 0 (about -400 here), exp(s - 0) underflows to 0, "
        "ℓ = 0 and o / ℓ is nan. m is \"the largest score seen so far\": start it at -inf (after the first block it is "
        "that block's max), so every exp(s - m) is at most 1 and they cannot all underflow.",
        lambda q, k, v, block_size, causal=False: _online_native(q, k, v, block_size, causal, m0=0.0)),
    Bug("online_max_not_running",
        "m 取的是这一块自己的最大值，而不是到目前为止的最大值：后面一块的最大值小得多时，α = exp(m - m_new) 溢出成 inf，"
        "inf × 0 得到 nan。m_new = torch.maximum(m, 这一块的最大值)：m 只会变大，α 永远不超过 1。",
        "m is the block's own max, not the largest score so far: when a later block's max is much smaller, "
        "α = exp(m - m_new) overflows to inf, and inf × 0 gives nan. m_new = torch.maximum(m, the block's max): m "
        "only grows, and α never exceeds 1.",
        lambda q, k, v, block_size, causal=False: _online_native(q, k, v, block_size, causal, running=False)),
]


ONLINE_NXN = Bug("online_forms_n_by_n",
                 "生成了 n×n 的矩阵（分数或掩码）：在线 softmax 每次只处理一块键，分数块是 (..., n_q, block_size)，"
                 "块内的因果掩码也只要 n_q × block_size（由 torch.arange 的下标比较得到）。",
                 "an n×n matrix (of scores or a mask) was created: the online softmax handles one block of keys at a "
                 "time, a block of scores is (..., n_q, block_size), and a block's causal mask is n_q × block_size too "
                 "(from comparing torch.arange indices).")


class _TensorSizes(torch.overrides.TorchFunctionMode):
    """Records the largest tensor returned by a torch function (views excluded)
    while it is active. A function mode, not a dispatch mode: entering a
    dispatch mode imports torch._dynamo, which rebinds torch.manual_seed."""

    def __init__(self):
        super().__init__()
        self.largest_numel = 0
        self.largest_shape: tuple = ()
        self.op = ""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in pytree.tree_flatten(out)[0]:
            if isinstance(x, torch.Tensor) and not x._is_view() and x.numel() > self.largest_numel:
                self.largest_numel, self.largest_shape = x.numel(), tuple(x.shape)
                self.op = str(getattr(func, "__name__", func))
        return out


# o allocated like q ((..., n_q, d_k)) meets p @ v ((..., n_q, d_v)): the cases with d_k = 8, d_v = 5
O_AS_WIDE_AS_Q = Raises(contains=("tensor a (8) must match the size of tensor b (5)",
                                  "tensor a (5) must match the size of tensor b (8)"))

ONLINE_HINTS = [
    (Raises(types=("RuntimeError",), contains=("expected scalar type", "to have the same dtype")),
     Bug("online_state_dtype",
         "m、ℓ、o 建成了另一种 dtype（例如写死了 dtype=torch.float64 或 torch.float32），和 q 的 dtype 不一样，"
         "矩阵乘法就出错了：用 dtype=q.dtype（或 q.new_zeros、torch.zeros_like）建它们，out 也就和 q 的 dtype 相同。",
         "m, ℓ, o are built in another dtype (dtype=torch.float64 or torch.float32 written in, say) than q's, so "
         "the matrix product fails: build them with dtype=q.dtype (or q.new_zeros, torch.zeros_like), and out "
         "keeps q's dtype too.")),
    (O_AS_WIDE_AS_Q,
     Bug("online_output_as_wide_as_q",
         "输出 o 建成了和 q 一样宽（d_k，例如 torch.zeros_like(q)），可它要和 v 一样宽：形状是 (..., n_q, d_v)，"
         "d_v = v.shape[-1] 可以不等于 d_k。",
         "the output o is built as wide as q (d_k, e.g. torch.zeros_like(q)), but it is as wide as v: its shape "
         "is (..., n_q, d_v), and d_v = v.shape[-1] may differ from d_k.")),
    (Raises(contains=("must be a 3D tensor",)),
     Bug("online_bmm_3d_only",
         "torch.bmm 只收三维张量 (batch, n, d)：这里的输入是 (..., n, d)，前面可以有零个或多个批量维。用 @（torch.matmul）"
         "相乘，它会对前面的批量维广播；转置最后两维用 transpose(-2, -1)。",
         "torch.bmm takes 3-D tensors only, (batch, n, d): the inputs here are (..., n, d), with zero or more leading "
         "batch axes. Multiply with @ (torch.matmul), which broadcasts over them, and swap the last two axes with "
         "transpose(-2, -1).")),
    (Raises(line=("transpose(1,2)", "transpose(2,1)")),
     Bug("transpose_fixed_axes",
         "transpose(1, 2) 假定输入正好有一个批量维：这里的输入是 (..., n, d)，前面可以有零个或多个批量维。"
         "转置最后两维请写 transpose(-2, -1)（或 .mT）。",
         "transpose(1, 2) assumes exactly one batch axis: the inputs here are (..., n, d), with zero or more "
         "leading batch axes. Swap the last two axes with transpose(-2, -1) (or .mT).")),
]


def _online_cases(gen) -> list[Case]:
    def r(*shape, scale=1.0, dtype=torch.float32):
        return torch.randn(*shape, generator=gen, dtype=dtype) * scale

    def case(label, q, k, v, block, causal, tol=F32):
        return Case(f"block_size={block}, causal={causal}: {label}", (q, k, v, block), {"causal": causal}, tol=tol,
                    bugs=ONLINE_BUGS)

    return [
        case(t("非因果，n_q=7, n_k=13（13 不能被 4 整除）", "non-causal, n_q=7, n_k=13 (13 is not a multiple of 4)"),
             r(3, 7, 8), r(3, 13, 8), r(3, 13, 5), 4, False),
        case(t("非因果，批量维 (2, 3)，n=12（整除）", "non-causal, batch dims (2, 3), n=12 (divides)"),
             r(2, 3, 12, 16), r(2, 3, 12, 16), r(2, 3, 12, 16), 4, False),
        case(t("分数很大（q、k 放大 8 倍，最大值常常变化）", "large scores (q and k scaled by 8, the max changes often)"),
             r(2, 6, 4, scale=8.0), r(2, 11, 4, scale=8.0), r(2, 11, 3), 3, False, LOOSE),
        case(t("因果，n=12", "causal, n=12"), r(2, 12, 8), r(2, 12, 8), r(2, 12, 6), 4, True),
        case(t("因果，n=11（不整除）", "causal, n=11 (does not divide)"),
             r(2, 2, 11, 8, scale=3.0), r(2, 2, 11, 8, scale=3.0), r(2, 2, 11, 4), 3, True),
        case(t("二维输入 (n, d)，没有批量维", "2-D inputs (n, d), no batch axis"), r(5, 4), r(5, 4), r(5, 2), 1, True),
        case(t("block_size 大于 n（只有一块）", "block_size larger than n (a single block)"),
             r(4, 8), r(6, 8), r(6, 3), 32, False),
        case(t("所有分数都远小于 0（约 -400）：float32 里 exp(s) 会下溢", "every score far below 0 (about -400): in float32 "
               "exp(s) underflows"), r(2, 5, 16, scale=0.3) + 10.0, -(r(2, 9, 16, scale=0.3) + 10.0), r(2, 9, 3), 4, False),
        case(t("float64，n=20，与独立参考实现比较", "float64, n=20, compared with an independent reference"),
             r(2, 20, 16, dtype=F64), r(2, 20, 16, dtype=F64), r(2, 20, 7, dtype=F64), 6, True),
    ]


def _online_memory(check, online_softmax_attention, gen) -> None:
    """Never an n×n tensor: every tensor created while it runs is recorded."""
    what, n = check.what, 160
    q, k, v = (torch.randn(2, 2, n, 8, generator=gen) for _ in range(3))
    label = t(f"n = {n}，block_size = 16，causal=True：记录函数创建的每一个张量",
              f"n = {n}, block_size = 16, causal=True: every tensor the function creates is recorded")
    check.call(q, k, v, 16, causal=True, label=label)    # first through call() (safe, tamper-checked)
    sizes = _TensorSizes()
    try:
        with forbidden(FORBIDDEN, what), sizes:
            out = online_softmax_attention(q, k, v, 16, causal=True)
    except Exception as exc:
        raise GradingFailure(t(f"{what}: {label}：你的代码抛出了 {type(exc).__name__}: {exc}",
                               f"{what}: {label}: your code raised {type(exc).__name__}: {exc}")) from None
    if sizes.largest_numel >= n * n:
        raise failure(f"{what}: {label}", t(f"没有一个张量达到 n×n = {n * n:,} 个元素", f"no tensor of n×n = {n * n:,} "
                                            "elements or more"),
                      t(f"形状 {sizes.largest_shape}，{sizes.largest_numel:,} 个元素，由 {sizes.op} 创建",
                        f"shape {sizes.largest_shape}, {sizes.largest_numel:,} elements, made by {sizes.op}"), ONLINE_NXN)
    check.expect(label, out, ref_attention(q, k, v, True))


class _KeyBlocks(torch.overrides.TorchFunctionMode):
    """The sizes, along the token axis, of the pieces the function cuts out of k (slices, split, chunk, narrow),
    k's same-shaped copies (k.float(), k.contiguous()) and transposes (k.mT, k.transpose(-2, -1)) included.
    The grader's own copy of the visible test's watcher (helpers/ch08_efficiency/watch.py): a student's
    notebook can change what helpers holds, not what the sealed grading code runs."""

    CUTS = frozenset({"__getitem__", "split", "chunk", "narrow", "tensor_split", "split_with_sizes", "unsafe_split"})

    def __init__(self, k: torch.Tensor):
        super().__init__()
        self.shape = tuple(k.shape)
        self.swapped = self.shape[:-2] + (self.shape[-1], self.shape[-2])
        self.tracked: list[tuple[torch.Tensor, int]] = [(k, -2)]      # (tensor, its token axis)
        self.sizes: list[int] = []
        self.starts: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        src = args[0] if args else None
        axis = next((ax for x, ax in self.tracked if x is src), None) if isinstance(src, torch.Tensor) else None
        if axis is not None:
            cut = getattr(func, "__name__", "") in self.CUTS
            whole = self.shape if axis == -2 else self.swapped
            other = self.swapped if axis == -2 else self.shape
            for x in pytree.tree_flatten(out)[0]:
                if not isinstance(x, torch.Tensor):
                    continue
                shape = tuple(x.shape)
                if shape == whole:
                    self.tracked.append((x, axis))
                elif shape == other and not cut:
                    self.tracked.append((x, -1 if axis == -2 else -2))
                elif (cut and x.dim() == len(whole) and shape[:-2] == whole[:-2]
                      and all(shape[i] == whole[i] for i in (-2, -1) if i != axis)):
                    self.sizes.append(int(shape[axis]))
                    step = src.stride(axis) or 1
                    self.starts.append((x.storage_offset() - src.storage_offset()) // step)
        return out

    def revisited(self) -> int | None:
        """The first block cut again after another block was cut in between (a second pass over the keys)."""
        seen: set[int] = set()
        last = None
        for start in self.starts:
            if start in seen and start != last:
                return start
            seen.add(start)
            last = start
        return None


ONLINE_BLOCKS = Bug("online_blocks_not_block_size",
                    "键不是按每块 block_size 个来分的：torch.chunk(k, block_size) 切出的是 block_size 块（每块 n / block_size 个），"
                    "逐个键处理则是每块 1 个。每一块要有 block_size 个键（只有最后一块可以不满）：range(0, n_k, block_size) "
                    "配合 k[..., start:start + block_size, :]，或 k.split(block_size, dim=-2)。",
                    "the keys are not cut into blocks of block_size: torch.chunk(k, block_size) makes block_size "
                    "blocks (of n / block_size keys each), one key at a time makes blocks of 1. Every block holds "
                    "block_size keys (only the last may be shorter): range(0, n_k, block_size) with "
                    "k[..., start:start + block_size, :], or k.split(block_size, dim=-2).")


def _online_blocks(check, online_softmax_attention, gen) -> None:
    """Blocks of block_size keys, the last one possibly shorter: the pieces cut out of k are recorded."""
    what, n, block = check.what, 150, 16
    q, k, v = (torch.randn(2, n, 8, generator=gen) for _ in range(3))
    label = t(f"n = {n}，block_size = {block}：记录从 k 切出的每一块有多少个键",
              f"n = {n}, block_size = {block}: how many keys each piece cut out of k holds")
    blocks, query_blocks = _KeyBlocks(k), _KeyBlocks(q)
    try:
        with forbidden(FORBIDDEN, what), blocks, query_blocks:
            out = online_softmax_attention(q, k, v, block)
    except Exception as exc:
        raise GradingFailure(t(f"{what}: {label}：你的代码抛出了 {type(exc).__name__}: {exc}",
                               f"{what}: {label}: your code raised {type(exc).__name__}: {exc}")) from None
    sizes = blocks.sizes
    if not sizes:
        raise check.fail(label, t(f"键被切成每块 {block} 个", f"the keys cut into blocks of {block}"),
                         t("键从来没有被切开：每次都用了全部 n_k 个键", "the keys were never cut: every step used all "
                           "n_k keys"), ONLINE_KEYS_WHOLE)
    if max(sizes) != block:
        shown = sorted(set(sizes))
        raise check.fail(label, t(f"每块 {block} 个键（最后一块 {n % block} 个）", f"blocks of {block} keys (the last "
                                  f"one {n % block})"), t(f"从 k 切出的块大小：{shown}", f"sizes of the pieces cut out "
                                                          f"of k: {shown}"), ONLINE_BLOCKS)
    again = blocks.revisited()
    if again is not None and not query_blocks.sizes:        # tiles of queries (FlashAttention-2) revisit key blocks
        raise check.fail(label, t("每一块键只读一遍", "every block of keys read once"),
                         t(f"从位置 {again} 开始的那一块读了两遍", f"the block starting at position {again} read twice"),
                         ONLINE_TWO_PASS)
    check.expect(label, out, ref_attention(q, k, v))


ONLINE_KEYS_WHOLE = Bug("online_keys_never_blocked",
                        "键从来没有被切成块：多半是把查询分成了块，每一块查询都和全部 n_k 个键算分数（那是一行完整的 softmax，"
                        "不是在线 softmax）。要切的是键和值：每次处理 block_size 个键，k[..., start:start + block_size, :]，"
                        "并按公式更新 m、ℓ、o。",
                        "the keys are never cut into blocks: most likely the queries are cut into blocks and each one "
                        "is scored against all n_k keys at once (a whole softmax row, not an online one). Cut the keys "
                        "and values: block_size keys at a time, k[..., start:start + block_size, :], updating m, ℓ, o "
                        "by the formulas.")

ONLINE_TWO_PASS = Bug("online_two_passes",
                      "键被读了两遍：第一遍找每行的最大值，第二遍再求和、求输出。这是两遍的 softmax，不是在线 softmax。"
                      "在线 softmax 对每一块只读一遍：来了新的一块就更新 m，再把旧的 ℓ 和 o 乘上 α = exp(m - m_new)。",
                      "the keys are read twice: a first pass finds each row's max, a second one sums and builds the "
                      "output. That is the two-pass softmax, not the online one. The online softmax reads every block "
                      "once: when a block arrives, update m and multiply the old ℓ and o by α = exp(m - m_new).")

ONLINE_DTYPE = Bug("online_dtype_not_kept",
                   "q 是 float64，out 却不是：out 要和 q 的 dtype 相同（例如把 q、k、v 转成了 float32 却没有转回来）。",
                   "q is float64 but out is not: out has q's dtype (q, k, v converted to float32, say, and not "
                   "converted back).")


def _online_dtype(check, gen) -> None:
    label = t("float64 的 q、k、v：out 的 dtype", "float64 q, k, v: the dtype of out")
    q, k, v = (torch.randn(2, 9, 4, generator=gen, dtype=F64) for _ in range(3))
    out = check.call(q, k, v, 4, causal=True, label=label)
    check.expect(label, out, ref_attention(q, k, v, True))
    if out.dtype != F64:
        raise check.fail(label, str(F64), str(out.dtype), ONLINE_DTYPE)


def check_online_softmax(online_softmax_attention) -> None:
    what = "online_softmax_attention"
    gen = seeded(803)
    check = Check(what, online_softmax_attention, reference=ref_attention_blocked, forbid=FORBIDDEN,
                  hints=ONLINE_HINTS, dtype_follows=None)
    check.cases(_online_cases(gen))
    _online_memory(check, online_softmax_attention, gen)
    _online_blocks(check, online_softmax_attention, gen)
    _online_dtype(check, gen)
    passed(what, check.n)


# ---------------------------------------------------------------- what the visible tests show (helpers/probes)

ERRORS = {
    "KVCache": [(Raises(types=("TypeError",), contains=("__init__() missing",)), CACHE_BUGS["no_default"]),
                (Raises(types=("TypeError",), contains=("length() missing",)), CACHE_BUGS["length_no_default"]),
                (Raises(types=("AttributeError", "TypeError"), contains=("NoneType",)), CACHE_BUGS["empty_length"])],
    "cached_attention_step": STEP_ERRORS,
    "kv_cache_bytes": KV_ERRORS,
    "online_softmax_attention": ONLINE_HINTS,
}


def ref_gqa_layer(x, W):
    """The chapter's attention layer with grouped-query attention (the optional challenge), float64: w_k and
    w_v project to n_kv_head heads of d_k, and query head i reads KV head i // (n_head // n_kv_head)."""
    x = x.to(F64)
    B, n, d = x.shape
    H, G = W["n_head"], W["n_kv_head"]
    dk = d // H
    h = x + W["wpe"][:n].to(F64)
    q = (h @ W["w_q"].to(F64)).reshape(B, n, H, dk).transpose(1, 2)
    k = (h @ W["w_k"].to(F64)).reshape(B, n, G, dk).transpose(1, 2).repeat_interleave(H // G, dim=1)
    v = (h @ W["w_v"].to(F64)).reshape(B, n, G, dk).transpose(1, 2).repeat_interleave(H // G, dim=1)
    s = (q @ k.transpose(-2, -1)) / math.sqrt(dk)
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return (_softmax(s) @ v).transpose(1, 2).reshape(B, n, d) @ W["w_o"].to(F64)


def _gqa_probe(gen) -> Probe:
    """The challenge's self-check: outputs only (d = 8, 4 query heads, 2 KV heads of d_k = 2)."""
    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).round(decimals=3)
    d, n_head, n_kv, n = 8, 4, 2, 5
    W = {"wpe": r(n, d, scale=0.5), "w_q": r(d, d, scale=d ** -0.5), "w_k": r(d, n_kv * d // n_head, scale=d ** -0.5),
         "w_v": r(d, n_kv * d // n_head, scale=d ** -0.5), "w_o": r(d, d, scale=d ** -0.5), "n_head": n_head,
         "n_kv_head": n_kv}
    return Probe("gqa", args=(r(1, n, d), W), reference=ref_gqa_layer)


def _online_probe(name, q, k, v, block_size, causal=False, tol=F32) -> Probe:
    return Probe(name, args=(q, k, v, block_size), kwargs={"causal": causal}, reference=ref_attention_blocked,
                 bugs=ONLINE_BUGS, tol=tol)


def probes() -> list[Probe]:
    gen = seeded(850)

    def r(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).round(decimals=3)
    x, W = r(2, 6, 8), _weights(8, 2, 8, gen)          # d = 8, two heads: √d and √d_k differ
    W = {k: (v.round(decimals=3) if isinstance(v, torch.Tensor) else v) for k, v in W.items()}
    kv_args, kv_kwargs = (24, 2048, 2048, 16, 4), {"bytes_per_value": 4, "batch": 3}
    return [
        Probe("step", args=(x, W), reference=ref_layer, bugs=STEP_BUGS),
        # GQA with 4 bytes per value and a batch of 3: each factor differs from the others
        Probe("kv_bytes", args=kv_args, kwargs=kv_kwargs, reference=ref_kv_cache_bytes, bugs=KV_BUGS,
              run_bug=lambda bug: bug.impl(*kv_args, 4, 3)),
        # n_q = 7 queries, n_k = 13 keys (not a multiple of 4), d_k = 8, d_v = 5
        _online_probe("online", r(3, 7, 8), r(3, 13, 8), r(3, 13, 5), 4),
        _online_probe("online_batch", r(2, 3, 8, 4), r(2, 3, 8, 4), r(2, 3, 8, 4), 4),
        _online_probe("online_large", r(2, 6, 4, scale=8.0), r(2, 11, 4, scale=8.0), r(2, 11, 3), 3, tol=LOOSE),
        _online_probe("online_causal", r(2, 12, 8), r(2, 12, 8), r(2, 12, 6), 4, causal=True),
        _online_probe("online_causal_odd", r(2, 2, 11, 8, scale=3.0), r(2, 2, 11, 8, scale=3.0), r(2, 2, 11, 4), 3,
                      causal=True),
        _online_probe("online_2d", r(5, 4), r(5, 4), r(5, 2), 1, causal=True),
        # every score far below 0 (about -400): exp(s) underflows in float32 unless m is the running max
        _online_probe("online_low", r(2, 5, 16, scale=0.3) + 10.0, -(r(2, 9, 16, scale=0.3) + 10.0), r(2, 9, 3), 4),
        _gqa_probe(gen),
    ]

