"""The conformance cases every op's module (rtp_ref/ops) assembles: how a case is built on the device under test,
graded by named checks, and diagnosed when its bytes are wrong; the one locator and the value checks all ops share."""
