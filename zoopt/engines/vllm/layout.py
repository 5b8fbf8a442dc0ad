"""Where each Hugging Face tensor's elements live in a vLLM model's parameters (on one rank).

The noise of a tensor is defined for its Hugging Face parameter name
and full HF shape (the same stream as ``HFEngine``), but vLLM fuses q/k/v into ``qkv_proj`` and
gate/up into ``gate_up_proj``, pads vocabularies, and shards tensors across tensor-parallel
ranks.  :func:`probe_layout` learns, once, where every HF element lives in this rank's vLLM
parameters by running the model's own ``load_weights`` with each HF tensor's flat element
indices (float64, exact to 2⁵³) and intercepting the parameters' ``weight_loader`` calls into
float64 scratch copies.  The result is a list of :class:`Piece` per HF name: a box of a vLLM
parameter equal, element for element, to a box of the HF tensor.  The noise of HF tensor ``h``
is generated whole, ``ε = noise.sample(seed, h, hf_shape)``, and each piece takes its box of it
(``ε[hf_box]``): fused tensors get their parts concatenated in vLLM's order, and a TP rank gets
exactly the slice it owns, because the very loader that sharded the checkpoint drew the boxes.
"""

from __future__ import annotations

import torch

from ..weights import Piece, shape_numel


def hf_parameter_shapes(model_dir: str, trust_remote_code: bool = False) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the HF model's parameters, in ``named_parameters()`` order.

    Built on the meta device (no memory, no weights read); tied parameters appear once, under
    the name ``HFEngine`` sees.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    return {n: tuple(p.shape) for n, p in model.named_parameters()}


def probe_layout(model: torch.nn.Module, hf_shapes: dict[str, tuple[int, ...]]) -> dict[str, list[Piece]]:
    """Where each HF tensor's elements live in ``model``'s parameters (on this rank).

    For each HF name, ``model.load_weights`` is called with the tensor of its flat element
    indices plus one; every ``weight_loader`` call is diverted to a float64 scratch copy of the
    target parameter (filled with −1), and the box where values ≥ 1 landed becomes a
    :class:`Piece` (constants a loader writes itself, like the zeros of vocabulary padding,
    are not HF elements and stay out).  The real weights are never touched.  Raises when a written region is not a box that equals a box of the HF
    tensor (a loader that permutes, e.g.), since perturbing it through boxes would be wrong.
    """
    import logging

    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    params = dict(model.named_parameters())
    saved = {n: _get_loader(p) for n, p in params.items()}
    layout: dict[str, list[Piece]] = {}
    current: dict = {}

    def recorder(pname: str, real: torch.nn.Parameter, loader):
        def record(_param, loaded, *args, **kwargs):
            # same class and attributes as the real parameter (vLLM's v2 parameters load
            # through their own methods), float64 data filled with -1
            scratch = torch.Tensor._make_subclass(
                type(real), torch.full(real.shape, -1.0, dtype=torch.float64), False)
            scratch.__dict__.update(real.__dict__)
            loader(scratch, loaded, *args, **kwargs)
            piece = _piece(pname, scratch.data, current["index"])
            if piece is not None:
                layout.setdefault(current["name"], []).append(piece)
        return record

    quiet = logging.getLogger("vllm.model_executor.models.utils")  # "loading float64 into float32"
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for pname, p in params.items():
            p.weight_loader = recorder(pname, p, saved[pname][1] or default_weight_loader)
        for name, shape in hf_shapes.items():
            numel = shape_numel(shape)
            current["name"] = name
            current["index"] = torch.arange(1, numel + 1, dtype=torch.float64).view(shape)
            model.load_weights([(name, current["index"])])
    finally:
        quiet.setLevel(level)
        for pname, p in params.items():
            had, loader = saved[pname]
            if had:
                p.weight_loader = loader
            else:
                p.__dict__.pop("weight_loader", None)
    return layout


def _get_loader(p: torch.nn.Parameter):
    """``(has an own weight_loader, that loader or None)`` — a plain attribute on ordinary
    parameters, a property on vLLM's v2 parameters (``BasevLLMParameter``)."""
    if isinstance(getattr(type(p), "weight_loader", None), property):
        return True, getattr(p, "_weight_loader", None)
    if "weight_loader" in p.__dict__:
        return True, p.__dict__["weight_loader"]
    return False, None


def _piece(pname: str, scratch: torch.Tensor, index: torch.Tensor) -> Piece | None:
    """The box of ``scratch`` written by a loader, as a :class:`Piece` (None when nothing was)."""
    mask = scratch >= 1
    if not bool(mask.any()):
        return None
    if scratch.ndim != index.ndim:
        raise NotImplementedError(f"{pname}: vLLM parameter is {scratch.ndim}-D but the HF tensor is {index.ndim}-D")
    box = []
    for d in range(scratch.ndim):
        hit = mask.any(dim=[e for e in range(scratch.ndim) if e != d]) if scratch.ndim > 1 else mask
        where = hit.nonzero().flatten()
        box.append((int(where[0]), int(where[-1]) + 1))
    pslice = tuple(slice(a, b) for a, b in box)
    values = scratch[pslice]
    first = int(values.reshape(-1)[0]) - 1
    start = []
    for size in reversed(index.shape):
        start.append(first % size)
        first //= size
    start.reverse()
    hf_box = tuple((s, s + (b - a)) for s, (a, b) in zip(start, box))
    if any(stop > size for (_, stop), size in zip(hf_box, index.shape)) or not torch.equal(
            values, index[tuple(slice(a, b) for a, b in hf_box)]) or int(mask.sum()) != values.numel():
        raise NotImplementedError(f"{pname}: the loader wrote a region that is not a box of the HF tensor")
    return Piece(pname, tuple(box), hf_box)


__all__ = ["probe_layout", "hf_parameter_shapes"]
