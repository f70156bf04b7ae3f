"""Airflow's room: its configuration from the project settings, the operators the DAGs are built
from, and Airflow's standalone on 127.0.0.1 only."""
