"""Stand-in for flash-attn-4 on machines without a Hopper GPU; see cute/interface.py."""
