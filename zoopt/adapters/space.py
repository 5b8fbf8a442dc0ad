"""The parameter space of a run: ``full`` (every weight) or ``adapter`` (LoRA adapters only).

:class:`AdapterSpace` carries LoRA's knobs in PEFT's own names, so a TRL/PEFT user's
``LoraConfig`` means the same here (:meth:`AdapterSpace.from_lora_config`):

- ``r``: the rank; the adapted weight is ``W + (lora_alpha / r)·B·A`` with ``A ∈ ℝ^{r×n}``,
  ``B ∈ ℝ^{m×r}``;
- ``lora_alpha``: the scale numerator (vLLM and PEFT both multiply by ``lora_alpha / r``);
- ``target_modules``: module-name suffixes, or ``"all-linear"`` (every linear layer but the
  LM head);
- ``init_lora_weights``: how the adapter starts.  ``True`` (PEFT's default, and zoopt's): A
  Kaiming-uniform, **B = 0**, so the adapted model starts *equal to the base*.  The price: at
  B = 0 a perturbation of A changes nothing at first order — W + s(B + σε_B)(A + σε_A) − W =
  sσ·ε_B·A + sσ²·ε_B·ε_A — so the first steps move B (through ε_B·A, A acting as a fixed
  random projection) and A only random-walks until B ≠ 0.  We keep it because a run that starts
  anywhere but the base makes every "before" number (accuracy, Pass@k, drift) a different
  model's; ``tests/test_adapter_space.py`` pins what it does to the first step.  ``"gaussian"``
  (A Gaussian, B = 0) is the same trade; ``False`` starts both random (the model is *not* the
  base).
- ``init_seed``: the torch seed the adapter's start is drawn with (on the CPU, before the model
  moves to its device, so every device starts from the same bits).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

SPACES = ("full", "adapter")
INIT_CHOICES = (True, False, "gaussian")


def check_space(space: str) -> str:
    if space not in SPACES:
        raise ValueError(f"space must be one of {', '.join(SPACES)}, got {space!r}")
    return space


@dataclass(frozen=True)
class AdapterSpace:
    """LoRA's knobs (PEFT's names); every value checked with a one-line error naming the key."""

    r: int = 8
    lora_alpha: float = 16.0
    target_modules: tuple[str, ...] | str = "all-linear"
    init_lora_weights: bool | str = True
    init_seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r < 1:
            raise ValueError(f"adapter.r must be an integer ≥ 1, got {self.r!r}")
        if isinstance(self.lora_alpha, bool) or not isinstance(self.lora_alpha, (int, float)) or not self.lora_alpha > 0:
            raise ValueError(f"adapter.lora_alpha must be a number > 0, got {self.lora_alpha!r}")
        targets = self.target_modules
        if isinstance(targets, str) and targets != "all-linear":
            targets = (targets,)
        if not isinstance(targets, str):
            targets = tuple(targets)
            if not targets or not all(isinstance(t, str) and t for t in targets):
                raise ValueError(f"adapter.target_modules must be 'all-linear' or a list of module names, "
                                 f"got {self.target_modules!r}")
        object.__setattr__(self, "target_modules", targets)
        object.__setattr__(self, "lora_alpha", float(self.lora_alpha))
        if self.init_lora_weights not in INIT_CHOICES or (self.init_lora_weights == 1 and self.init_lora_weights is not True):
            raise ValueError(f"adapter.init_lora_weights must be true, false or 'gaussian', got {self.init_lora_weights!r}")
        if isinstance(self.init_seed, bool) or not isinstance(self.init_seed, int) or self.init_seed < 0:
            raise ValueError(f"adapter.init_seed must be an integer ≥ 0, got {self.init_seed!r}")

    @property
    def scaling(self) -> float:
        """``lora_alpha / r``: what B·A is multiplied by."""
        return self.lora_alpha / self.r

    def lora_config(self):
        """PEFT's ``LoraConfig`` for this space (no dropout: a rollout is a deterministic forward)."""
        from peft import LoraConfig

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(r=self.r, lora_alpha=self.lora_alpha, target_modules=targets, lora_dropout=0.0,
                          bias="none", init_lora_weights=self.init_lora_weights, task_type="CAUSAL_LM")

    @classmethod
    def from_lora_config(cls, config, init_seed: int = 0) -> "AdapterSpace":
        """From a PEFT ``LoraConfig`` (what TRL users pass as ``peft_config``).  What adapter
        space cannot honour is refused by name: dropout (a rollout must be deterministic), a
        bias, DoRA, rsLoRA, per-module ranks."""
        for key, ok in (("lora_dropout", not config.lora_dropout), ("bias", config.bias == "none"),
                        ("use_dora", not getattr(config, "use_dora", False)),
                        ("use_rslora", not getattr(config, "use_rslora", False)),
                        ("rank_pattern", not getattr(config, "rank_pattern", None)),
                        ("alpha_pattern", not getattr(config, "alpha_pattern", None))):
            if not ok:
                raise ValueError(f"peft_config.{key}={getattr(config, key)!r} is not supported in adapter space")
        targets = config.target_modules
        targets = targets if isinstance(targets, str) or targets is None else tuple(sorted(targets))
        return cls(r=int(config.r), lora_alpha=float(config.lora_alpha), target_modules=targets or "all-linear",
                   init_lora_weights=config.init_lora_weights, init_seed=init_seed)

    def to_dict(self) -> dict[str, Any]:
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return {"r": self.r, "lora_alpha": self.lora_alpha, "target_modules": targets,
                "init_lora_weights": self.init_lora_weights, "init_seed": self.init_seed}


def adapter_space_from_dict(data: Mapping[str, Any] | None) -> AdapterSpace:
    """:class:`AdapterSpace` from a config's ``adapter`` mapping; an unknown key is a one-line error."""
    data = dict(data or {})
    known = {f.name for f in fields(AdapterSpace)}
    for key in data:
        if key not in known:
            raise ValueError(f"adapter.{key}: unknown key (known: {', '.join(sorted(known))})")
    if isinstance(data.get("target_modules"), list):
        data["target_modules"] = tuple(data["target_modules"])
    return AdapterSpace(**data)


__all__ = ["AdapterSpace", "SPACES", "check_space", "adapter_space_from_dict"]
