"""What runs in a rank's process: its boot, its life, the gate of a controlled schedule."""
