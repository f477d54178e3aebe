"""Bundled site_configs (data shipped with wml; see wmlce_tools.resources_data)."""
