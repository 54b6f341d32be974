"""The tolerances a learner's numbers are held to by default (``--rtol``, ``--atol``): a module of their own, so
the command line's help names them without loading the comparison itself (core/diagnose.py)."""

RTOL, ATOL = 1e-4, 1e-6  # CS336's tests (numpy.testing.assert_allclose(atol=1e-6, rtol=1e-4))
