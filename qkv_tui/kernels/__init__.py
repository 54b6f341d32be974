"""The forward pass written once: norm, RoPE, projections, masked softmax and mixing, under a numeric policy.

NumPy only, and below everything but ``base``: the engine (exact), the hand computation, the printed
worksheet, the decode and tile views and the model importers all call these functions, so each
operation has one implementation and the policies differ only where docs/ says the numbers do.
"""
