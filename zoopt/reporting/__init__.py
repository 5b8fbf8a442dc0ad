"""Reporting: rich progress bars, plots and experiment trackers (``report_to``).

The callback contract the trackers implement is :mod:`zoopt.callbacks`.
"""
