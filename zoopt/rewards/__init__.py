"""Calling rewards: the guard (time limits, failures never crash a step), the inputs a reward
receives (TRL's shapes), and ``RewardFunctions`` (TRL reward functions as one objective).

The objective contract itself is :mod:`zoopt.objective`.
"""
