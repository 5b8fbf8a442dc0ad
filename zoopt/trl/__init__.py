"""``zoopt.trl``: a TRL ``GRPOTrainer`` script, trained by evolution strategies — change the import.

    from zoopt.trl import ESConfig, ESTrainer          # was: from trl import GRPOConfig, GRPOTrainer

    trainer = ESTrainer(model="HuggingFaceTB/SmolLM2-135M-Instruct",
                        reward_funcs=[think_format_reward, my_reward],
                        args=ESConfig(output_dir="runs/es", learning_rate=2.5e-3, reward_weights=[0.5, 1.0]),
                        train_dataset=dataset)
    trainer.train()

The arguments are TRL's where the concept is the same (:class:`~zoopt.hparams.ESConfig`; a
test holds them to ``GRPOTrainer``'s and ``GRPOConfig``'s signatures).  ``model`` is an id, a
local directory, a name zoopt knows (``smollm2-135m``, ``tiny``) or a ``PreTrainedModel``
(with ``processing_class``, its tokenizer, when its config names none).  ``reward_funcs`` is one
TRL reward function or a list, summed with ``reward_weights``
(:class:`~zoopt.rewards.functions.RewardFunctions`); the datasets are ``datasets.Dataset`` s with
a ``prompt`` column, plain or conversational, whose other columns reach the reward functions.

:meth:`ESTrainer.train` is ``zoopt.fit`` (:mod:`zoopt.workflows.fit`): the seed log, metrics,
evaluations (before and after, greedy, on ``eval_dataset`` when given) and ``report_to``'s
trackers land in ``output_dir``; each step's record carries ``rewards/NAME/mean`` and
``rewards/NAME/std`` per reward function, as TRL logs them.

This package is the TRL integration, above the workflows it hands to users: the trainer is
:mod:`zoopt.trl.trainer`, ``ESConfig`` is :class:`zoopt.hparams.ESConfig`.
"""

from ..hparams import ESConfig
from .trainer import ESTrainer

__all__ = ["ESTrainer", "ESConfig"]
