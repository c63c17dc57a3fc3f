"""Input and output: dumps, samples and logs read within limits; documents written atomically."""
