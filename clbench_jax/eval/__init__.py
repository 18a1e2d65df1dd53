"""Evaluation: metrics over per-episode records (language_metrics.py: the language-perturbation battery)."""
