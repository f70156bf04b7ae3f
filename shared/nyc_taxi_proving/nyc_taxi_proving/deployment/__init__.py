"""The team deployment on one machine: supervisord's configuration (every service, its command, order
and restart rule) and what supervisord cannot know (ports and secrets kept, initdb, readiness)."""
