"""Pipeline parallelism: cutting a model into stages and running micro-batches through them."""
