"""Studies: many runs over a grid of config values, executed together and compared per cell."""
