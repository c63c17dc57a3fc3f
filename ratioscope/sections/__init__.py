"""Report sections: one accumulator per section, fed chunk by chunk, merged exactly."""
