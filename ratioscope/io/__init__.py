"""Loading token dumps and sample files."""
