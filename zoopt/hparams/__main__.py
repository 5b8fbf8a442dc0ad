"""``python -m zoopt.hparams``: regenerate docs/configuration.md and zoopt/configs/{train,grpo}.yaml."""

from . import write_generated

for path in write_generated():
    print(f"wrote {path}")
