"""Infrastructure shared by every component: settings, metrics, logs, database preparation and the
re-embedding job. Server, operator and embedder import it without importing the command line."""
