"""``run --live``: placeholder replaced below."""
