"""Act: the operator's writes — a plan's actions carried out against the API server and Postgres, the
notifications sent, the schedules' runs created, and the leader's background work (retention, lock watch)."""
