"""What runs in the test process: launching worlds, watching them, reporting."""
