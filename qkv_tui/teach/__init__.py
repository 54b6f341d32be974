"""Teaching computations built on the core: the operation trace, the stepper, the KV-cache
decode, hand rounding, what-if scaling and the quiz. Imports only the core.
"""
