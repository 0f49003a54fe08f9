"""A stand-in for the expecttest package, which torch's test modules import and Debian 12 does not package (Debian 13
does). torch's distributed tests make no expect-test assertions; this one compares exactly."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (expecttest's name)
        self.assertEqual(actual, expect)
