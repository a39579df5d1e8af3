"""Live streams: the LiveChannel interface, its DB-tailing and in-memory implementations, SSE."""
