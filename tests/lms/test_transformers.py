"""LMS on transformers (issue 48): an ``nn.TransformerEncoder`` and a GPT-style decoder whose
attention is ``scaled_dot_product_attention``, AdamW, on CPU with host copies standing in for
the device.  Their attention saves transposed and sliced views (not contiguous); the plan counted
them as swapped while the hooks kept them, so the peak ran 12-43 % past the budget."""
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import ddl_runtime.lms as lms
from ddl_runtime.lms.transfer import HostStandIn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from lms_models import gpt  # noqa: E402

MB = 1 << 20


def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.1, batch_first=True)
    return nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)


def decoder():
    torch.manual_seed(0)
    return gpt(layers=6, d_model=64, heads=4, seq=32, vocab=128, dropout=0.1)


def train(model, kind, steps=3, **lms_kwargs):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    session = lms.enable(model, optimizer=opt, **lms_kwargs) if lms_kwargs else None
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(2)                                     # dropout masks: the same draws with and without LMS
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        if kind == "encoder":
            loss = model(torch.randn(32, 32, 64, generator=g)).pow(2).mean()
        else:
            tokens = torch.randint(0, 128, (16, 33), generator=g)
            loss = nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    stats = session.stats() if session is not None else None
    if session is not None:
        lms.disable(model)
    return losses, state, session, stats


@pytest.mark.parametrize("kind,budgets", [("encoder", (10, 14, 20)), ("decoder", (8, 12))])
def test_transformers_train_the_same_within_the_budget(kind, budgets):
    make = encoder if kind == "encoder" else decoder
    ref_losses, ref_state, _, _ = train(make(), kind)
    for mb in budgets:
        transfer = HostStandIn(capacity=64 * MB, bandwidth_Bps=1e10)
        losses, state, _, st = train(make(), kind, budget=mb * MB, size=1024, transfer=transfer, prefetch_bytes=MB)
        assert st.swapped_bytes + st.recomputed_bytes > 0, st           # the budget made LMS move tensors
        assert st.peak_bytes <= mb * MB, f"{kind} at {mb} MB: {st}"
        assert losses == ref_losses and all(torch.equal(state[k], ref_state[k]) for k in ref_state), kind


def test_the_default_prefetch_window_scales_with_a_small_budget():
    """A fixed 64 MB window left any budget under about 70 MB no room: the plan said "over
    budget" and swapped everything."""
    transfer = HostStandIn(capacity=64 * MB, bandwidth_Bps=1e10)
    _, _, s, st = train(encoder(), "encoder", budget=20 * MB, size=1024, transfer=transfer)
    assert s._plan.fits and st.kept_bytes > 0, st
    assert st.peak_bytes <= 20 * MB, st
