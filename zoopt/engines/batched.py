"""A whole low-rank population in one batched forward (EGGROLL), on an in-process torch module.

For :class:`~zoopt.noise.LowRank` noise of rank r, member i (sign sᵢ, seed seedᵢ) perturbs a
matrix W ∈ ℝ^{m×n} by ``sᵢ·σ·Aᵢ·Bᵢᵀ/√r`` with the factors of ``LowRank.factors(seedᵢ, name)``
— exactly the ones ``LowRank.sample`` multiplies out and the step's update
(``LowRank.update_factors``) draws again, so seed logs replay through the ordinary ``apply``.
With the counter stream the factor tables are drawn on the module's device, in one call per
matrix for the whole population (no per-member host-to-device copy); the update redraws them
there the same way, bit for bit.  Rows of a batch belong to members (``rows(member_of_row)``), and each module
applies its member's perturbation in activation space, without ever forming a dense ε:

- **linear** ``y = x·Wᵀ + b``:       ``y += (x·Bᵢ)·(cᵢ·Aᵢ)ᵀ``,  cᵢ = sᵢ·σ/√r   (two small bmm; for
  r = 1 a row-wise dot product and one fused ``addcmul_``, added in place);
  a perturbed bias adds ``cast(M_b + sᵢσ·ε_b) − b`` to its row;
- **embedding** ``e = W[t]``:        ``e += (cᵢ·Aᵢ[t])·Bᵢᵀ``;
- **tied LM head**: the linear rule with the embedding's own factors (it *is* that tensor);
- **vectors** (norm weights):         the member's ``cast(M + sᵢσ·ε)`` is swapped in for its rows
  (a ``(rows, 1, …, d)`` weight that broadcasts), only for modules where a probe showed that
  this equals running each row with its own weight.

Anything else that the noise selects (a 3-D tensor, a bias outside a linear layer, a norm whose
probe failed) is refused with a one-line error naming the parameter and the ``exclude``
pattern that would skip it: no silent approximation.  The result equals the sequential dense
path up to floating-point rounding (the perturbation is added to activations rather than
rounded into the weights); ``tests/test_batched_population.py`` checks it to 1e-10 in float64.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch

from ..noise import LowRank
from ..types import Population
from .weights import MasterWeights


class RowLayout:
    """Which modules of ``module`` carry each parameter that ``noise`` selects, and how each can be
    perturbed per row (the ``linears``, ``embeddings`` and probed ``vectors`` lists).

    Raises a one-line ``ValueError`` naming a selected parameter that no rule covers exactly.
    Depends only on the module and the noise's selection, so an engine keeps one per selection.
    """

    def __init__(self, module: torch.nn.Module, weights: MasterWeights, noise: LowRank) -> None:
        self.module = module
        names = {id(p): n for n, p in weights.params.items()}
        selected = set(weights.selected(noise))
        self.linears: list[tuple[torch.nn.Linear, str | None, str | None]] = []
        self.embeddings: list[tuple[torch.nn.Embedding, str]] = []
        self.vectors: list[tuple[torch.nn.Module, str]] = []

        def chosen(param) -> str | None:
            name = None if param is None else names.get(id(param))
            return name if name in selected else None

        for mod in module.modules():
            own = dict(mod.named_parameters(recurse=False))
            if isinstance(mod, torch.nn.Linear):
                w, b = chosen(mod.weight), chosen(mod.bias)
                if w or b:
                    self.linears.append((mod, w, b))
            elif isinstance(mod, torch.nn.Embedding):
                if chosen(mod.weight):
                    self.embeddings.append((mod, chosen(mod.weight)))
            elif set(own) == {"weight"} and own["weight"].ndim == 1 and chosen(own["weight"]):
                self.vectors.append((mod, chosen(own["weight"])))
        self._probe_vectors()
        covered = ({n for _, w, b in self.linears for n in (w, b) if n} | {n for _, n in self.embeddings}
                   | {n for _, n in self.vectors})
        for name in weights.selected(noise):  # in parameter order: the first offender is named
            if name not in covered or len(weights.shapes[name]) > 2:
                raise ValueError(f"the batched low-rank path cannot perturb parameter {name!r} exactly: skip it "
                                 f"with noise.exclude=[{name!r}] or set population: sequential")
        self.matrices = sorted({n for _, n, _ in self.linears if n} | {n for _, n in self.embeddings})
        self.vector_names = sorted({n for _, n in self.vectors} | {b for _, _, b in self.linears if b})

    def _probe_vectors(self) -> None:
        """Keep only vector modules whose rows can take their own weight: run a calibration
        forward to learn each module's input shape, then check, on random input of that shape,
        that a swapped-in ``(rows, 1, …, d)`` weight equals one call per row."""
        if not self.vectors:
            return
        shapes: dict[int, torch.Size] = {}

        def record(mod, args) -> None:
            shapes.setdefault(id(mod), args[0].shape)

        handles = [mod.register_forward_pre_hook(record) for mod, _ in self.vectors]
        p = next(self.module.parameters())
        try:
            with torch.no_grad():
                self.module(input_ids=torch.ones((2, 3), dtype=torch.long, device=p.device), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        self.vectors = [(mod, name) for mod, name in self.vectors
                        if id(mod) in shapes and shapes[id(mod)][0] == 2 and _rows_equal_loop(mod, shapes[id(mod)])]


class BatchedLowRank:
    """Per-member factor tables of one population on a :class:`RowLayout`; :meth:`rows` installs
    the hooks that make row k of a forward run as member ``members[k]``.

    Args:
        layout: the module's :class:`RowLayout` for ``noise``'s selection.
        weights: the module's :class:`MasterWeights` (master values of vectors).
        noise: the population's ``LowRank`` noise.
        population: members (seed, sign) at scale σ.
    """

    def __init__(self, layout: RowLayout, weights: MasterWeights, noise: LowRank, population: Population) -> None:
        self.layout, self.noise, self.population = layout, noise, population
        param = next(iter(weights.params.values()))
        self.dtype, self.device = param.dtype, param.device
        self._embedded = {n for _, n in layout.embeddings}
        self._tables(weights)

    # -- set-up -------------------------------------------------------------------------------
    def _tables(self, weights: MasterWeights) -> None:
        """Factor tables ``(N, m, r)`` with cᵢ = sᵢσ/√r folded into A and ``(N, n, r)`` for B;
        each member's perturbed vectors.  Arithmetic is in fp32 like the dense path (float64
        for a float64 model), cast once to the working dtype."""
        pop = self.population
        acc = torch.float64 if self.dtype == torch.float64 else torch.float32
        self.a: dict[str, torch.Tensor] = {}
        self.b: dict[str, torch.Tensor] = {}
        for name in self.layout.matrices:  # member_factors: the one definition (vLLM's adapters use it too)
            a, b = member_factors(self.noise, pop, name, weights.shapes[name], acc, device=self.device)
            self.a[name], self.b[name] = a.to(self.dtype), b.to(self.dtype)
        self.vec: dict[str, torch.Tensor] = {}   # member's perturbed vector, cast like the dense path
        self.bias: dict[str, torch.Tensor] = {}  # member's perturbed bias minus the working bias
        scales = [pop.scale(i) for i in range(len(pop))]
        for name in self.layout.vector_names:  # every member's ε of a vector in one draw
            base = weights.params[name].detach()
            m = base.to(acc) if acc == torch.float64 else weights.master[name]
            eps = self.noise.samples([mem.seed for mem in pop.members], name, weights.shapes[name], m.device)
            scale = torch.tensor(scales, dtype=acc, device=m.device).view(-1, *[1] * m.ndim)
            rows = (eps.to(acc) * scale).add_(m).to(self.dtype)  # row i: cast(M + sᵢσ·εᵢ), as the dense path
            self.vec[name] = rows
            self.bias[name] = rows - base[None]

    # -- the batched forward ------------------------------------------------------------------
    @contextlib.contextmanager
    def rows(self, members: Sequence[int]) -> Iterator[None]:
        """While inside, row k of every forward of ``module`` runs as member ``members[k]``."""
        idx = torch.as_tensor(list(members), dtype=torch.long, device=self.device)
        n_rows = len(members)
        rank1 = self.noise.rank == 1
        at = {n: t.index_select(0, idx).transpose(1, 2).contiguous() for n, t in self.a.items()}  # (rows, r, m)
        a = {n: t.index_select(0, idx) for n, t in self.a.items() if n in self._embedded}
        b = {n: t.index_select(0, idx) for n, t in self.b.items()}  # (rows, d, r)
        bt = {n: b[n].transpose(1, 2).contiguous() for n in b if rank1 or n in self._embedded}  # (rows, r, d)

        def add_low_rank(out3, u, v):
            """``out3 += u @ v`` in place, (rows, s, r) @ (rows, r, k).  For r = 1 an outer
            product, one fused ``addcmul_`` (on the CPU, bf16 ``bmm`` of these shapes and an
            unfused ``out + u*v`` each cost several times the fused op)."""
            return out3.addcmul_(u, v) if rank1 else out3.baddbmm_(u, v)

        def times_b(xs, w):  # (rows, s, d) @ Bᵢ → (rows, s, r); for r = 1 a row-wise dot product
            return (xs * bt[w]).sum(-1, keepdim=True) if rank1 else torch.bmm(xs, b[w])
        vec = {n: t.index_select(0, idx) for n, t in self.vec.items()}
        bias = {n: t.index_select(0, idx) for n, t in self.bias.items()}

        def linear_hook(w, bn):
            def hook(mod, args, out):
                x = args[0]
                if x.shape[0] != n_rows:
                    raise RuntimeError(f"batched low-rank: a linear layer saw {x.shape[0]} rows, not {n_rows}")
                if w is not None:
                    add_low_rank(out.view(n_rows, -1, out.shape[-1]), times_b(x.reshape(n_rows, -1, x.shape[-1]), w),
                                 at[w])
                if bn is not None:
                    out.add_(bias[bn].view(n_rows, *([1] * (out.ndim - 2)), -1))
                return out
            return hook

        def embedding_hook(w):
            def hook(mod, args, out):
                ids = args[0]
                rows_a = a[w][torch.arange(n_rows, device=ids.device)[:, None], ids]  # (rows, s, r)
                return add_low_rank(out, rows_a, bt[w])
            return hook

        saved: dict[int, tuple[torch.nn.Module, torch.nn.Parameter]] = {}  # the real weights while swapped

        def vector_pre_hook(name):
            def hook(mod, args):
                saved[id(mod)] = (mod, mod._parameters["weight"])
                mod._parameters["weight"] = vec[name].view(n_rows, *([1] * (args[0].ndim - 2)), -1)
            return hook

        def vector_post_hook(mod, args, out):
            mod._parameters["weight"] = saved.pop(id(mod))[1]

        lay = self.layout
        handles = [mod.register_forward_hook(linear_hook(w, bn)) for mod, w, bn in lay.linears]
        handles += [mod.register_forward_hook(embedding_hook(w)) for mod, w in lay.embeddings]
        for mod, name in lay.vectors:
            handles.append(mod.register_forward_pre_hook(vector_pre_hook(name)))
            handles.append(mod.register_forward_hook(vector_post_hook))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            for mod, weight in saved.values():  # an exception inside a forward skips the post-hook
                mod._parameters["weight"] = weight


def member_factors(noise: LowRank, population: Population, name: str, shape,
                   dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Every member's factors of matrix ``name``, with its coefficient folded into A:
    ``a[i] = cᵢ·Aᵢ`` (``(N, m, r)``), ``b[i] = Bᵢ`` (``(N, n, r)``), cᵢ = sᵢσ/√r, so member i's
    perturbation is ``a[i]·b[i]ᵀ = sᵢσ·Aᵢ·Bᵢᵀ/√r`` with ``(Aᵢ, Bᵢ) = noise.factors(seedᵢ, name, shape)``.

    The arithmetic of :class:`BatchedLowRank`'s tables, in ``dtype`` (fp32; float64 for a float64
    model) on ``device``: cᵢ = sᵢσ/√r, then Aᵢ·cᵢ.  The factors come from one
    :meth:`~zoopt.noise.LowRank.factor_table` draw (counter stream: on ``device``; an
    antithetic pair draws its factors once) — the same bits the update's
    :meth:`~zoopt.noise.LowRank.update_factors` draws.  For engines that hand the factors
    elsewhere too (vLLM's LoRA adapters, on the CPU)."""
    coef = torch.tensor([population.scale(i) for i in range(len(population))], dtype=dtype) / noise.rank ** 0.5
    fa, fb = noise.factor_table([m.seed for m in population.members], name, shape, device)
    return fa.to(dtype) * coef.to(fa.device)[:, None, None], fb.to(dtype)


def _rows_equal_loop(mod: torch.nn.Module, shape: torch.Size) -> bool:
    """Does ``mod`` with a ``(2, 1, …, d)`` weight give, row by row, what it gives with each row's
    own ``(d,)`` weight?  (True for ``weight * normalized(x)`` norms; False for anything that
    needs the weight's exact shape.)"""
    weight = mod._parameters["weight"]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tuple(shape), generator=gen, dtype=torch.float32).to(weight.device, weight.dtype)
    w2 = (weight.detach()[None] * (1 + torch.randn((2, weight.shape[0]), generator=gen).to(weight.device, weight.dtype)))
    try:
        with torch.no_grad():
            mod._parameters["weight"] = w2.view(2, *([1] * (x.ndim - 2)), -1)
            batched = mod(x)
            loop = []
            for k in range(2):
                mod._parameters["weight"] = torch.nn.Parameter(w2[k].clone(), requires_grad=False)
                loop.append(mod(x[k:k + 1]))
        return batched.shape == x.shape and torch.equal(batched, torch.cat(loop))
    except (RuntimeError, ValueError):
        return False
    finally:
        mod._parameters["weight"] = weight


__all__ = ["BatchedLowRank", "RowLayout", "member_factors"]
