"""A whole population in one batched forward, one adapter per row (adapter space, HF engine).

In adapter space member i is the adapter ``(Aᵢ, Bᵢ) = cast(M + sᵢσ·ε(seedᵢ, name))`` for every
LoRA tensor — exactly what ``perturb`` would write, tensor by tensor, from the same fp32 master
and the same noise (any noise kind: the tensors are small, so each member's is materialised).
:class:`AdapterRows` stacks them, ``(N, r, n)`` for A and ``(N, m, r)`` for B, and while
:meth:`AdapterRows.rows` is active, each targeted layer's ``lora_A`` and
``lora_B`` linears compute, instead of their own product, row k's with its own member's tensors:

    lora_A:  h_k = x_k · A_{i(k)}ᵀ        lora_B:  y_k = h_k · B_{i(k)}ᵀ

(one ``bmm`` each, over the rows grouped by member: see :meth:`AdapterRows.rows`), so PEFT's layer
adds ``(lora_alpha/r)·y`` as usual and the base layer — quantized or not — runs once for the
whole batch.  The replacement is the linear's ``forward`` itself (an instance attribute, removed
on exit), not a forward hook: a hook would run after the linear had computed the working
adapter's product, only to discard it.  The base is never touched and the
working adapter stays at the master.  Why not PEFT's own mixed-adapter batches
(``adapter_names=``): they loop in Python over adapters, O(N) small kernels per layer, and need
N adapters registered in the model; the replaced forwards need neither.  The result equals member-by-member
``perturb`` + forward up to floating-point rounding of the batched product
(``tests/test_adapter_space.py``).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch

from ..noise import Noise
from ..types import Population
from .weights import MasterWeights


def member_tables(weights: MasterWeights, noise: Noise, population: Population) -> dict[str, torch.Tensor]:
    """Every member's adapter tensors: logical name → ``(N, *shape)`` in the working dtype, on the
    working tensor's device, row i = ``cast(M + sᵢσ·ε(seedᵢ, name))`` — what ``perturb`` writes,
    from the same fp32 master and noise, in the same fp32 operations ((ε·scale) + M, one cast).
    Names the noise does not select are the working tensor itself for every member (a view).
    One definition for both engines: the HF engine's per-row forwards (:class:`AdapterRows`) and the
    vLLM engine's one-adapter-per-member call (:mod:`zoopt.engines.vllm.adapter_space`).
    Keeps the drawn noise for the next ``apply`` within the weights' noise-cache budget
    (:meth:`MasterWeights.keep_noise`).  Needs one whole piece per name (adapter space: the
    tensors live in one process)."""
    selected = set(weights.selected(noise))
    scales = torch.tensor([population.scale(i) for i in range(len(population))], dtype=torch.float32)
    tables: dict[str, torch.Tensor] = {}
    for name, pieces in weights.layout.items():
        (piece,) = pieces
        working, master = weights.params[piece.param], weights.master[piece.param]
        if name in selected:
            seeds = [m.seed for m in population.members]
            eps = noise.samples(seeds, name, weights.shapes[name], master.device)
            weights.keep_noise(noise, seeds, name, eps)  # the update's ε, not drawn again by apply
            # as perturb: (ε·scale) + M in fp32, then one cast to the working dtype
            table = (eps * scales.to(eps.device).view(-1, *[1] * master.ndim)).add_(master[None]).to(working.dtype)
        else:
            table = working.detach()[None].expand(len(population), *working.shape)
        tables[name] = table.to(working.device)
    return tables


class AdapterRows:
    """Every member's adapter tensors for one population (see the module docstring).

    Args:
        module: the injected HF model (its ``lora_A``/``lora_B`` linears run the members' rows).
        weights: the engine's :class:`MasterWeights` over the adapter tensors.
        noise: the population's noise (its include/exclude filter: unselected tensors stay at
            the master for every member).
        population: members (seed, sign) at scale σ.
    """

    def __init__(self, module: torch.nn.Module, weights: MasterWeights, noise: Noise, population: Population) -> None:
        self.population = population
        # param name → (N, *shape) in the working dtype
        self.tables: dict[str, torch.Tensor] = {weights.layout[name][0].param: table
                                                for name, table in member_tables(weights, noise, population).items()}
        owner = {id(p): n for n, p in weights.params.items()}
        self.linears: list[tuple[torch.nn.Module, str]] = [
            (mod, owner[id(mod.weight)]) for mod in module.modules()
            if isinstance(mod, torch.nn.Linear) and id(mod.weight) in owner]

    @contextlib.contextmanager
    def rows(self, members: Sequence[int]) -> Iterator[None]:
        """While inside, row k of every forward runs with member ``members[k]``'s adapter.

        The rows are grouped by member — ``U`` distinct members, at most ``G`` rows each — and
        each replaced linear runs one ``bmm`` of ``(U, G·T, in)`` activations against the ``U``
        members' own ``(in, out)`` tensors, read from the tables in place (a copy of them only
        when the members present are not a contiguous range): no weight is copied per row and
        nothing is held between forwards but two index vectors.  When the rows already come in
        member order, as many each (the population call's member-major rows), the activations
        are not copied either."""
        n_rows = len(members)
        some = next(iter(self.tables.values()))
        uniq = sorted(set(int(m) for m in members))
        group: dict[int, list[int]] = {m: [] for m in uniq}
        for k, m in enumerate(members):
            group[int(m)].append(k)
        width = max(len(v) for v in group.values())
        # slot u·G + g holds row group[uniq[u]][g], or the zero row n_rows (padding)
        take = torch.full((len(uniq) * width,), n_rows, dtype=torch.long)
        slot_of = torch.empty(n_rows, dtype=torch.long)
        for u, m in enumerate(uniq):
            for g, k in enumerate(group[m]):
                take[u * width + g] = k
                slot_of[k] = u * width + g
        # the common case needs no copy at all: rows already in member order, as many each
        # (the population call's rows are member-major), and the members a contiguous range
        in_order = take.tolist() == list(range(n_rows))
        contiguous = uniq == list(range(uniq[0], uniq[-1] + 1))
        take, slot_of = take.to(some.device), slot_of.to(some.device)
        uniq_t = torch.as_tensor(uniq, dtype=torch.long, device=some.device)

        def row_forward(name):  # replaces the forward of the linear holding param ``name``
            table = self.tables[name]

            def forward(x):
                if x.shape[0] != n_rows:
                    raise RuntimeError(f"adapter rows: a LoRA layer saw {x.shape[0]} rows, not {n_rows}")
                # (U, out, in): a view of the tables when the members are a range, else a copy of them
                w = table[uniq[0] : uniq[-1] + 1] if contiguous else table.index_select(0, uniq_t)
                flat = x.reshape(n_rows, -1, x.shape[-1])                # (rows, T, in)
                if in_order:
                    y = torch.bmm(flat.view(len(uniq), -1, flat.shape[-1]), w.transpose(1, 2))
                else:
                    padded = torch.cat([flat, flat.new_zeros(1, *flat.shape[1:])]).index_select(0, take)
                    y = torch.bmm(padded.view(len(uniq), -1, flat.shape[-1]), w.transpose(1, 2))  # (U, G·T, out)
                    y = y.view(len(uniq) * width, flat.shape[1], -1).index_select(0, slot_of)
                return y.reshape(*x.shape[:-1], y.shape[-1])
            return forward

        # nn.Module.__call__ calls self.forward: an instance attribute shadows Linear.forward
        replaced = []
        try:
            for mod, name in self.linears:
                mod.forward = row_forward(name)
                replaced.append(mod)
            yield
        finally:
            for mod in replaced:
                del mod.forward


__all__ = ["AdapterRows", "member_tables"]
