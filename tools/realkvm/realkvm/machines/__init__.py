"""Machines of the real-KVM harness: one module per emulator (see base.py)."""
