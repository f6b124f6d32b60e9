//! Unit tests of the master clock, skew and keeps judges.
