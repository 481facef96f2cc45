"""Compile a tracr program and read everything the conversion needs into plain numpy records.

tracr is imported only inside :func:`compile_program`.  The compile runs tracr's own passes (graph,
basis inference, craft blocks, layer allocation, assembly) so that the craft model -- which residual
directions each head and MLP reads and writes -- is kept beside the assembled weights.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from headlens.analyses.tracr.programs import ProgramSpec, all_inputs, rasp_outputs

__all__ = ["BlockInfo", "Compiled", "compile_program"]

#: Weight entries smaller than this count as zero when reading which directions a block reads or writes.
SUPPORT_TOL = 1e-9


@dataclass(frozen=True, kw_only=True)
class BlockInfo:
    """One head or one layer's MLP of the compiled model, with the residual directions it touches."""

    kind: str  # "head" | "mlp"
    layer: int
    head: int | None
    #: RASP expressions this block computes (an MLP layer may hold several in parallel).
    labels: tuple[str, ...]
    job: str
    reads: dict[str, tuple[str, ...]]  # input ("q"|"k"|"v"|"mlp") -> residual direction labels read
    writes: tuple[str, ...]
    #: Inputs whose values the block's RASP expression does not use, with the reason: a head whose selector's
    #: predicate is constant (``Comparison.TRUE``/``FALSE``) selects the same keys whatever its queries and keys
    #: hold, so its ``q`` and ``k`` inputs carry nothing (tracr still wires them: nonzero weights).
    ignores: dict[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class Compiled:
    """A compiled program: tracr's weights (residual-major numpy arrays), labels and blocks."""

    spec: ProgramSpec
    residual: list[str]  # residual direction labels, in tracr's order
    token_values: list[Any]  # tracr's input vocabulary in encoder order (bos, pad included)
    bos: str
    pad: str
    n_layers: int
    n_heads: int
    key_size: int
    mlp_hidden: int
    params: dict[str, np.ndarray]  # tracr's haiku parameters, flattened to "module/param"
    token_embed: np.ndarray  # [n_tokens, D]
    pos_embed: np.ndarray  # [max_seq_len + 1, D]
    categorical: bool
    output_values: list[Any]  # output basis values (categorical) or the value set (numerical)
    output_dims: list[int]  # residual index of each output direction
    blocks: list[BlockInfo] = field(default_factory=list)
    assembled: Any = None  # tracr's AssembledTransformerModel (to run tracr's own forward)
    program: Any = None  # the RASP SOp


def _label(direction: Any) -> str:
    return str(direction.name) if direction.value is None else f"{direction.name}:{direction.value}"


def _support(labels: list[str], matrix: np.ndarray, axis: int) -> tuple[str, ...]:
    """Labels whose row (axis=1: nonzero over columns) or column carries a nonzero weight."""
    mask = np.abs(matrix).max(axis=axis) > SUPPORT_TOL if matrix.size else np.zeros(len(labels), dtype=bool)
    return tuple(lab for lab, m in zip(labels, mask, strict=True) if m)


def _op(selector: Any) -> str:
    return str(getattr(selector.predicate, "value", "custom predicate"))


def _ignored_inputs(expr: Any) -> dict[str, str]:
    """The head inputs ``expr``'s selector does not depend on (see :attr:`BlockInfo.ignores`)."""
    from tracr.rasp import rasp

    sel = getattr(expr, "selector", None)
    if isinstance(expr, (rasp.Aggregate, rasp.SelectorWidth)) and isinstance(sel, rasp.Select):
        if sel.predicate in (rasp.Comparison.TRUE, rasp.Comparison.FALSE):
            why = f"selector predicate {sel.predicate.name} ignores its query and key values"
            return {"q": why, "k": why}
    return {}


def _describe(expr: Any) -> str:
    from tracr.rasp import rasp

    kind = type(expr).__name__
    if isinstance(expr, rasp.Aggregate):
        sel = expr.selector
        if isinstance(sel, rasp.Select):
            where = f"key {sel.keys.label} {_op(sel)} query {sel.queries.label}"
            return f"{kind} {expr.label}: attend to keys where {where}, average {expr.sop.label}"
        return f"{kind} {expr.label} of {expr.sop.label}"
    if isinstance(expr, rasp.SelectorWidth):
        sel = expr.selector
        inner = f"key {sel.keys.label} {_op(sel)} query {sel.queries.label}" if isinstance(sel, rasp.Select) else sel.label
        return f"{kind} {expr.label}: count of keys where {inner}"
    children = ", ".join(c.label for c in expr.children)
    return f"{kind} {expr.label}({children})"


def _assemble(spec: ProgramSpec, program: Any, mlp_exactness: int) -> tuple[Any, Any, Any, Any]:
    """tracr's passes on ``program``, causally: its graph, sink node, craft model and assembled model."""
    from tracr.compiler import (
        basis_inference,
        craft_graph_to_model,
        craft_model_to_transformer,
        expr_to_craft_graph,
        rasp_to_graph,
    )
    from tracr.compiler.compiling import COMPILER_BOS, COMPILER_PAD
    from tracr.craft import bases
    from tracr.rasp import rasp

    extracted = rasp_to_graph.extract_rasp_graph(program)
    graph, sources, sink = extracted.graph, extracted.sources, extracted.sink
    basis_inference.infer_bases(graph, sink, set(spec.vocab), spec.max_seq_len)
    expr_to_craft_graph.add_craft_components_to_rasp_graph(
        graph, bos_dir=bases.BasisDirection(rasp.tokens.label, COMPILER_BOS), mlp_exactness=mlp_exactness
    )
    craft_model = craft_graph_to_model.craft_graph_to_model(graph, sources)
    assembled = craft_model_to_transformer.craft_model_to_transformer(
        craft_model=craft_model, graph=graph, sink=sink, max_seq_len=spec.max_seq_len,
        compiler_bos=COMPILER_BOS, compiler_pad=COMPILER_PAD, causal=True,
    )  # fmt: skip
    return graph, sink, craft_model, assembled


@dataclass(kw_only=True)
class _Owners:
    """Which RASP expression each craft block computes, keyed by the identity of the block objects."""

    jobs: dict[int, str] = field(default_factory=dict)
    ignores: dict[int, dict[str, str]] = field(default_factory=dict)
    mlp_parts: list[tuple[str, frozenset[str]]] = field(default_factory=list)  # (job, output directions) of each RASP MLP


def _owners(graph: Any) -> _Owners:
    from tracr.compiler import nodes
    from tracr.craft import transformers

    owners = _Owners()
    for _, node in graph.nodes.items():
        block = node.get(nodes.MODEL_BLOCK)
        if block is None:
            continue
        expr = node[nodes.EXPR]
        parts = block.blocks if isinstance(block, transformers.SeriesWithResiduals) else [block]
        for part in parts:
            owners.jobs[id(part)] = _describe(expr)
            owners.ignores[id(part)] = _ignored_inputs(expr)
            for sub in getattr(part, "sub_blocks", []):
                owners.jobs[id(sub)] = _describe(expr)
                owners.ignores[id(sub)] = _ignored_inputs(expr)
            if isinstance(part, transformers.MLP):
                owners.mlp_parts.append((_describe(expr), frozenset(_label(d) for d in part.snd.output_space.basis)))
    return owners


def _mlp_block(module: Any, layer: int, owners: _Owners) -> BlockInfo:
    """One layer's MLP: the RASP MLPs whose outputs it writes, and the directions it reads and writes."""
    fst_in = [_label(d) for d in module.fst.input_space.basis]
    snd_out = [_label(d) for d in module.snd.output_space.basis]
    labels = tuple(sorted({job for job, out in owners.mlp_parts if out <= set(snd_out)})) or ("MLP",)
    return BlockInfo(kind="mlp", layer=layer, head=None, labels=labels, job="; ".join(labels),
                     reads={"mlp": _support(fst_in, module.fst.matrix, axis=1)},
                     writes=_support(snd_out, module.snd.matrix, axis=0))  # fmt: skip


def _head_blocks(module: Any, layer: int, owners: _Owners) -> list[BlockInfo]:
    """One layer's heads: each head's job and the directions its q, k, v read and its output writes."""
    out = []
    for h, head in enumerate(module.as_multi().heads()):
        left = [_label(d) for d in head.w_qk.left_space.basis]
        right = [_label(d) for d in head.w_qk.right_space.basis]
        ov_in = [_label(d) for d in head.w_ov.input_space.basis]
        ov_out = [_label(d) for d in head.w_ov.output_space.basis]
        job = owners.jobs.get(id(head), "attention head")
        out.append(BlockInfo(
            kind="head", layer=layer, head=h, labels=(job,), job=job,
            reads={"q": _support(left, head.w_qk.matrix, axis=1), "k": _support(right, head.w_qk.matrix, axis=0),
                   "v": _support(ov_in, head.w_ov.matrix, axis=1)},
            writes=_support(ov_out, head.w_ov.matrix, axis=0), ignores=owners.ignores.get(id(head), {}),
        ))  # fmt: skip
    return out


def _blocks(graph: Any, craft_model: Any, residual: list[str]) -> list[BlockInfo]:
    """Every head and MLP of the craft model in layer order; each direction they touch is in ``residual``."""
    from tracr.compiler import assemble
    from tracr.craft import transformers

    owners = _owners(graph)
    _, module_names = assemble._get_model_config_and_module_names(craft_model)
    blocks: list[BlockInfo] = []
    for module_name, module in zip(module_names, craft_model.blocks, strict=True):
        layer = int(module_name.split("/")[1].split("_")[1])
        if isinstance(module, transformers.MLP):
            blocks.append(_mlp_block(module, layer, owners))
        else:
            blocks.extend(_head_blocks(module, layer, owners))
    known = set(residual)
    for b in blocks:
        unknown = [lab for lab in (*b.writes, *sum(b.reads.values(), ())) if lab not in known]
        assert not unknown, f"block directions outside the residual: {unknown}"
    return blocks


def _outputs(spec: ProgramSpec, program: Any, graph: Any, sink: Any, residual: list[str]) -> tuple[bool, list[Any], list[int]]:
    """Whether the output is categorical, its values, and the residual index of each output direction."""
    from tracr.compiler import nodes
    from tracr.rasp import rasp

    index = {lab: i for i, lab in enumerate(residual)}
    categorical = bool(rasp.is_categorical(sink[nodes.EXPR]))
    out_basis = list(sink[nodes.OUTPUT_BASIS])
    output_dims = [index[_label(d)] for d in out_basis]
    if categorical:
        return categorical, [d.value for d in out_basis], output_dims
    # tracr's inferred value set of a numerical mean misses values (frac_prevs: 2/3, 3/4, ...): add every
    # output the RASP program gives on the stated input set, so the nearest-value unembedding can name it.
    seen = {v for x in all_inputs(spec) for v in rasp_outputs(program, spec, x) if v is not None}
    return categorical, sorted(set(graph.nodes[sink[nodes.ID]][nodes.VALUE_SET]) | seen), output_dims


def compile_program(spec: ProgramSpec, *, mlp_exactness: int = 100) -> Compiled:
    """Compile ``spec`` causally with tracr; the weights, residual labels and per-block reads/writes."""
    from tracr.compiler.compiling import COMPILER_BOS, COMPILER_PAD

    program = spec.build()
    graph, sink, craft_model, assembled = _assemble(spec, program, mlp_exactness)
    cfg = assembled.model_config
    residual = list(assembled.residual_labels)
    params = {f"{mod}/{name}": np.asarray(val, dtype=np.float64) for mod, d in assembled.params.items() for name, val in d.items()}
    blocks = _blocks(graph, craft_model, residual)
    categorical, output_values, output_dims = _outputs(spec, program, graph, sink, residual)
    encoder: Any = assembled.input_encoder  # a CategoricalEncoder (tracr types it as the base class)
    token_values = sorted(encoder.encoding_map, key=lambda v: encoder.encoding_map[v])
    return Compiled(
        spec=spec, residual=residual, token_values=token_values, bos=COMPILER_BOS, pad=COMPILER_PAD,
        n_layers=cfg.num_layers, n_heads=cfg.num_heads, key_size=cfg.key_size, mlp_hidden=cfg.mlp_hidden_size,
        params=params, token_embed=params["token_embed/embeddings"], pos_embed=params["pos_embed/embeddings"],
        categorical=categorical, output_values=output_values, output_dims=output_dims, blocks=blocks,
        assembled=assembled, program=program,
    )  # fmt: skip
