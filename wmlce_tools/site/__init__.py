"""Site profiles: schema, loading, detection."""
