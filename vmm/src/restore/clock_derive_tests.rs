//! Unit tests of the kvmclock continuity judge.
