"""Wrong answers to ch09_inside_gpt written apart from the catalogue: what people
hand in for the head scores and the ablation, in their own styles (loops,
einsum, numpy, hooks of every kind). bench/diagnosis_rate.py measures how often
the hidden checks name the mistake."""
from harness import Variant

P, I, A = ("test_prev_token_score",), ("test_induction_score",), ("test_ablate_heads",)


def prev(body: str) -> dict:
    return {"prev_token_score": "def prev_token_score(attn):\n" + body}


def ind(body: str) -> dict:
    return {"induction_score": "def induction_score(attn, period):\n" + body}


def abl(body: str) -> dict:
    return {"ablate_heads": "def ablate_heads(model, heads, x, y):\n" + body}


WILD = [
    # ------------------------------------------------------------ prev_token_score
    Variant("loop_divides_by_B_times_n", prev('''    L, B, H, n, _ = attn.shape
    out = torch.zeros(L, H, dtype=attn.dtype)
    for b in range(B):
        for i in range(1, n):
            out += attn[:, b, :, i, i - 1]
    return out / (B * n)
'''), lose=P),
    Variant("diagonal_default_dims", prev('''    return attn.diagonal(-1).mean(dim=(1, 3))
'''), lose=P),
    Variant("keeps_the_batch", prev('''    return attn.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)
'''), lose=P),
    Variant("all_earlier_keys", prev('''    n = attn.shape[-1]
    below = torch.tril(attn, diagonal=-1).sum(dim=(-2, -1))         # (L, B, H)
    return below.mean(dim=1) / (n - 1)
'''), lose=P),
    Variant("einsum_with_identity", prev('''    n = attn.shape[-1]
    eye = torch.eye(n, dtype=attn.dtype)
    return torch.einsum("lbhij,ij->lh", attn, eye) / (attn.shape[1] * (n - 1))
'''), lose=P),
    Variant("numpy_round_trip", prev('''    import numpy as np
    a = attn.detach().numpy()
    n = a.shape[-1]
    vals = np.stack([a[..., i, i - 1] for i in range(1, n)], axis=-1)
    return vals.mean(axis=(1, 3))
'''), lose=P),
    Variant("mean_over_layers_and_positions", prev('''    d = attn.diagonal(-1, -2, -1)
    return d.mean(dim=-1).mean(dim=0)
'''), lose=P),
    Variant("sums_batch_means_positions", prev('''    d = torch.diagonal(attn, offset=-1, dim1=3, dim2=4)
    return d.mean(dim=3).sum(dim=1)
'''), lose=P),
    # ------------------------------------------------------------ induction_score
    Variant("skips_first_repeat_position", ind('''    n = attn.shape[-1]
    if period < 1 or period >= n:
        raise ValueError("period out of range")
    i = torch.arange(period + 1, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''), lose=I),
    Variant("minus_one_instead_of_plus_one", ind('''    n = attn.shape[-1]
    if not 0 < period < n:
        raise ValueError(period)
    rows = torch.arange(period, n)
    cols = rows - period - 1
    return attn[:, :, :, rows, cols].mean(dim=(1, 3))
'''), lose=I),
    Variant("only_rejects_small_period", ind('''    n = attn.shape[-1]
    if period < 1:
        raise ValueError("period must be positive")
    d = attn.diagonal(offset=1 - period, dim1=-2, dim2=-1)[..., 1:]
    return d.mean(dim=(1, 3))
'''), lose=I),
    Variant("assert_instead_of_raise", ind('''    n = attn.shape[-1]
    assert 1 <= period < n, "no repeat"
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''), lose=I),
    Variant("divides_by_positions_only", ind('''    L, B, H, n, _ = attn.shape
    if not 1 <= period < n:
        raise ValueError("bad period")
    total = attn.new_zeros(L, H)
    for i in range(period, n):
        total += attn[:, :, :, i, i - period + 1].sum(dim=1)
    return total / (n - period)
'''), lose=I),
    Variant("range_check_allows_zero", ind('''    n = attn.shape[-1]
    if period < 0 or period >= n:
        raise ValueError("bad period")
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''), lose=I),
    Variant("first_half_positions", ind('''    n = attn.shape[-1]
    if not 1 <= period < n:
        raise ValueError("bad period")
    i = torch.arange(1, period)
    return attn[..., i + period - 1, i].mean(dim=(1, 3))
'''), lose=I),
    Variant("score_for_one_layer_only", ind('''    n = attn.shape[-1]
    if not 1 <= period < n:
        raise ValueError("bad period")
    i = torch.arange(period, n)
    return attn[-1][..., i, i - period + 1].mean(dim=(0, 2))
'''), lose=I),
    # ------------------------------------------------------------ ablate_heads
    Variant("hooks_the_attention_output", abl('''    handles = []
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0
            return out
        handles.append(model.blocks[layer].attn.register_forward_hook(hook))
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        for hd in handles:
            hd.remove()
'''), lose=A),
    Variant("returns_detached_tensor", abl('''    handles = [model.blocks[l].attn.heads.register_forward_hook(
        lambda m, i, o, h=h: o.index_fill(1, torch.tensor([h]), 0.0)) for l, h in heads]
    try:
        with torch.no_grad():
            loss = model(x, y)[1]
    finally:
        for hd in handles:
            hd.remove()
    return loss.detach()
'''), lose=A),
    Variant("handle_overwritten", abl('''    handle = None
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0.0
            return out
        handle = model.blocks[layer].attn.heads.register_forward_hook(hook)
    with torch.no_grad():
        loss = model(x, y)[1].item()
    if handle is not None:
        handle.remove()
    return loss
'''), lose=A),
    Variant("one_pair_unpacked", abl('''    layer, head = heads
    def hook(module, inp, out):
        out = out.clone()
        out[:, head] = 0.0
        return out
    h = model.blocks[layer].attn.heads.register_forward_hook(hook)
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        h.remove()
'''), lose=A),
    Variant("head_width_from_n_layer", abl('''    dh = model.config.d_model // model.config.n_layer
    handles = []
    for layer, head in heads:
        def pre(module, args, head=head):
            z = args[0].clone()
            z[..., head * dh:(head + 1) * dh] = 0
            return (z,)
        handles.append(model.blocks[layer].attn.c_proj.register_forward_pre_hook(pre))
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        for hd in handles:
            hd.remove()
'''), lose=A),
    Variant("loss_before_hooks", abl('''    with torch.no_grad():
        loss = model(x, y)[1].item()
    handles = []
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0.0
            return out
        handles.append(model.blocks[layer].attn.heads.register_forward_hook(hook))
    for hd in handles:
        hd.remove()
    return loss
'''), lose=A),
    Variant("no_finally", abl('''    handles = []
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0.0
            return out
        handles.append(model.blocks[layer].attn.heads.register_forward_hook(hook))
    with torch.no_grad():
        loss = model(x, y)[1].item()
    for hd in handles:
        hd.remove()
    return loss
'''), lose=A),
    Variant("scales_instead_of_zeroing", abl('''    handles = []
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] *= 0.5
            return out
        handles.append(model.blocks[layer].attn.heads.register_forward_hook(hook))
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        for hd in handles:
            hd.remove()
'''), lose=A),
]


# Written after the hidden checks were improved on WILD, and measured without changing them again: how well the
# diagnoses carry over to mistakes they were not tuned on.
HELDOUT = [
    Variant("weight_on_the_first_token", prev('''    return attn[:, :, :, 1:, 0].mean(dim=(1, 3))
'''), lose=P),
    Variant("rolled_identity_mask", prev('''    n = attn.shape[-1]
    shift = torch.eye(n, dtype=attn.dtype).roll(-1, dims=0)
    return (attn * shift).sum(dim=(-2, -1)).mean(dim=1) / (n - 1)
'''), lose=P),
    Variant("divides_twice", prev('''    B, n = attn.shape[1], attn.shape[-1]
    return attn.diagonal(-1, -2, -1).sum(dim=(1, 3)) / B / n
'''), lose=P),
    Variant("slice_of_the_earlier_copy", ind('''    n = attn.shape[-1]
    if not 1 <= period < n:
        raise ValueError("period out of range")
    block = attn[..., period:, 0:n - period]
    return block.diagonal(dim1=-2, dim2=-1).mean(dim=(1, 3))
'''), lose=I),
    Variant("only_checks_too_long", ind('''    n = attn.shape[-1]
    if period > n:
        raise ValueError("period longer than the sequence")
    i = torch.arange(period, n)
    return attn[..., i, i - period + 1].mean(dim=(1, 3))
'''), lose=I),
    Variant("hook_forgets_to_return", abl('''    handles = []
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0.0
        handles.append(model.blocks[layer].attn.heads.register_forward_hook(hook))
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        for hd in handles:
            hd.remove()
'''), lose=A),
    Variant("removes_inside_the_loop", abl('''    loss = None
    for layer, head in heads:
        def hook(module, inp, out, head=head):
            out = out.clone()
            out[:, head] = 0.0
            return out
        h = model.blocks[layer].attn.heads.register_forward_hook(hook)
        h.remove()
    with torch.no_grad():
        loss = model(x, y)[1].item()
    return loss
'''), lose=A),
    Variant("indexes_with_the_pair", abl('''    handles = []
    for pair in heads:
        def hook(module, inp, out, pair=pair):
            out = out.clone()
            out[:, pair[1], pair[0]] = 0.0
            return out
        handles.append(model.blocks[pair[0]].attn.heads.register_forward_hook(hook))
    try:
        with torch.no_grad():
            return model(x, y)[1].item()
    finally:
        for hd in handles:
            hd.remove()
'''), lose=A),
]
