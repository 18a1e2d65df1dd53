"""Demonstration data: the scripted privileged-state oracle (`oracle`)."""
