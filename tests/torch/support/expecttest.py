"""A stand-in for the `expecttest` package (Debian has none), which
torch.testing._internal.common_utils imports for TestCase.assertExpectedInline. The OpInfo
sweep (test_opinfo.py) uses only op_db's sample inputs, never expect tests; this file is put
on sys.path by that test alone, after the real package where one is installed."""

import unittest

ACCEPT = False  # common_utils reads it (EXPECTTEST_ACCEPT)


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (upstream's name)
        raise NotImplementedError("expecttest stand-in: no expect tests here")
