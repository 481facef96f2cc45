"""The fast path of :mod:`~headlens.probes.reader_rows`: GPT-2's blocks run from their weights, outside the bridge's hooks.

Through the bridge a patched forward runs every block with split inputs (one residual copy per head
for each of q, k and v) and through every hook point, though a patch changes one reader's input at
one block.  :class:`FastBlocks` runs the same forward the short way:

* the start block computes the plain block on the rows already running; a row joining there with an
  attention patch takes its reader's input (``x + delta``) through the same norm and fused q/k/v
  product, keeps the patched head's slot, computes that one head's attention with it (the head's other
  two inputs its control's), and leaves its control's stream after the attention moved by what that head
  writes differently, ``(z' - z) @ W_O[head]`` (no other head's output changes there); an MLP patch: the
  MLP of ``mid + delta``, the stream keeping ``mid``;
* every later block is the plain block;
* the last block computes its queries, attention output and MLP at each row's last position only
  (what the logit-diff readout reads), and the final norm runs at those positions;
* logits edges add their difference to the last block's stored output: no block runs.

The projections and the MLP are GPT-2's own Hugging Face modules (its ``Conv1D`` layers and activation under
the bridge's ``attn``/``mlp``); the norms repeat the bridge's own LayerNorm arithmetic (:class:`_Norm`, bit for
bit: Hugging Face's fused kernel rounds tracr's ``eps = 2**48`` norms differently); the attention pattern and
its weighted sum are computed here.

Which models (:func:`fast_blocks` returns the reason when not): GPT-2's blocks (``model_type ==
"gpt2"``: absolute positions, one causal pattern per head, scale ``1/sqrt(d_head)`` and optionally
``1/(layer+1)``, scores in float32 under ``reorder_and_upcast_attn``) read at each row's last position only
(the caller's logit-diff readout), on one device, with no head-sum norm and no hook on the model's hook points.
Other families run through the bridge.

In bfloat16 a joining row's stream (its control's plus the head's change) rounds differently from the bridge's
(a sum of its own): the values differ from the bridge path's by about as much as either differs from float32's
(tests/probes/test_fast_blocks.py).

:mod:`~headlens.probes.reader_rows` checks every pass: each base row of a pass has its unpatched row (a control)
computed in the same calls as its patched rows, whose value must equal the full forward's; the patched values are
measured from those controls, so a patch whose difference dies out changes exactly nothing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, cast

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn

from headlens.probes.loading import LoadedModel

log = logging.getLogger(__name__)

__all__ = ["Rows", "Join", "FastBlocks", "fast_blocks", "QKV"]

#: The reader inputs of a block's attention, in the fused projection's order.
QKV = ("q", "k", "v")


@dataclass(frozen=True)
class Rows:
    """Rows that start at a block as copies of controls ``control[i]``, with ``delta[i]`` added to one reader's input:
    (attention) head ``slot[i]``'s ``QKV[which[i]]`` input; else the MLP's, or after the last block the logits'."""

    control: Int[Tensor, " n"]
    delta: Float[Tensor, "n pos d_model"]
    which: Int[Tensor, " n"] | None = None
    slot: Int[Tensor, " n"] | None = None


@dataclass(frozen=True)
class Join:
    """The rows joining at block ``layer`` (``n_layers``: after the last block, ``logits`` only), in the order ``attn``,
    ``mlp``, ``logits``."""

    layer: int
    attn: Rows | None = None
    mlp: Rows | None = None
    logits: Rows | None = None

    def rows(self) -> list[Rows]:
        return [r for r in (self.attn, self.mlp, self.logits) if r is not None]


def _hooked(model: LoadedModel) -> bool:
    """Whether a hook point of the bridge has a hook attached (a user's patch that blocks computed here would not see;
    the bridge's and Hugging Face's own capture hooks on other modules change nothing)."""
    return any(bool(m._forward_hooks or m._forward_pre_hooks) for m in model.bridge.hook_dict.values())


def fast_blocks(model: LoadedModel, *, last_only: bool, head_sum_norm: bool) -> tuple[FastBlocks | None, str]:
    """:class:`FastBlocks` for ``model``, or None and the reason its patched forwards run through the bridge
    (``last_only``: the caller reads only the output head's input at each row's last position; ``head_sum_norm``: a
    norm after the heads' sum, which a head's change of output ``(z' - z) @ W_O`` would skip)."""
    hf_config = getattr(getattr(model.bridge, "original_model", None), "config", None)
    kind = getattr(hf_config, "model_type", None)
    if model.is_encoder:
        return None, "an encoder"
    if kind != "gpt2":
        return None, f"blocks of model type {kind!r} (only GPT-2's are computed outside the bridge)"
    if not last_only:
        return None, "a metric other than the logit-diff readout"
    if head_sum_norm:
        return None, "a norm after the head sum"
    if getattr(hf_config, "add_cross_attention", False):
        return None, "cross-attention"
    if not getattr(hf_config, "scale_attn_weights", True):
        # TransformerLens 4.x's GPT-2 attention scales by 1/sqrt(d_head) regardless: the base run would reject unscaled blocks
        return None, "scale_attn_weights=False (the bridge scales the scores anyway)"
    if model.placement is not None:
        return None, "a model placed over several devices or offloaded"
    if _hooked(model):
        return None, "hooks attached to the model"
    try:
        return FastBlocks(model), ""
    except (AttributeError, TypeError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


class _Norm:
    """A bridge LayerNorm's arithmetic without its hook points, as ``NormalizationBridge._python_norm_forward`` (TL 4.x)
    computes it: ``(x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b`` in float32 (checked bit for bit in the tests)."""

    def __init__(self, bridge_norm: Any, what: str) -> None:
        hf = _module(bridge_norm, what)
        offset = getattr(bridge_norm, "uses_rms_norm", False) or getattr(bridge_norm, "uses_weight_offset", False)
        if not isinstance(hf, nn.LayerNorm) or offset:
            raise TypeError(f"{what} is not a plain LayerNorm")
        if getattr(bridge_norm, "use_native_layernorm_autograd", False) or getattr(bridge_norm.config, "layer_norm_folding", False):
            raise TypeError(f"{what} runs Hugging Face's own LayerNorm in the bridge")
        self.weight, self.bias = hf.weight.detach(), None if hf.bias is None else hf.bias.detach()
        self.eps = float(getattr(bridge_norm.config, "eps", 1e-05))

    def __call__(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        h = x if dtype in (torch.float32, torch.float64) else x.float()
        h = h - h.mean(-1, keepdim=True)
        h = h / (h.pow(2).mean(-1, keepdim=True) + self.eps).sqrt() * self.weight
        if self.bias is not None:
            h = h + self.bias
        return h.to(dtype)


def _conv(layer: Any, what: str) -> nn.Module:
    """The Hugging Face ``Conv1D`` under a bridge ``LinearBridge`` (or the module itself)."""
    from transformers.pytorch_utils import Conv1D

    mod = getattr(layer, "original_component", layer)
    if not isinstance(mod, Conv1D):
        raise TypeError(f"{what} is not GPT-2's Conv1D (found {type(mod).__name__})")
    return mod


def _module(component: object, what: str) -> nn.Module:
    mod = getattr(component, "original_component", None)
    if not isinstance(mod, nn.Module):
        raise TypeError(f"no Hugging Face module under the bridge's {what}")
    return mod


class FastBlocks:
    """GPT-2's blocks computed from the bridge's weights and the model's norm and MLP modules (module doc)."""

    def __init__(self, model: LoadedModel) -> None:
        bridge = model.bridge
        cfg = bridge.cfg
        hf_config = bridge.original_model.config
        self.n_layers, self.n_heads, self.d_head = model.n_layers, model.n_heads, int(cfg.d_head)
        attn = [_module(blk.attn, f"blocks.{i}.attn") for i, blk in enumerate(bridge.blocks)]
        mlp = [_module(blk.mlp, f"blocks.{i}.mlp") for i, blk in enumerate(bridge.blocks)]
        # GPT-2's Conv1D projections, called as its attention and MLP call them: the fused q/k/v (columns: which, head,
        # d_head), the heads' output, and the MLP's two with its activation between
        self.c_attn: list[nn.Module] = [_conv(a.c_attn, f"blocks.{i}.attn.c_attn") for i, a in enumerate(attn)]
        self.c_proj: list[nn.Module] = [_conv(a.c_proj, f"blocks.{i}.attn.c_proj") for i, a in enumerate(attn)]
        # the output projection's weight, [head * d_head, d_model] (a patched head's change of output, no bias)
        self.w_o = [cast(Tensor, c.weight).detach() for c in self.c_proj]
        self.c_fc: list[nn.Module] = [_conv(m.c_fc, f"blocks.{i}.mlp.c_fc") for i, m in enumerate(mlp)]
        self.mlp_proj: list[nn.Module] = [_conv(m.c_proj, f"blocks.{i}.mlp.c_proj") for i, m in enumerate(mlp)]
        self.act: list[nn.Module] = [cast(nn.Module, m.act) for m in mlp]
        width = 3 * self.n_heads * self.d_head
        if any(int(getattr(c, "nf", -1)) != width for c in self.c_attn):
            raise ValueError(f"a fused q/k/v projection that is not {width} wide")
        self.dtype: torch.dtype = next(self.c_attn[0].parameters()).dtype
        # the norms with the bridge's own arithmetic (its python LayerNorm: the base run's, to the last bit)
        self.ln1 = [_Norm(blk.ln1, f"blocks.{i}.ln1") for i, blk in enumerate(bridge.blocks)]
        self.ln2 = [_Norm(blk.ln2, f"blocks.{i}.ln2") for i, blk in enumerate(bridge.blocks)]
        self.ln_final = _Norm(bridge.ln_final, "ln_final")
        scale = 1.0 / math.sqrt(self.d_head)
        inverse = bool(getattr(hf_config, "scale_attn_by_inverse_layer_idx", False))
        self.scale = [scale / (layer + 1) if inverse else scale for layer in range(self.n_layers)]
        self.upcast = bool(getattr(hf_config, "reorder_and_upcast_attn", False))  # scores and softmax in float32

    def run(
        self, x0: Float[Tensor, "control pos d_model"], last: Int[Tensor, " control"], joins: list[Join]
    ) -> Float[Tensor, "row d_model"]:
        """The output head's input at each row's last position: the controls' (``x0``: their stream entering block 0, ``last``:
        their last positions) first, then each :class:`Join`'s rows in the order of ``joins`` (sorted by layer).

        A row whose stream after a block equals its control's to the bit (its patch changed nothing there: the patched head's
        output, or the MLP's, is the control's) stops running and gets its control's output: what it would compute from
        there on is its control's, but for the rounding of its place in a batch."""
        n_c, dev = x0.shape[0], x0.device
        at_layer = {j.layer: j for j in joins}
        if len(at_layer) != len(joins) or [j.layer for j in joins] != sorted(at_layer):
            raise ValueError("joins must be sorted by layer, one per layer")
        last = last.to(dev)
        x = x0
        ctrl = torch.arange(n_c, device=dev)  # each running row's control, and its place in the output
        place = torch.arange(n_c, device=dev)
        n_rows = n_c
        stopped: list[tuple[Tensor, Tensor]] = []  # (place, control) of the rows that stopped

        def join(rows: Rows) -> None:
            nonlocal ctrl, place, n_rows
            ctrl = torch.cat([ctrl, rows.control])
            place = torch.cat([place, torch.arange(n_rows, n_rows + len(rows.control), device=dev)])
            n_rows += len(rows.control)

        for layer in range(self.n_layers):
            j = at_layer.get(layer, Join(layer))
            if j.logits is not None:
                raise ValueError(f"logits rows joining at block {layer}, before the end")
            for rows in j.rows():
                join(rows)
            x, keep = self._block(layer, x, n_c, j, last[ctrl] if layer == self.n_layers - 1 else None)
            if keep is not None:
                stopped.append((place[~keep], ctrl[~keep]))
                ctrl, place = ctrl[keep], place[keep]
        j = at_layer.get(self.n_layers, Join(self.n_layers))
        if j.attn is not None or j.mlp is not None:
            raise ValueError("attention or MLP rows joining after the last block")
        if j.logits is not None:  # logits edges: the last block's output at each row's last position, moved
            r = j.logits
            join(r)
            x = torch.cat([x, x[:n_c][r.control] + _at(r.delta, last[r.control]).to(device=dev, dtype=x.dtype)])
        h = self.ln_final(x)
        out = h.new_empty(n_rows, h.shape[-1])
        out[place] = h
        for at, c in stopped:
            out[at] = h[c]
        return out

    def _block(self, layer: int, x: Tensor, n_c: int, j: Join, last: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """Block ``layer`` on the rows ``x`` (the first ``n_c`` the controls) and the rows joining here: ``[row, pos, d_model]``
        out, or ``[row, d_model]`` at each row's position ``last`` (the last block), of the rows that go on; and which of the
        running and joining rows (None: all) go on (the others' stream is their control's, :meth:`run`)."""
        n_old, n_pos, _ = x.shape
        n_h, d_h = self.n_heads, self.d_head
        dev = x.device
        qkv = self.c_attn[layer](self.ln1[layer](x)).view(n_old, n_pos, 3, n_h, d_h)
        q, k, v = qkv.unbind(2)  # [row, pos, head, d_head]
        if last is None:
            x_at, q_at, blocked = x, q, _causal(n_pos, dev)
        else:
            rows = torch.arange(n_old, device=dev)
            x_at, q_at = x[rows, last[:n_old]][:, None], q[rows, last[:n_old]][:, None]
            blocked = _after(last[:n_old], n_pos)
        z = self._attend(layer, q_at, k, v, blocked)
        mid = x_at + self.c_proj[layer](z.reshape(n_old, z.shape[1], n_h * d_h))
        keeps = []
        if j.attn is not None:
            moved, keep_a = self._joined(layer, x[:n_c], qkv[:n_c], z[:n_c], mid[:n_c], j.attn, last)
            mid = torch.cat([mid, moved])
            keeps.append(keep_a)
        m_rows = j.mlp
        if m_rows is None:
            post = mid + self._mlp(layer, mid)
        else:  # an MLP row: its control's stream after the attention; only its MLP reads mid + delta
            kept = mid[:n_c][m_rows.control]
            d = m_rows.delta[:, :n_pos] if last is None else _at(m_rows.delta, last[m_rows.control])[:, None]
            out = self._mlp(layer, torch.cat([mid, kept + d.to(device=dev, dtype=mid.dtype)]))
            n_mid = mid.shape[0]
            keeps.append((out[n_mid:] != out[:n_c][m_rows.control]).flatten(1).any(1))
            post = torch.cat([mid, kept]) + out
        keep = None
        if keeps:
            keep = torch.cat([torch.ones(n_old, dtype=torch.bool, device=dev), *keeps])
            post = post[keep]
        return (post if last is None else post[:, 0]), keep

    def _joined(
        self, layer: int, xc: Tensor, qkv_c: Tensor, z_c: Tensor, mid_c: Tensor, a: Rows, last: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """The stream after the attention of block ``layer`` of the attention rows ``a`` joining there: their control's
        (``xc``, ``qkv_c``, ``z_c``, ``mid_c``: the controls' stream, q/k/v, heads' outputs and stream after the attention),
        moved by what the patched head writes differently (``(z' - z) @ W_O[head]``), ``z'`` the head's output with one of its
        q/k/v inputs the row's own (its reader's input ``x + delta``, normed and projected); and which rows' head output changed."""
        assert a.which is not None and a.slot is not None
        n_a, n_pos = len(a.control), xc.shape[1]
        n_h, d_h = self.n_heads, self.d_head
        c, w, s, dev = a.control, a.which, a.slot, xc.device
        moved = xc[c] + a.delta[:, :n_pos].to(device=dev, dtype=xc.dtype)
        r = torch.arange(n_a, device=dev)
        mine = self.c_attn[layer](self.ln1[layer](moved)).view(n_a, n_pos, 3, n_h, d_h)[r, :, w, s]  # [row, pos, d_head]
        per_head = qkv_c.permute(0, 3, 2, 1, 4).contiguous()  # [control, head, q/k/v, pos, d_head]
        hq, hk, hv = per_head[c, s].unbind(1)  # the control's q/k/v of the patched head: [row, pos, d_head]
        kind = w[:, None, None]
        hq, hk, hv = (torch.where(kind == i, mine, t) for i, t in enumerate((hq, hk, hv)))
        if last is None:
            blocked = _causal(n_pos, dev)
        else:
            hq = hq[r, last[c]][:, None]
            blocked = _after(last[c], n_pos)
        z_new = self._attend(layer, hq[:, :, None], hk[:, :, None], hv[:, :, None], blocked)[:, :, 0]
        z_old = z_c.permute(0, 2, 1, 3).contiguous()[c, s]  # [row, q_pos, d_head]
        change = z_new - z_old
        keep = (change != 0).flatten(1).any(1)
        moved_z = torch.zeros(n_a, z_new.shape[1], n_h, d_h, device=dev, dtype=z_new.dtype)  # zero but the patched head's
        moved_z[r, :, s] = change
        return mid_c[c] + moved_z.view(n_a, -1, n_h * d_h) @ self.w_o[layer], keep

    def _attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor, blocked: Tensor) -> Tensor:
        """Causal attention ``[row, q_pos, head, d_head]`` of block ``layer`` (``blocked``: the masked query-key pairs)."""
        if self.upcast:
            q, k = q.float(), k.float()
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) * self.scale[layer]
        return torch.einsum("bhqk,bkhe->bqhe", scores.masked_fill(blocked, float("-inf")).softmax(-1).to(v.dtype), v)

    def _mlp(self, layer: int, x: Tensor) -> Tensor:
        """The MLP of block ``layer`` on the stream ``x`` (its norm included), as GPT-2's MLP computes it."""
        return self.mlp_proj[layer](self.act[layer](self.c_fc[layer](self.ln2[layer](x))))


def _causal(n_pos: int, device: torch.device) -> Tensor:
    """The query-key pairs causal attention masks, ``[1, 1, query, key]``."""
    keys = torch.arange(n_pos, device=device)
    return (keys[None, :] > keys[:, None])[None, None]


def _after(last: Int[Tensor, " row"], n_pos: int) -> Tensor:
    """The keys after each row's one query at ``last[row]``, ``[row, 1, 1, key]``."""
    return (torch.arange(n_pos, device=last.device)[None, :] > last[:, None])[:, None, None, :]


def _at(delta: Float[Tensor, "n pos d_model"], last: Int[Tensor, " n"]) -> Float[Tensor, "n d_model"]:
    """Each row's difference at its position ``last[i]``."""
    return delta[torch.arange(delta.shape[0], device=delta.device), last.to(delta.device)]
