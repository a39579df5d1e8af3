"""Users, roles, browser sessions and API tokens."""
