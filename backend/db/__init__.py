"""SQL store: declarative base with a naming convention, engine and session factory, models."""
