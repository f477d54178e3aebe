"""Site profiles: schema, loading, detection.

The site-data layer: may import only the foundation (`errors`, `cache`, `walltime`,
`resources_data`); everything above it reads a `SiteProfile`.
"""
