"""Bundled env_specs (data shipped with wml; see wmlce_tools.resources_data)."""
