"""Altair figures and ipywidgets dashboards. Only presentation lives here; numbers come from the package."""
