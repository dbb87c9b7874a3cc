"""The lab beside the product: the verl run simulator, detection evaluation and the real-log loader.

Installed with the project so `verl-health demo`, `simulate` and `evaluate` work; `pipeline/` imports
nothing from here (tests/test_layering.py holds it to that)."""
