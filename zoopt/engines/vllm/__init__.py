"""The vLLM engine: the driver (:mod:`.driver`), its rollouts in vLLM's terms (:mod:`.sampling`),
the weights it reaches in the workers (:mod:`.remote_weights`), the workers' side (:mod:`.worker`,
:mod:`.layout`), the multi-LoRA population (:mod:`.lora`) and how vLLM is started here
(:mod:`.environment`)."""

from .driver import VLLMEngine

__all__ = ["VLLMEngine"]
