"""Run persistence: the seed log, a run directory's files, model references and atomic writes.

Below the workflows and the engines: nothing here imports an engine, a workflow or the CLI.
"""
