"""What the ``zoopt`` commands run, above the contracts and engines (see docs/concepts.md).

``run`` (build helpers) and ``rundir`` (``RunDir``) sit below every workflow; ``loop`` drives a
trainer (``train.Trainer`` for ES, ``grpo.GRPOTrainer``); ``trainers.start_run`` picks one by
method for ``schedule`` (and so ``compare``) and the sweeps; ``analyze`` serves ``zoopt eval``
and ``zoopt analyze``.  This package imports none of its modules: import the one you need.
"""
