"""Lineage helpers shared by the Airflow and Metaflow sides."""
